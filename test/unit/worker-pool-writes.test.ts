import { eq } from 'drizzle-orm';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../../src/db/database.js';
import { enqueueJob, getJobRow } from '../../src/jobs/queue.js';
import { createWorkerPool, type JobContext, type WorkerPool } from '../../src/jobs/worker-pool.js';
import { BACKENDS, openTestDatabase } from '../support/test-database.js';
import { until } from '../support/until.js';

/**
 * What a worker pool writes for a running job: its progress at the download's start and past each
 * quarter at the next heartbeat, otherwise only with the lease renewal (a quarter of the lease);
 * between renewals it reads, and still stops a job whose lease it lost within a heartbeat.
 */
describe.each(BACKENDS)('worker pool writes on %s', (kind) => {
  const LEASE_MS = 40_000; // renewed every 7.5 s of the pool's clock (a quarter would be 10 s)
  let database: Database;
  let pool: WorkerPool | undefined;
  let clock = 1_000_000;
  /** Calls of the pool's clock: at least one per heartbeat. */
  let clockReads = 0;
  let ctx: JobContext | undefined;

  beforeEach(async () => {
    database = await openTestDatabase(kind);
    clock = 1_000_000;
    clockReads = 0;
    ctx = undefined;
    await enqueueJob(database, { id: 'a', url: 'https://m.example/a', urlKey: 'https://m.example/a', createdAt: 1 });
    pool = createWorkerPool({
      database,
      nodeId: 'node-1',
      concurrency: 1,
      leaseMs: LEASE_MS,
      maxAttempts: 3,
      now: () => {
        clockReads++;
        return clock;
      },
      log: pino({ level: 'silent' }),
      heartbeatMs: 20,
      runJob: async (_job, context) => {
        ctx = context;
        await new Promise((resolve) => context.signal.addEventListener('abort', resolve, { once: true }));
        return undefined;
      },
    });
    await pool.start();
  });
  afterEach(async () => {
    await pool?.stop(0);
    await database.close();
  });

  const row = async () => (await getJobRow(database, 'a'))!;
  const heartbeats = async (count: number) => {
    const from = clockReads;
    await until('heartbeats', () => (clockReads >= from + count ? true : undefined));
  };

  it('progress: written at the start and past a quarter at once, otherwise with the renewal; the node itself knows it at once', async () => {
    const running = await until('the job running', () => ctx);
    // The first heartbeat renewed the lease (none was renewed before).
    await until('the first renewal', async () =>
      (await row()).leaseExpiresAt === clock + LEASE_MS ? true : undefined,
    );

    running.reportProgress!(100, 1000);
    expect(pool!.progressOf('a')).toEqual({ bytes: 100, totalBytes: 1000 });
    await until('the start written', async () => ((await row()).progressBytes === 100 ? true : undefined));

    // Within the same quarter: kept here, not written, over many heartbeats.
    running.reportProgress!(200, 1000);
    await heartbeats(10);
    expect(await row()).toMatchObject({ progressBytes: 100, leaseExpiresAt: 1_000_000 + LEASE_MS });
    expect(pool!.progressOf('a')).toEqual({ bytes: 200, totalBytes: 1000 });

    // Past the first quarter: written at once.
    running.reportProgress!(300, 1000);
    await until('the quarter written', async () => ((await row()).progressBytes === 300 ? true : undefined));

    // The renewal, due a quarter of the lease later, writes the lease and the latest progress.
    running.reportProgress!(310, 1000);
    clock += LEASE_MS / 4;
    await until('the renewal', async () => {
      const seen = await row();
      return seen.leaseExpiresAt === clock + LEASE_MS ? seen : undefined;
    });
    expect(await row()).toMatchObject({ progressBytes: 310, progressTotalBytes: 1000, status: 'running' });
  });

  it('a lease lost between renewals stops the job within a heartbeat (read, not renewed)', async () => {
    const running = await until('the job running', () => ctx);
    await until('the first renewal', async () =>
      (await row()).leaseExpiresAt === clock + LEASE_MS ? true : undefined,
    );
    // Taken back and claimed by another node meanwhile: no renewal is due on this node's clock.
    await database.db.update(database.t.jobs).set({ lockOwner: 'node-2' }).where(eq(database.t.jobs.id, 'a'));
    await until('the job stopped', () => (running.signal.aborted ? true : undefined));
    expect(running.signal.reason).toBe('lost');
    expect(await row()).toMatchObject({ lockOwner: 'node-2', leaseExpiresAt: 1_000_000 + LEASE_MS });
  });
});
