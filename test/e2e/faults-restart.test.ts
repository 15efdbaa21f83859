import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { HEAVY_TEST_TIMEOUT_MS, startService, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';

/**
 * A lone node killed with SIGKILL in the middle of three downloads and started again is back at
 * once: the jobs its dead process held are taken back at start, not after their lease (60 s
 * here), because on SQLite the file's lock proves the old process gone, and on PostgreSQL the
 * node's own NODE_ID (or a dead process of this machine) does. That other nodes' jobs keep their
 * leases on PostgreSQL is test/unit/job-leases-gone.test.ts's.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const LEASE_S = 60;

let media: MediaServer;
let tones: MediaFixture[];

beforeAll(async () => {
  tones = await Promise.all(
    [3, 3.5, 4].map((seconds) => makeTone(FIXTURE_DIR, { seconds, channels: 2, sampleRate: 44100, format: 'wav' })),
  );
  media = await startMediaServer();
  tones.forEach((tone, i) =>
    media.serveFile(`/restart-${i}.wav`, tone.path, { contentType: 'audio/wav', throttleBytesPerSec: 256 * 1024 }),
  );
});

afterAll(async () => {
  await media?.close();
});

describe.each(BACKENDS)('a lone node restarted after kill -9, on %s', (kind) => {
  let dataDir: string;
  let env: Record<string, string>;
  let svc: ServiceHandle | undefined;

  beforeAll(async () => {
    dataDir = await mkdtemp(path.join(tmpdir(), `sf-restart-${kind}-`));
    env = {
      ...(await serviceEnv(kind)),
      FETCH_ALLOW_HOSTS: media.hostPort,
      WORKER_CONCURRENCY: '3',
      JOB_LEASE_S: String(LEASE_S),
      NODE_ID: `node-${kind}`,
    };
  });
  afterAll(async () => {
    await svc?.stop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it(
    'takes back the jobs its dead process held at once, well within their lease',
    async () => {
      svc = await startService({ dataDir, env });
      const apiKey = svc.apiKey;
      const ids: string[] = [];
      for (let i = 0; i < tones.length; i++)
        ids.push((await svc.submit(media.url(`/restart-${i}.wav?${kind}`))).job_id);
      // Every job downloading when the node dies.
      const deadline = Date.now() + 30_000;
      for (;;) {
        const jobs = await Promise.all(ids.map((id) => svc!.getJob(id)));
        if (jobs.every((job) => job.status === 'running' && (job.progress?.bytes_done ?? 0) > 0)) break;
        if (Date.now() > deadline) throw new Error(`not all running: ${JSON.stringify(jobs.map((j) => j.status))}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await svc.kill();

      const restartedAt = Date.now();
      svc = await startService({ dataDir, apiKey, env });
      const recovery = svc.logs.find((line) => line.msg === 'start-up recovery');
      expect(recovery?.leases_expired).toBe(3);
      const ended = await Promise.all(ids.map((id) => svc!.waitForJob(id, ['done', 'failed'], LEASE_S * 1000)));
      expect(ended.map((job) => job.status)).toEqual(['done', 'done', 'done']);
      expect(ended.every((job) => (job.attempts as number) === 2)).toBe(true);
      // Each download takes about 2.5 to 3.5 s at 256 KiB/s, in parallel: far from the 60 s lease.
      expect(Date.now() - restartedAt).toBeLessThan((LEASE_S * 1000) / 3);
    },
    HEAVY_TEST_TIMEOUT_MS,
  );
});
