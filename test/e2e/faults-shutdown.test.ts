import { readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { processesMatching } from '../support/processes.js';
import { startService } from '../support/service.js';
import { readDb } from '../support/store-inspect.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';

/**
 * SIGTERM: the service stops taking work at once, lets running jobs finish within
 * SHUTDOWN_GRACE_S, stops and queues again what is still running after it (the queued jobs stay
 * queued), exits 0, and after a restart the re-queued jobs complete. On both databases.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const GRACE_S = 5;

let media: MediaServer;
let short: MediaFixture;
let long: MediaFixture;
const dataDirs: string[] = [];

beforeAll(async () => {
  short = await makeTone(FIXTURE_DIR, { seconds: 3, channels: 1, sampleRate: 22050, format: 'mp3' });
  long = await makeTone(FIXTURE_DIR, { seconds: 30, channels: 2, sampleRate: 44100, format: 'wav' });
  media = await startMediaServer();
});

afterAll(async () => {
  await media?.close();
  for (const dataDir of dataDirs) await rm(dataDir, { recursive: true, force: true });
});

describe.each(BACKENDS)('SIGTERM on %s', (kind) => {
  it('stops taking work, drains within the grace period, re-queues the rest, exits 0; the rest completes after a restart', async () => {
    const dataDir = path.join(tmpdir(), `sf-sigterm-${kind}-${process.pid}-${Date.now()}`);
    dataDirs.push(dataDir);
    const databaseEnv = await serviceEnv(kind);
    // ~24 KB at 16 KB/s: done about 1.5 s after it starts, well within the grace period.
    media.serveFile(`/${kind}/short.mp3`, short.path, { contentType: 'audio/mpeg', throttleBytesPerSec: 16 * 1024 });
    // ~5.3 MB at 256 KB/s: ~20 s, far past the grace period.
    media.serveFile(`/${kind}/long.wav`, long.path, { contentType: 'audio/wav', throttleBytesPerSec: 256 * 1024 });
    media.serveFile(`/${kind}/queued.mp3`, short.path, { contentType: 'audio/mpeg' });
    const env = {
      ...databaseEnv,
      FETCH_ALLOW_HOSTS: media.hostPort,
      WORKER_CONCURRENCY: '2',
      SHUTDOWN_GRACE_S: String(GRACE_S),
    };
    const svc = await startService({ dataDir, env });
    const shortJob = await svc.submit(media.url(`/${kind}/short.mp3`));
    const longJob = await svc.submit(media.url(`/${kind}/long.wav`));
    const queuedJob = await svc.submit(media.url(`/${kind}/queued.mp3`));
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      const [a, b] = await Promise.all([svc.getJob(shortJob.job_id), svc.getJob(longJob.job_id)]);
      if (a.status === 'running' && b.status === 'running' && (b.progress?.bytes_done ?? 0) > 0) break;
      await sleep(50);
    }
    expect((await svc.getJob(queuedJob.job_id)).status).toBe('queued');

    const signaledAt = Date.now();
    const exitCode = svc.stop('SIGTERM');
    await sleep(200);
    // No new work: a new request is refused (connection refused, or 503 shutting_down on a kept-alive connection).
    const attempt = await svc
      .request('/sources', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ url: media.url(`/${kind}/late.mp3`) }),
      })
      .then(async (res) => ({ status: res.status, code: ((await res.json()) as { code?: string }).code }))
      .catch(() => ({ status: 0, code: 'connection_refused' }));
    expect([0, 503]).toContain(attempt.status);
    if (attempt.status === 503) expect(attempt.code).toBe('shutting_down');

    expect(await exitCode).toBe(0);
    const tookMs = Date.now() - signaledAt;
    // The grace period, plus the tools' own SIGTERM→SIGKILL grace, plus slack; not the ~20 s of the long job.
    expect(tookMs).toBeLessThan((GRACE_S + 6) * 1000);
    expect(tookMs).toBeGreaterThanOrEqual(GRACE_S * 1000 - 200);

    const db = await readDb(dataDir, databaseEnv.DATABASE_URL);
    if (db.integrity !== null) expect(db.integrity).toBe('ok');
    expect(db.totalsConsistent).toBe(true);
    const status = (id: string) => db.jobs.find((j) => j.id === id)!;
    expect(status(shortJob.job_id).status).toBe('done');
    expect(status(longJob.job_id)).toMatchObject({ status: 'queued', error_code: null });
    expect(status(queuedJob.job_id).status).toBe('queued');
    expect(db.jobs).toHaveLength(3);
    expect(media.requestsFor(`/${kind}/queued.mp3`)).toEqual([]);
    expect(await readdir(path.join(dataDir, 'work'))).toEqual([]);
    expect(await processesMatching(longJob.job_id)).toEqual([]);

    // After a restart the re-queued and the queued job complete.
    media.serveFile(`/${kind}/long.wav`, long.path, { contentType: 'audio/wav' });
    const again = await startService({ dataDir, apiKey: svc.apiKey, env });
    try {
      // A clean stop left nothing to recover: no folder, no tool, no job to take back.
      expect(again.logs.find((line) => line.msg === 'start-up recovery')).toMatchObject({
        work_folders_removed: 0,
        orphaned_tools_killed: 0,
      });
      const [longDone, queuedDone] = await Promise.all([
        again.waitForJob(longJob.job_id, ['done', 'failed']),
        again.waitForJob(queuedJob.job_id, ['done', 'failed']),
      ]);
      expect(longDone.status).toBe('done');
      expect(longDone.attempts).toBe(1);
      expect(queuedDone.status).toBe('done');
      expect(again.logs.some((line) => line.msg === 'took back jobs whose lease ran out')).toBe(false);
    } finally {
      expect(await again.stop()).toBe(0);
    }
  });
});
