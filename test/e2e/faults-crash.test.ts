import { readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { processesMatching } from '../support/processes.js';
import { startService, type ServiceHandle } from '../support/service.js';
import { readDb, storedFiles } from '../support/store-inspect.js';

/**
 * kill -9 of the service in the middle of downloads, again and again. While it is dead, and
 * after the last restart: no partial artifact is visible (every file at a content address hashes
 * to it), every cache row has its file, and the database passes integrity_check. At the end
 * every job is done or failed with a code, and no temporary file or tool process is left.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const KILLS = 3;

let media: MediaServer;
let tones: MediaFixture[];
const dataDir = path.join(tmpdir(), `sf-crash-${process.pid}-${Date.now()}`);

beforeAll(async () => {
  // Distinct audio per URL (so distinct content ids); ~0.7–1 MB WAVs sent at 1 MB/s.
  tones = await Promise.all([4, 5, 6, 7].map((seconds) => makeTone(FIXTURE_DIR, { seconds, channels: 2, sampleRate: 44100, format: 'wav' })));
  media = await startMediaServer();
  tones.forEach((tone, i) => media.serveFile(`/crash-${i}.wav`, tone.path, { contentType: 'audio/wav', throttleBytesPerSec: 1024 * 1024 }));
});

afterAll(async () => {
  await media?.close();
  await rm(dataDir, { recursive: true, force: true });
});

async function expectConsistent(label: string) {
  const root = path.join(dataDir, 'artifacts');
  const files = await storedFiles(root);
  for (const file of files) expect(file.sha256, `${label}: ${file.contentId}/${file.name}`).toBe(file.contentId);
  const db = readDb(dataDir);
  expect(db.integrity, label).toBe('ok');
  const present = new Set(files.map((f) => `${f.contentId}/${f.name}`));
  for (const row of db.cacheEntries) expect(present.has(`${row.content_id}/${row.name}`), `${label}: cache row without file`).toBe(true);
  for (const job of db.jobs.filter((j) => j.status === 'done')) {
    expect(present.has(`${job.content_id}/audio.wav`), `${label}: done job without file`).toBe(true);
  }
  return db;
}

describe('kill -9 in the middle of downloads, repeated', () => {
  it(`survives ${KILLS} kills: consistent store and database after each, every job ends with a code, nothing left over`, async () => {
    const env = { FETCH_ALLOW_HOSTS: media.hostPort, WORKER_CONCURRENCY: '2', MAX_ATTEMPTS: String(KILLS + 3) };
    let svc: ServiceHandle = await startService({ dataDir, env });
    const apiKey = svc.apiKey;
    const ids: string[] = [];
    for (let i = 0; i < tones.length; i++) ids.push((await svc.submit(media.url(`/crash-${i}.wav`))).job_id);
    // A second submission of a queued URL follows its leader and must end with it.
    ids.push((await svc.submit(media.url('/crash-3.wav'))).job_id);

    // Kill at different points: early in a download, later in it, around conversion and storing.
    const delays = [400, 1300, 2100];
    for (let round = 0; round < KILLS; round++) {
      const deadline = Date.now() + 20_000;
      while (Date.now() < deadline) {
        const jobs = await Promise.all(ids.map((id) => svc.getJob(id)));
        if (jobs.some((j) => j.status === 'running' && (j.progress?.bytes_done ?? 0) > 0)) break;
        if (jobs.every((j) => ['done', 'failed'].includes(j.status))) break;
        await sleep(50);
      }
      await sleep(delays[round % delays.length]!);
      await svc.kill();
      await expectConsistent(`after kill ${round + 1}`);
      svc = await startService({ dataDir, apiKey, env });
      expect(svc.logs.find((line) => line.msg === 'start-up recovery')).toBeDefined();
    }

    try {
      const final = await Promise.all(ids.map((id) => svc.waitForJob(id, ['done', 'failed', 'canceled'], 90_000)));
      for (const job of final) {
        expect(['done', 'failed'], JSON.stringify(job)).toContain(job.status);
        if (job.status === 'failed') expect(job.error!.code).toMatch(/^[a-z_]+$/);
        else expect(job.result!.content_id).toMatch(/^[0-9a-f]{64}$/);
      }
      // With attempts to spare, every job got through.
      expect(final.map((j) => j.status)).toEqual(ids.map(() => 'done'));
      expect(final[4]!.result!.content_id).toBe(final[3]!.result!.content_id);
      // The kills did land in the middle of work: jobs were taken up again after a crash.
      expect(final.filter((j) => (j.attempts as number) > 1).length).toBeGreaterThanOrEqual(2);
      const settle = Date.now() + 10_000;
      while ((await readdir(path.join(dataDir, 'work'))).length > 0 && Date.now() < settle) await sleep(100);
      expect(await readdir(path.join(dataDir, 'work'))).toEqual([]);
      expect(await readdir(path.join(dataDir, 'artifacts', '.incoming')).catch(() => [])).toEqual([]);
      for (const id of ids) expect(await processesMatching(id)).toEqual([]);
    } finally {
      await svc.stop();
    }
    const db = await expectConsistent('after the last restart');
    expect(new Set(db.cacheEntries.map((r) => r.content_id)).size).toBe(tones.length);
  });
});
