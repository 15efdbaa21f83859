import type { Database } from '../db/database.js';
import { createClaimLoop } from '../jobs/claim-loop.js';
import { getJobRow } from '../jobs/queue.js';
import type { Logger } from '../logger.js';
import { claimDueDelivery, recordAttempt, releaseDelivery, type CallbackDeliveryRow } from './deliveries.js';
import { nextAttemptAt, type RetrySchedule } from './retry-schedule.js';
import type { SendCallback } from './send.js';
import { signedHeaders } from './signature.js';

/**
 * A node's callback deliverer. Every node runs one (API-only nodes too): it claims due deliveries
 * from the database all nodes share (./deliveries.ts), a few at a time, POSTs the job record
 * signed, and records each attempt; a failed one is tried again on the retry schedule, on
 * whichever node claims it then. It looks every poll interval, and at once when woken (a job
 * ended on this node). Stopping aborts the attempts in flight and gives their deliveries back
 * unrecorded, so the next node (or this one restarted) makes them again.
 */
export interface DeliveryWorkerDeps {
  database: Database;
  nodeId: string;
  now: () => number;
  log: Logger;
  /** WEBHOOK_SECRET: signs every attempt. */
  secret: string;
  /** The body: the job record, as getJob answers it at the time of the attempt. */
  renderJob: (jobId: string) => Promise<unknown>;
  send: SendCallback;
  schedule: RetrySchedule;
  /** Longer than one attempt may take (the sender's time-out), so no live node loses its lease mid-attempt. */
  leaseMs: number;
  /** Attempts in flight on this node at once; default 4. */
  concurrency?: number;
  /** Default 1000. */
  pollIntervalMs?: number;
  random?: () => number;
}

export interface DeliveryWorker {
  start(): void;
  /** Something may be due now (a job ended here): look at once instead of at the next poll. */
  wake(): void;
  /** Resolves once no claim and no attempt of this worker is under way. */
  settle(): Promise<void>;
  stop(): Promise<void>;
}

export function createDeliveryWorker(deps: DeliveryWorkerDeps): DeliveryWorker {
  const concurrency = deps.concurrency ?? 4;
  const inFlight = new Map<string, Promise<void>>();
  const stopper = new AbortController();
  let stopping = false;
  let timer: NodeJS.Timeout | undefined;
  const report = (what: string) => (err: unknown) => deps.log.error({ err }, what);

  const claims = createClaimLoop({
    hasRoom: () => !stopping && inFlight.size < concurrency,
    claimOne: async () => {
      const claimed = await claimDueDelivery(deps.database, { owner: deps.nodeId, now: deps.now(), leaseMs: deps.leaseMs });
      if (!claimed) return false;
      // Stopped while claiming (a delivery just given back, say): give it back again.
      if (stopping) {
        await releaseDelivery(deps.database, claimed.id, deps.nodeId);
        return false;
      }
      launch(claimed);
      return true;
    },
    stopping: () => stopping,
    onError: report('claiming a callback delivery failed'),
  });
  const fill = claims.fill;

  function launch(claimed: CallbackDeliveryRow): void {
    const done = attempt(claimed)
      .catch(report('a callback attempt failed'))
      .finally(() => {
        inFlight.delete(claimed.id);
        if (!stopping) fill();
      });
    inFlight.set(claimed.id, done);
  }

  async function attempt(claimed: CallbackDeliveryRow): Promise<void> {
    const log = deps.log.child({ job_id: claimed.jobId, delivery_id: claimed.id, callback_host: new URL(claimed.url).host });
    const job = await getJobRow(deps.database, claimed.jobId);
    const at = deps.now();
    const body = JSON.stringify(await deps.renderJob(claimed.jobId));
    const result = await deps.send({ url: claimed.url, headers: signedHeaders(deps.secret, claimed.id, Math.floor(at / 1000), body), body }, stopper.signal);
    if (stopper.signal.aborted) {
      await releaseDelivery(deps.database, claimed.id, deps.nodeId);
      return;
    }
    const delivered = result.status !== null && result.status >= 200 && result.status < 300;
    const attempts = claimed.attemptCount + 1;
    const now = deps.now();
    const next = delivered ? null : nextAttemptAt(deps.schedule, attempts, now, job?.finishedAt ?? claimed.createdAt, deps.random);
    const outcome = delivered ? 'delivered' : next === null ? 'failed' : 'pending';
    const recorded = await recordAttempt(
      deps.database,
      claimed,
      deps.nodeId,
      { at, status: result.status, error: result.error },
      outcome === 'pending' ? { status: outcome, nextAttemptAt: next! } : { status: outcome, now },
    );
    const fields = { attempt: attempts, status: result.status, error: result.error, outcome, ...(next !== null ? { next_attempt_at: new Date(next).toISOString() } : {}) };
    if (!recorded) log.warn(fields, 'callback attempt made after this node lost its lease: another node records its own');
    else if (outcome === 'delivered') log.info(fields, 'callback delivered');
    else if (outcome === 'failed') log.warn(fields, 'callback failed: no attempt is left within WEBHOOK_RETRY_FOR_S');
    else log.info(fields, 'callback attempt failed: trying again later');
  }

  async function settle(): Promise<void> {
    while (claims.current() || inFlight.size > 0) {
      await claims.current();
      await Promise.all(inFlight.values());
    }
  }

  return {
    start() {
      timer = setInterval(() => {
        if (!stopping) fill();
      }, deps.pollIntervalMs ?? 1000);
      timer.unref();
      fill();
    },
    wake() {
      if (!stopping) fill();
    },
    settle,
    async stop() {
      stopping = true;
      clearInterval(timer);
      stopper.abort();
      await settle();
    },
  };
}
