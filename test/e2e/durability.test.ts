import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startService, type ServiceHandle } from '../support/service.js';

/**
 * A 202 means the job is on disk: the service is killed with SIGKILL while submissions are still
 * arriving, and after a restart on the same SQLite file every job it acknowledged is there.
 * (A power cut cannot be staged here; that the 202 waits for a sync of the WAL that began after
 * the job's commit is shown by test/unit/db-sqlite-durability.test.ts.)
 */
const SUBMISSIONS = 200;
const KILL_AFTER_ACKS = 100;

let dataDir: string | undefined;
const services: ServiceHandle[] = [];

afterEach(async () => {
  for (const service of services.splice(0)) await service.kill();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

describe('durability of acknowledged submissions', () => {
  it('every job answered 202 before a kill -9 is present after the restart', async () => {
    dataDir = await mkdtemp(path.join(tmpdir(), 'sf-durability-'));
    // Nothing is fetched: no worker, and an allowed destination that nobody serves.
    const env = {
      WORKER_CONCURRENCY: '0',
      FETCH_ALLOW_HOSTS: '127.0.0.1:9',
      RATE_LIMIT_PER_MINUTE: '0',
      MAX_QUEUED_JOBS: '10000',
    };
    const first = await startService({ dataDir, env });
    services.push(first);

    const acknowledged: string[] = [];
    let killed: Promise<void> | undefined;
    const submissions = Array.from({ length: SUBMISSIONS }, async (_, i) => {
      try {
        const res = await first.request('/sources', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ url: `http://127.0.0.1:9/track-${i}.m4a` }),
        });
        if (res.status !== 202) return;
        acknowledged.push(((await res.json()) as { job_id: string }).job_id);
        if (acknowledged.length === KILL_AFTER_ACKS) killed = first.kill();
      } catch {
        // Cut off by the kill: not acknowledged, so nothing is promised for it.
      }
    });
    await Promise.all(submissions);
    await killed;
    expect(first.process.signalCode).toBe('SIGKILL');
    expect(acknowledged.length).toBeGreaterThanOrEqual(KILL_AFTER_ACKS);

    const second = await startService({ dataDir, env, apiKey: first.apiKey });
    services.push(second);
    const missing: string[] = [];
    for (const id of acknowledged) {
      const res = await second.request(`/jobs/${id}`);
      if (res.status !== 200) missing.push(`${id}: ${res.status}`);
      await res.body?.cancel();
    }
    expect(missing).toEqual([]);
  });

  it('a second service on the same SQLite file is refused at start, and the first goes on serving', async () => {
    dataDir = await mkdtemp(path.join(tmpdir(), 'sf-durability-'));
    const env = { WORKER_CONCURRENCY: '0' };
    const first = await startService({ dataDir, env });
    services.push(first);
    await expect(startService({ dataDir, env, apiKey: first.apiKey })).rejects.toThrow(
      /SQLite serves one process.*PostgreSQL/,
    );
    const res = await first.request('/jobs/no-such-job');
    expect(res.status).toBe(404);
    await res.body?.cancel();
  });
});
