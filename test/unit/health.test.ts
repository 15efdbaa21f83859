import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHealthCheck, DOWNLOADER_MAX_AGE_DAYS, releaseDateOf } from '../../src/health.js';

/** The health check's reading of the downloader's age, from the date in its version. */

const DAY_MS = 24 * 3600 * 1000;
let root: string;
beforeAll(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'sf-health-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

function check(ytdlpVersion: string | null, now: number, confinement: 'netns' | 'off' = 'netns') {
  return createHealthCheck({
    tools: { ytdlp: 'yt-dlp', ffmpeg: 'ffmpeg' },
    checkConfinement: () =>
      Promise.resolve(confinement === 'off' ? { mode: 'off', ok: true } : { mode: 'netns', ok: true }),
    locate: (name) => Promise.resolve(`/usr/bin/${name}`),
    version: (found) => Promise.resolve(found.endsWith('yt-dlp') ? ytdlpVersion : `${found} version 5.1`),
    pingDatabase: () => Promise.resolve(true),
    databaseKind: 'sqlite',
    nodeId: 'node-1',
    artifactRoot: root,
    now: () => now,
  })();
}

describe('the downloader version date', () => {
  it.each([
    ['2023.03.04', '2023-03-04'],
    ['2024.08.06.232710', '2024-08-06'],
    ['2026.8.19', '2026-08-19'],
    [' 2025.12.31 \n', '2025-12-31'],
  ])('reads %j as %s', (version, date) => {
    expect(releaseDateOf(version)?.toISOString().slice(0, 10)).toBe(date);
  });

  it.each([null, '', 'unknown', '2023.13.01', '2023.02.30', 'v2023.03.04', '2023-03-04', '20230304'])(
    'finds no date in %j',
    (version) => {
      expect(releaseDateOf(version)).toBeNull();
    },
  );
});

describe('health: the downloader age', () => {
  const released = Date.UTC(2023, 2, 4);

  it(`warns past ${DOWNLOADER_MAX_AGE_DAYS} days, without changing the status`, async () => {
    const report = await check('2023.03.04', released + 1000 * DAY_MS + 5 * 3600 * 1000);
    expect(report.downloader).toMatchObject({
      present: true,
      version: '2023.03.04',
      released_on: '2023-03-04',
      age_days: 1000,
      outdated: true,
    });
    expect(report.status).toBe('ok');
    expect(report.can_fetch).toBe(true);
    expect(report.warnings).toEqual([
      {
        code: 'downloader_outdated',
        message: expect.stringMatching(/^yt-dlp 2023\.03\.04 is 1000 days old \(more than 90\)/),
      },
    ]);
  });

  it('is not outdated on its 90th day, and is on its 91st', async () => {
    const onDay = async (days: number) => (await check('2023.03.04', released + days * DAY_MS)).downloader;
    expect(await onDay(DOWNLOADER_MAX_AGE_DAYS)).toMatchObject({ age_days: 90, outdated: false });
    expect(await onDay(DOWNLOADER_MAX_AGE_DAYS + 1)).toMatchObject({ age_days: 91, outdated: true });
    expect((await check('2023.03.04', released + 90 * DAY_MS)).warnings).toEqual([]);
  });

  it('a version without a date, or a date ahead of the clock, is no warning', async () => {
    expect((await check('custom-build', released)).downloader).toMatchObject({
      released_on: null,
      age_days: null,
      outdated: false,
    });
    expect((await check('2023.03.04', released - 3 * DAY_MS)).downloader).toMatchObject({
      age_days: 0,
      outdated: false,
    });
    expect((await check(null, released)).downloader).toMatchObject({
      present: false,
      released_on: null,
      outdated: false,
    });
  });

  it('degraded still means unconfined tools, whatever the age', async () => {
    expect((await check('2023.03.04', released + 10 * DAY_MS, 'off')).status).toBe('degraded');
    expect((await check('2023.03.04', released + 1000 * DAY_MS, 'netns')).status).toBe('ok');
  });
});

describe('health: a database that never answers', () => {
  function checkWithPing(pingDatabase: () => Promise<boolean>) {
    return createHealthCheck({
      tools: { ytdlp: 'yt-dlp', ffmpeg: 'ffmpeg' },
      checkConfinement: () => Promise.resolve({ mode: 'netns', ok: true }),
      locate: (name) => Promise.resolve(`/usr/bin/${name}`),
      version: () => Promise.resolve('2026.10.26'),
      pingDatabase,
      pingTimeoutMs: 50,
      databaseKind: 'postgres',
      nodeId: 'node-1',
      artifactRoot: root,
      now: () => Date.UTC(2026, 10, 1),
    });
  }

  it('reads as down once the ping is late, and later checks share the one ping still waiting', async () => {
    let pings = 0;
    const check = checkWithPing(() => {
      pings++;
      return new Promise<boolean>(() => {});
    });
    const [first, second] = await Promise.all([check(), check()]);
    const third = await check();
    for (const report of [first, second, third]) {
      expect(report.database.ok).toBe(false);
      expect(report.status).toBe('unavailable');
    }
    expect(pings).toBe(1);
  });

  it('control: a database that answers in time reads as up, and each check pings it again', async () => {
    let pings = 0;
    const check = checkWithPing(() => {
      pings++;
      return Promise.resolve(true);
    });
    expect((await check()).database.ok).toBe(true);
    expect((await check()).database.ok).toBe(true);
    expect(pings).toBe(2);
  });
});

describe('health: the tools’ versions', () => {
  it('asks each tool file for its version once, again when the file changes, and again after a failed answer', async () => {
    const tools = path.join(root, 'tools');
    await mkdir(tools, { recursive: true });
    const ytdlp = path.join(tools, 'yt-dlp');
    const ffmpeg = path.join(tools, 'ffmpeg');
    await writeFile(ytdlp, '#!/bin/sh\n');
    await writeFile(ffmpeg, '#!/bin/sh\n');
    const asked: string[] = [];
    let answer: string | null = '2026.10.26';
    let clock = Date.UTC(2026, 10, 1);
    const check = createHealthCheck({
      tools: { ytdlp, ffmpeg },
      checkConfinement: () => Promise.resolve({ mode: 'netns', ok: true }),
      locate: (found) => Promise.resolve(found),
      version: (found) => {
        asked.push(path.basename(found));
        return Promise.resolve(found === ytdlp ? answer : 'ffmpeg version 5.1');
      },
      pingDatabase: () => Promise.resolve(true),
      databaseKind: 'sqlite',
      nodeId: 'node-1',
      artifactRoot: root,
      now: () => clock,
      cacheMs: 1000,
    });
    const next = async () => {
      clock += 2000;
      return check();
    };
    expect((await check()).downloader.version).toBe('2026.10.26');
    expect(asked).toEqual(['yt-dlp', 'ffmpeg']);
    // Past the cache, the same files are not run again.
    expect((await next()).downloader).toMatchObject({ present: true, version: '2026.10.26' });
    expect(asked).toEqual(['yt-dlp', 'ffmpeg']);
    // An upgrade: a new file in its place is asked.
    answer = '2026.11.30';
    await rm(ytdlp);
    await writeFile(ytdlp, '#!/bin/sh\n# the next release\n');
    expect((await next()).downloader.version).toBe('2026.11.30');
    expect(asked).toEqual(['yt-dlp', 'ffmpeg', 'yt-dlp']);
    // A failed answer reads as absent and is asked again next time.
    answer = null;
    await writeFile(ytdlp, '#!/bin/sh\n# broken\n');
    expect((await next()).downloader.present).toBe(false);
    answer = '2026.12.01';
    expect((await next()).downloader).toMatchObject({ present: true, version: '2026.12.01' });
    expect(asked).toEqual(['yt-dlp', 'ffmpeg', 'yt-dlp', 'yt-dlp', 'yt-dlp']);
  });
});
