import { randomUUID } from 'node:crypto';
import type { Db } from '../db/client.js';
import type { JobRow } from '../db/schema.js';
import type { Logger } from '../logger.js';
import { claimNextJob, requeueInterrupted } from './queue.js';

/**
 * An in-process pool of workers that claim queued jobs from the database. Each running job
 * owns an AbortController: a cancel aborts it with reason 'canceled', a shutdown that outlasts
 * its grace period aborts it with 'shutdown' and puts the job back in the queue.
 */
export type AbortReason = 'canceled' | 'shutdown';

export interface JobContext {
  signal: AbortSignal;
  log: Logger;
}

export type JobRunner = (job: JobRow, ctx: JobContext) => Promise<void>;

export interface WorkerPool {
  start(): void;
  /** Something was queued: look now instead of at the next poll. */
  wake(): void;
  abort(jobId: string, reason: AbortReason): void;
  busyCount(): number;
  /** Stops claiming, lets running jobs finish within graceMs, then aborts and re-queues them. */
  stop(graceMs: number): Promise<void>;
}

export function createWorkerPool(deps: {
  db: Db;
  concurrency: number;
  now: () => number;
  log: Logger;
  runJob: JobRunner;
  pollIntervalMs?: number;
  /** False while jobs must not start (the tools cannot be confined): they stay queued. */
  canClaim?: () => boolean;
}): WorkerPool {
  const owner = `pid${process.pid}-${randomUUID().slice(0, 8)}`;
  const running = new Map<string, { controller: AbortController; done: Promise<void> }>();
  let stopping = false;
  let timer: NodeJS.Timeout | undefined;

  function fill(): void {
    while (!stopping && running.size < deps.concurrency && (deps.canClaim?.() ?? true)) {
      const job = claimNextJob(deps.db, owner, deps.now());
      if (!job) return;
      launch(job);
    }
  }

  function launch(job: JobRow): void {
    const controller = new AbortController();
    // The submission's request id too: every line of the job can be tied to the request that made it.
    const log = deps.log.child({ job_id: job.id, ...(job.requestId ? { request_id: job.requestId } : {}) });
    const done = deps
      .runJob(job, { signal: controller.signal, log })
      .catch((err: unknown) => log.error({ err }, 'job runner failed'))
      .finally(() => {
        if (controller.signal.aborted && controller.signal.reason === 'shutdown') requeueInterrupted(deps.db, job.id);
        running.delete(job.id);
        if (!stopping) setImmediate(fill);
      });
    running.set(job.id, { controller, done });
  }

  return {
    start() {
      timer = setInterval(fill, deps.pollIntervalMs ?? 1000);
      timer.unref();
      fill();
    },
    wake() {
      if (!stopping) setImmediate(fill);
    },
    abort(jobId, reason) {
      running.get(jobId)?.controller.abort(reason);
    },
    busyCount() {
      return running.size;
    },
    async stop(graceMs) {
      stopping = true;
      if (timer) clearInterval(timer);
      const all = () => Promise.all([...running.values()].map((entry) => entry.done));
      let graceTimer: NodeJS.Timeout | undefined;
      const graceOver = new Promise<'timeout'>((resolve) => {
        graceTimer = setTimeout(() => resolve('timeout'), graceMs);
      });
      const outcome = await Promise.race([all().then(() => 'drained' as const), graceOver]);
      clearTimeout(graceTimer);
      if (outcome === 'timeout') {
        deps.log.warn({ running: running.size }, 'shutdown grace period over: aborting and re-queueing running jobs');
        for (const entry of running.values()) entry.controller.abort('shutdown');
        await all();
      }
    },
  };
}
