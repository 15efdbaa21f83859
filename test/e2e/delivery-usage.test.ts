/**
 * Content that only nginx serves (signed URLs answered without the app) still counts as used for
 * the size cap: the built service reads nginx's usage log, so such content outlives content
 * stored after it but never served. The real service, a real nginx and real fetches.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import type { RunningNginx } from '../support/nginx.js';
import { startServiceBehindNginx } from '../support/behind-nginx.js';
import type { ServiceHandle } from '../support/service.js';

const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
// Each content is a 2.1-second mono WAV at 44.1 kHz (about 187 kB) and its peaks.json (about
// 20 kB): the cap holds two of them, not three.
const CAP = 450_000;
const TONES = { older: 2.11, newer: 2.12, third: 2.13 };

let media: MediaServer;
let svc: ServiceHandle;
let nginx: RunningNginx;
let logDir: string;

beforeAll(async () => {
  media = await startMediaServer();
  for (const [name, seconds] of Object.entries(TONES)) {
    const tone = await makeTone(FIXTURE_DIR, { seconds, channels: 1, sampleRate: 44100, format: 'flac' });
    media.serveFile(`/${name}.flac`, tone.path, { contentType: 'audio/flac' });
  }
  // Shared by nginx (writes) and the app (reads and empties), as the compose volume is.
  logDir = await mkdtemp(path.join(tmpdir(), 'sf-usage-'));
  const usageLog = path.join(logDir, 'usage.log');
  ({ svc, nginx } = await startServiceBehindNginx({
    env: {
      FETCH_ALLOW_HOSTS: media.hostPort,
      ARTIFACT_CAP_BYTES: String(CAP),
      STORE_BYTES_PER_KEY_PER_DAY: '0',
      NGINX_USAGE_LOG: usageLog,
    },
    nginx: { usageLogPath: usageLog },
  }));
});

afterAll(async () => {
  await nginx?.stop();
  await svc?.stop();
  await media?.close();
  if (logDir) await rm(logDir, { recursive: true, force: true });
});

function lastUses(): Map<string, number> {
  const db = new Database(path.join(svc.dataDir, 'source-fetch.sqlite'), { readonly: true, fileMustExist: true });
  try {
    const rows = db.prepare('select content_id, last_used_at from cache_entries').all() as Array<{
      content_id: string;
      last_used_at: number;
    }>;
    return new Map(rows.map((row) => [row.content_id, row.last_used_at]));
  } finally {
    db.close();
  }
}

async function cidsOnDisk(): Promise<string[]> {
  const root = path.join(svc.dataDir, 'artifacts');
  const shards = (await readdir(root)).filter((entry) => /^[0-9a-f]{2}$/.test(entry));
  return (await Promise.all(shards.map((shard) => readdir(path.join(root, shard))))).flat().sort();
}

async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function fetchDone(name: keyof typeof TONES) {
  const job = await svc.waitForJob((await svc.submit(media.url(`/${name}.flac`))).job_id, ['done', 'failed']);
  expect(job.status).toBe('done');
  return { cid: job.result!.content_id, signedUrl: job.result!.artifacts[0]!.signed_url };
}

describe('usage of content nginx serves alone', () => {
  it('keeps it hot: of two stored, the older one, served only by nginx since, survives the third', async () => {
    const older = await fetchDone('older');
    const newer = await fetchDone('newer');
    expect(await cidsOnDisk()).toEqual([older.cid, newer.cid].sort());
    // The control: as stored, the older one is the colder, the one the cap would evict.
    expect(lastUses().get(older.cid)!).toBeLessThan(lastUses().get(newer.cid)!);

    // A listener seeks through the older one with its signed URL.
    for (let i = 0; i < 3; i++) {
      const res = await fetch(nginx.url(older.signedUrl), {
        headers: { range: `bytes=${i * 1000}-${i * 1000 + 999}` },
      });
      expect(res.status).toBe(206);
      await res.arrayBuffer();
    }
    // nginx answered alone: no upstream time in its log.
    const served = await nginx.accessLines(
      (line) => line.cid === older.cid,
      (lines) => lines.length >= 3,
    );
    expect(served.map((line) => [line.status, line.upstream_time])).toEqual([
      ['206', ''],
      ['206', ''],
      ['206', ''],
    ]);

    await waitFor(
      'the serves to reach the store from the usage log',
      () => lastUses().get(older.cid)! > lastUses().get(newer.cid)!,
    );

    const third = await fetchDone('third');
    await waitFor('the cap to evict one', async () => (await cidsOnDisk()).length === 2);
    expect(await cidsOnDisk()).toEqual([older.cid, third.cid].sort());
    expect(svc.logs.some((line) => line.msg.startsWith('nginx usage log'))).toBe(false);
  });
});
