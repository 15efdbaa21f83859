/**
 * /healthz reads the downloader's age from the date in its version: two real services, one with
 * a yt-dlp that says it is 2023.03.04 (Debian bookworm's) and one with a nightly of ten days ago.
 * The old one is reported as outdated, with a warning (also logged at start), and the node stays
 * available: 200, status ok.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeYtDlpOfVersion } from '../support/fake-tools.js';
import { startService, type ServiceHandle } from '../support/service.js';

const DAY_MS = 24 * 3600 * 1000;
const tenDaysAgo = new Date(Date.now() - 10 * DAY_MS);
const pad = (n: number) => String(n).padStart(2, '0');
const RECENT = `${tenDaysAgo.getUTCFullYear()}.${pad(tenDaysAgo.getUTCMonth() + 1)}.${pad(tenDaysAgo.getUTCDate())}.232710`;

let dir: string;
let old: ServiceHandle;
let recent: ServiceHandle;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-ytdlp-age-'));
  const [oldTool, recentTool] = await Promise.all([
    writeYtDlpOfVersion(path.join(dir, 'old'), '2023.03.04'),
    writeYtDlpOfVersion(path.join(dir, 'recent'), RECENT),
  ]);
  [old, recent] = await Promise.all([
    startService({ env: { YTDLP_PATH: oldTool } }),
    startService({ env: { YTDLP_PATH: recentTool } }),
  ]);
});

afterAll(async () => {
  await Promise.all([old, recent].map((svc) => svc?.stop()));
  await rm(dir, { recursive: true, force: true });
});

interface Health {
  status: string;
  can_fetch: boolean;
  downloader: { version: string; released_on: string | null; age_days: number | null; outdated: boolean };
  warnings: Array<{ code: string; message: string }>;
}

async function health(svc: ServiceHandle): Promise<{ status: number; body: Health }> {
  const res = await svc.request('/healthz', { auth: false });
  return { status: res.status, body: (await res.json()) as Health };
}

async function logged(svc: ServiceHandle, msg: RegExp): Promise<boolean> {
  // The warning is logged after the first health check, which runs beside start-up.
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    if (svc.logs.some((line) => msg.test(line.msg))) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}

describe('health: the downloader age', () => {
  it('an old yt-dlp: outdated, with a warning, and the node still available (200, ok)', async () => {
    const { status, body } = await health(old);
    expect(status).toBe(200);
    expect(body.status).toBe('ok');
    expect(body.can_fetch).toBe(true);
    const expectedAge = Math.floor((Date.now() - Date.UTC(2023, 2, 4)) / DAY_MS);
    expect(body.downloader).toMatchObject({ version: '2023.03.04', released_on: '2023-03-04', outdated: true });
    expect(body.downloader.age_days).toBeGreaterThanOrEqual(expectedAge - 1);
    expect(body.downloader.age_days).toBeLessThanOrEqual(expectedAge);
    expect(body.warnings).toHaveLength(1);
    expect(body.warnings[0]).toMatchObject({ code: 'downloader_outdated' });
    expect(body.warnings[0]!.message).toContain('2023.03.04');
    expect(await logged(old, /^yt-dlp 2023\.03\.04 is \d+ days old/)).toBe(true);
  });

  it('a ten-day-old nightly: not outdated, no warning, none logged', async () => {
    const { status, body } = await health(recent);
    expect(status).toBe(200);
    expect(body.downloader).toMatchObject({
      version: RECENT,
      released_on: tenDaysAgo.toISOString().slice(0, 10),
      outdated: false,
    });
    expect(body.downloader.age_days).toBeGreaterThanOrEqual(9);
    expect(body.downloader.age_days).toBeLessThanOrEqual(10);
    expect(body.warnings).toEqual([]);
    // Its first health check has run and logged no warning, where the old node's did (the control).
    for (const svc of [old, recent]) expect(await logged(svc, /^first health check$/)).toBe(true);
    expect(old.logs.some((line) => /days old/.test(line.msg))).toBe(true);
    expect(recent.logs.some((line) => /days old/.test(line.msg))).toBe(false);
  });
});
