import { createHash } from 'node:crypto';
import { readFile, readdir, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type ServiceHandle } from '../support/service.js';

/**
 * The size cap with real fetches: the store is filled past its cap, and the least recently
 * used content (stored or served) goes first.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
// Each 2-second mono WAV at 44.1 kHz is 176,478 bytes; the cap holds two of them, not three.
const CAP = 400_000;

let media: MediaServer;
let svc: ServiceHandle;

beforeAll(async () => {
  media = await startMediaServer();
  for (const [name, seconds] of [['a', 2], ['b', 2.01], ['c', 2.02]] as const) {
    const tone = await makeTone(FIXTURE_DIR, { seconds, channels: 1, sampleRate: 44100, format: 'flac' });
    media.serveFile(`/${name}.flac`, tone.path, { contentType: 'audio/flac' });
  }
  svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, ARTIFACT_CAP_BYTES: String(CAP) } });
});

afterAll(async () => {
  await svc?.stop();
  await media?.close();
});

async function filesOnDisk(): Promise<Map<string, number>> {
  const root = path.join(svc.dataDir, 'artifacts');
  const files = new Map<string, number>();
  for (const shard of (await readdir(root)).filter((entry) => /^[0-9a-f]{2}$/.test(entry))) {
    for (const cid of await readdir(path.join(root, shard))) {
      files.set(cid, (await stat(path.join(root, shard, cid, 'audio.wav'))).size);
    }
  }
  return files;
}

async function metric(name: string): Promise<number> {
  const text = await (await svc.request('/metrics')).text();
  const line = text.split('\n').find((entry) => entry.startsWith(`${name} `));
  return Number(line?.split(' ')[1]);
}

async function fetchDone(name: string) {
  const job = await svc.waitForJob((await svc.submit(media.url(`/${name}.flac`))).job_id, ['done', 'failed']);
  expect(job.status).toBe('done');
  return job.result!.content_id;
}

describe('store size cap', () => {
  it('evicts the coldest content past the cap, keeps the hottest, and downloads evicted content again', async () => {
    const a = await fetchDone('a');
    const b = await fetchDone('b');
    expect([...(await filesOnDisk()).keys()].sort()).toEqual([a, b].sort());

    // Using a again (a resubmission is born done) makes b the coldest.
    const reused = await svc.submit(media.url('/a.flac'));
    expect(reused.born_done).toBe(true);
    await sleep(1500); // uses are written in batches, once a second

    const c = await fetchDone('c');
    const deadline = Date.now() + 10_000;
    while ((await filesOnDisk()).has(b) && Date.now() < deadline) await sleep(100);
    const files = await filesOnDisk();
    expect([...files.keys()].sort()).toEqual([a, c].sort());

    // The byte count is exact: the same as the files on disk, and within the cap.
    const onDisk = [...files.values()].reduce((sum, size) => sum + size, 0);
    expect(await metric('store_bytes')).toBe(onDisk);
    expect(await metric('store_artifacts')).toBe(2);
    expect(onDisk).toBeLessThanOrEqual(CAP);
    expect(await metric('store_evictions_total')).toBe(1);
    for (const [cid] of files) {
      const bytes = await readFile(path.join(svc.dataDir, 'artifacts', cid.slice(0, 2), cid, 'audio.wav'));
      expect(createHash('sha256').update(bytes).digest('hex')).toBe(cid);
    }

    // b's alias no longer makes a job born done: it is downloaded again.
    const before = media.requestsFor('/b.flac').length;
    const again = await svc.submit(media.url('/b.flac'));
    expect(again.born_done).toBe(false);
    const done = await svc.waitForJob(again.job_id, ['done', 'failed']);
    expect(done.result!.content_id).toBe(b);
    expect(media.requestsFor('/b.flac').length).toBeGreaterThan(before);
  });
});
