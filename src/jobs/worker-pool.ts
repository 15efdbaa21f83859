import type { Database, JobRow } from '../db/database.js';
import type { Logger } from '../logger.js';
import { createClaimLoop } from '../claim-loop.js';
import {
  claimNextJob,
  heldLeases,
  reclaimExpiredLeases,
  releaseJob,
  renewLeases,
  requeueInterrupted,
  type Ended,
  type Progress,
} from './queue.js';

/**
 * A node's pool of workers, claiming queued jobs from the database that all nodes share. Each
 * claim is a lease that the pool renews while the job runs; every heartbeat (a second) it checks
 * that it still holds its jobs' leases, and a job whose lease it no longer holds (canceled through
 * any node, or taken back after the lease ran out) is stopped at once.
 *
 * What a node writes for its running jobs is bounded per node, not per progress report: the jobs'
 * progress is kept here (progressOf, which this node's event streams read) and written with the
 * leases, one statement for all of the node's jobs every renewal (a quarter of the lease, at most
 * 7.5 s); between renewals the heartbeat only reads. A job's first progress, and its progress past
 * each quarter of a known total, are written at once (those jobs alone), so that other nodes see a
 * download start and move on; otherwise they see its progress as of the last renewal.
 *
 * Any pool takes back jobs whose lease ran out on a dead node. Each running job owns an
 * AbortController: 'canceled' when told so, 'lost' when the lease is gone, 'shutdown' when a
 * shutdown outlasts its grace period (the job goes back to the queue, the attempt not counted).
 * A job function that throws gives its job back (the attempt counts).
 */
export type AbortReason = 'canceled' | 'lost' | 'shutdown';

export interface JobContext {
  signal: AbortSignal;
  log: Logger;
  /** This node: the lease holder, which alone may record the job's end. */
  owner: string;
  /**
   * What the job has downloaded so far: kept, and written with the node's leases. Absent where
   * nobody follows the job's progress (a job run alone, outside a pool).
   */
  reportProgress?: (bytes: number, totalBytes: number | null) => void;
}

/** Runs a claimed job to its end; returns the transition it made (done or failed), if any. */
export type JobRunner = (job: JobRow, ctx: JobContext) => Promise<Ended | undefined>;

/** Channels every node listens on (Postgres NOTIFY; in-process on SQLite). */
export const JOBS_QUEUED_CHANNEL = 'source_fetch_jobs_queued';
export const JOB_CANCELED_CHANNEL = 'source_fetch_job_canceled';

export interface WorkerPool {
  start(): Promise<void>;
  /** Something was queued: look now instead of at the next poll. */
  wake(): void;
  abort(jobId: string, reason: AbortReason): void;
  busyCount(): number;
  /** The latest progress of a job running here, which the database may not have yet. */
  progressOf(jobId: string): Progress | undefined;
  /** Stops claiming, lets running jobs finish within graceMs, then aborts and re-queues them. */
  stop(graceMs: number): Promise<void>;
}

export interface WorkerPoolDeps {
  database: Database;
  nodeId: string;
  concurrency: number;
  leaseMs: number;
  maxAttempts: number;
  now: () => number;
  log: Logger;
  runJob: JobRunner;
  /** Every job end this pool causes besides its runners' own (attempts exhausted). */
  onJobEnded?: (ended: Ended) => void;
  /** False while jobs must not start (the tools cannot be confined): they stay queued. */
  canClaim?: () => boolean;
  /** Default 1000: how often to look for queued jobs without being woken. */
  pollIntervalMs?: number;
  /** Default 1000: how often to check that the leases are still held. */
  heartbeatMs?: number;
}

/** How often a node renews its leases (and writes its jobs' progress): a quarter of the lease, at most this. */
const MAX_RENEWAL_MS = 7_500;

/** The quarter of a known total a download has reached; 0 when its total is unknown. */
const quarterOf = ({ bytes, totalBytes }: Progress) =>
  totalBytes ? Math.min(4, Math.floor((bytes * 4) / totalBytes)) : 0;

interface Running {
  controller: AbortController;
  done: Promise<void>;
  progress?: Progress;
  /** The progress last written, if any. */
  written?: Progress;
}

/** Progress other nodes should see now: the download's first, or past another quarter. */
const isUrgent = ({ progress, written }: Running) =>
  progress !== undefined && (written === undefined || quarterOf(progress) > quarterOf(written));

export function createWorkerPool(deps: WorkerPoolDeps): WorkerPool {
  const running = new Map<string, Running>();
  const heartbeatMs = deps.heartbeatMs ?? 1000;
  const renewalMs = Math.max(heartbeatMs, Math.min(MAX_RENEWAL_MS, Math.floor(deps.leaseMs / 4)));
  let renewedAt = -Infinity;
  let beating: Promise<void> | undefined;
  const lease = () => ({ owner: deps.nodeId, now: deps.now(), leaseMs: deps.leaseMs });
  const timers: NodeJS.Timeout[] = [];
  const unlisten: Array<() => Promise<void>> = [];
  let stopping = false;

  const report = (what: string) => (err: unknown) => deps.log.error({ err }, what);

  const claims = createClaimLoop({
    hasRoom: () => !stopping && running.size < deps.concurrency && (deps.canClaim?.() ?? true),
    claimOne: async () => {
      const job = await claimNextJob(deps.database, lease());
      if (!job) return false;
      launch(job);
      return true;
    },
    stopping: () => stopping,
    onError: report('claiming a job failed'),
  });
  const fill = claims.fill;

  function launch(job: JobRow): void {
    const controller = new AbortController();
    // The submission's request id too: every line of the job can be tied to the request that made it.
    const log = deps.log.child({ job_id: job.id, ...(job.requestId ? { request_id: job.requestId } : {}) });
    const entry: Running = { controller, done: Promise.resolve() };
    const reportProgress = (bytes: number, totalBytes: number | null) => {
      entry.progress = { bytes, totalBytes };
      // Written now, or at the next heartbeat when one is under way.
      if (isUrgent(entry) && !beating) void heartbeat().catch(report('renewing leases failed'));
    };
    entry.done = deps
      .runJob(job, { signal: controller.signal, log, owner: deps.nodeId, reportProgress })
      .catch(async (err: unknown) => {
        log.error({ err }, 'job runner failed: giving the job back');
        const ended = await releaseJob(deps.database, job.id, deps.nodeId, deps.maxAttempts, deps.now());
        if (ended) deps.onJobEnded?.(ended);
      })
      .catch(report('giving a job back failed'))
      .then(async () => {
        if (controller.signal.aborted && controller.signal.reason === 'shutdown')
          await requeueInterrupted(deps.database, job.id, deps.nodeId);
      })
      .catch(report('re-queueing an interrupted job failed'))
      .finally(() => {
        running.delete(job.id);
        if (!stopping) fill();
      });
    running.set(job.id, entry);
  }

  /**
   * Renews this node's leases with its jobs' progress when a renewal is due; otherwise writes only
   * the jobs whose progress others should see now, and reads whether the others are still held.
   * Stops the jobs it no longer holds. One heartbeat at a time.
   */
  function heartbeat(): Promise<void> {
    beating ??= beat().finally(() => (beating = undefined));
    return beating;
  }

  async function beat(): Promise<void> {
    const ids = [...running.keys()];
    if (ids.length === 0) return;
    const now = deps.now();
    const due = now - renewedAt >= renewalMs;
    const unwritten = (entry: Running) =>
      entry.progress !== undefined &&
      (entry.progress.bytes !== entry.written?.bytes || entry.progress.totalBytes !== entry.written.totalBytes);
    const writing = ids.filter((id) => {
      const entry = running.get(id)!;
      return due ? true : isUrgent(entry);
    });
    const progress = new Map<string, Progress>();
    for (const id of writing) {
      const entry = running.get(id)!;
      if (unwritten(entry)) progress.set(id, entry.progress!);
    }
    const reading = ids.filter((id) => !writing.includes(id));
    const [written, read] = await Promise.all([
      renewLeases(deps.database, writing, lease(), progress),
      heldLeases(deps.database, reading, deps.nodeId),
    ]);
    if (due) renewedAt = now;
    for (const [id, sent] of progress) {
      const entry = running.get(id);
      if (entry) entry.written = sent;
    }
    for (const id of ids) {
      if (!written.has(id) && !read.has(id)) running.get(id)?.controller.abort('lost');
    }
  }

  /** Takes back jobs of dead nodes. */
  async function sweep(): Promise<void> {
    const { requeued, failed } = await reclaimExpiredLeases(deps.database, deps.maxAttempts, deps.now());
    for (const ended of failed) deps.onJobEnded?.(ended);
    if (requeued > 0) {
      deps.log.info({ requeued, failed: failed.length }, 'took back jobs whose lease ran out');
      fill();
    }
  }

  const every = (ms: number, fn: () => Promise<void> | void, what: string) => {
    const timer = setInterval(() => {
      if (!stopping) void Promise.resolve(fn()).catch(report(what));
    }, ms);
    timer.unref();
    timers.push(timer);
  };

  const pool: WorkerPool = {
    async start() {
      unlisten.push(await deps.database.listen(JOBS_QUEUED_CHANNEL, () => pool.wake()));
      unlisten.push(await deps.database.listen(JOB_CANCELED_CHANNEL, (jobId) => pool.abort(jobId, 'canceled')));
      await sweep();
      every(deps.pollIntervalMs ?? 1000, fill, 'polling the queue failed');
      every(heartbeatMs, heartbeat, 'renewing leases failed');
      every(Math.max(1000, Math.floor(deps.leaseMs / 2)), sweep, 'taking back expired leases failed');
      fill();
    },
    wake() {
      if (!stopping) fill();
    },
    abort(jobId, reason) {
      running.get(jobId)?.controller.abort(reason);
    },
    busyCount() {
      return running.size;
    },
    progressOf(jobId) {
      return running.get(jobId)?.progress;
    },
    async stop(graceMs) {
      stopping = true;
      for (const timer of timers) clearInterval(timer);
      await Promise.all(unlisten.map((fn) => fn().catch(() => {})));
      await claims.current();
      const all = () => Promise.all([...running.values()].map((entry) => entry.done));
      let graceTimer: NodeJS.Timeout | undefined;
      const graceOver = new Promise<'timeout'>((resolve) => {
        graceTimer = setTimeout(() => resolve('timeout'), graceMs);
      });
      // Leases must outlive the grace period: keep renewing them while jobs drain.
      const renewing = setInterval(() => void heartbeat().catch(report('renewing leases failed')), heartbeatMs);
      const outcome = await Promise.race([all().then(() => 'drained' as const), graceOver]);
      clearTimeout(graceTimer);
      if (outcome === 'timeout') {
        deps.log.warn({ running: running.size }, 'shutdown grace period over: aborting and re-queueing running jobs');
        for (const entry of running.values()) entry.controller.abort('shutdown');
        await all();
      }
      clearInterval(renewing);
    },
  };
  return pool;
}
