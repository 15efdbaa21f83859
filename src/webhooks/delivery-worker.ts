import type { Database, JobRow } from '../db/database.js';
import { createClaimLoop } from '../claim-loop.js';
import { NO_KEY_IDENTITY } from '../jobs/key-identity.js';
import { getJobRow } from '../jobs/queue.js';
import type { Logger } from '../logger.js';
import {
  claimDueDelivery,
  deferDelivery,
  deferReceiver,
  recordAttempt,
  releaseDelivery,
  type CallbackDeliveryRow,
} from './deliveries.js';
import { createReceiverBackoff, receiverOf } from './receiver-backoff.js';
import { nextAttemptAt, type RetrySchedule } from './retry-schedule.js';
import type { SendCallback } from './send.js';
import { signedHeaders } from './signature.js';

/**
 * A node's callback deliverer. Every node runs one (API-only nodes too): it claims due deliveries
 * from the database all nodes share (./deliveries.ts), a few at a time, POSTs the job record
 * signed with the secrets of the job's key (./key-secrets.ts), and records each attempt; a failed
 * one is tried again on the retry schedule, on whichever node claims it then. It looks every poll interval, and at once when woken (a job
 * ended on this node). Stopping aborts the attempts in flight and gives their deliveries back
 * unrecorded, so the next node (or this one restarted) makes them again.
 *
 * Fair to every client: a key (the job's api_key_id) has at most `perKey` attempts under way on
 * this node, and a receiver (the URL's origin) at most `perReceiver`; a claim passes over the
 * deliveries of those that are full, so a callback to a receiver that answers is claimed as soon
 * as it is due and a slot of the node is free, however many deliveries of another key or to
 * silent receivers wait. A receiver that gives no answer (time-out, no connection, no name) is
 * backed off on its own (./receiver-backoff.ts): its pending deliveries are put off together,
 * one claimed meanwhile is given back unattempted, and its first answer ends the backoff.
 */
export interface DeliveryWorkerDeps {
  database: Database;
  nodeId: string;
  now: () => number;
  log: Logger;
  /** The secrets that sign the callbacks of a key's jobs, by the job's key identity (./key-secrets.ts). */
  secretsOf: (keyIdentity: string) => readonly string[];
  /** The body: the job record, as getJob answers it at the time of the attempt. */
  renderJob: (jobId: string) => Promise<unknown>;
  send: SendCallback;
  schedule: RetrySchedule;
  /** Longer than one attempt may take (the sender's time-out), so no live node loses its lease mid-attempt. */
  leaseMs: number;
  /** Attempts in flight on this node at once: in all (default 16), per key (4), per receiver (2). */
  concurrency?: { total: number; perKey: number; perReceiver: number };
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

const DEFAULT_CONCURRENCY = { total: 16, perKey: 4, perReceiver: 2 };

/** One more, or one fewer (a count that falls to zero is removed). */
function count(counts: Map<string, number>, key: string, by: 1 | -1): void {
  const next = (counts.get(key) ?? 0) + by;
  if (next > 0) counts.set(key, next);
  else counts.delete(key);
}

export function createDeliveryWorker(deps: DeliveryWorkerDeps): DeliveryWorker {
  const concurrency = deps.concurrency ?? DEFAULT_CONCURRENCY;
  const inFlight = new Map<string, Promise<void>>();
  const underWay = { byKey: new Map<string, number>(), byReceiver: new Map<string, number>() };
  const backoff = createReceiverBackoff(deps.schedule.baseMs);
  const full = (counts: Map<string, number>, limit: number) =>
    [...counts].filter(([, n]) => n >= limit).map(([key]) => key);
  const stopper = new AbortController();
  let stopping = false;
  let timer: NodeJS.Timeout | undefined;
  const report = (what: string) => (err: unknown) => deps.log.error({ err }, what);

  const claims = createClaimLoop({
    hasRoom: () => !stopping && inFlight.size < concurrency.total,
    claimOne: async () => {
      const skip = {
        keys: full(underWay.byKey, concurrency.perKey),
        receivers: full(underWay.byReceiver, concurrency.perReceiver),
      };
      const claimed = await claimDueDelivery(
        deps.database,
        { owner: deps.nodeId, now: deps.now(), leaseMs: deps.leaseMs },
        skip,
      );
      if (!claimed) return false;
      // Stopped while claiming (a delivery just given back, say): give it back again.
      if (stopping) {
        await releaseDelivery(deps.database, claimed.id, deps.nodeId);
        return false;
      }
      const receiver = receiverOf(claimed.url);
      const backedOffUntil = backoff.until(receiver, deps.now());
      if (backedOffUntil > 0) {
        await deferDelivery(deps.database, claimed.id, deps.nodeId, backedOffUntil);
        return true;
      }
      launch(claimed, receiver, await getJobRow(deps.database, claimed.jobId));
      return true;
    },
    stopping: () => stopping,
    onError: report('claiming a callback delivery failed'),
  });
  const fill = claims.fill;

  function launch(claimed: CallbackDeliveryRow, receiver: string, job: JobRow | undefined): void {
    const key = job?.apiKeyId ?? NO_KEY_IDENTITY;
    count(underWay.byKey, key, 1);
    count(underWay.byReceiver, receiver, 1);
    const done = attempt(claimed, receiver, job)
      .catch(report('a callback attempt failed'))
      .finally(() => {
        inFlight.delete(claimed.id);
        count(underWay.byKey, key, -1);
        count(underWay.byReceiver, receiver, -1);
        if (!stopping) fill();
      });
    inFlight.set(claimed.id, done);
  }

  async function attempt(claimed: CallbackDeliveryRow, receiver: string, job: JobRow | undefined): Promise<void> {
    const log = deps.log.child({
      job_id: claimed.jobId,
      delivery_id: claimed.id,
      callback_host: new URL(claimed.url).host,
    });
    const at = deps.now();
    const body = JSON.stringify(await deps.renderJob(claimed.jobId));
    const key = job?.apiKeyId ?? NO_KEY_IDENTITY;
    const headers = signedHeaders(deps.secretsOf(key), claimed.id, Math.floor(at / 1000), body);
    const result = await deps.send({ url: claimed.url, headers, body, client: `key:${key}` }, stopper.signal);
    if (stopper.signal.aborted) {
      await releaseDelivery(deps.database, claimed.id, deps.nodeId);
      return;
    }
    const delivered = result.status !== null && result.status >= 200 && result.status < 300;
    const attempts = claimed.attemptCount + 1;
    const now = deps.now();
    let receiverUntil = 0;
    if (result.status !== null) {
      backoff.answered(receiver);
    } else {
      receiverUntil = backoff.failed(receiver, now);
      const putOff = await deferReceiver(deps.database, receiver, receiverUntil, now);
      log.info(
        { receiver_until: new Date(receiverUntil).toISOString(), deliveries_put_off: putOff },
        'callback receiver gave no answer: backed off',
      );
    }
    const scheduled = delivered
      ? null
      : nextAttemptAt(deps.schedule, attempts, now, job?.finishedAt ?? claimed.createdAt, deps.random);
    const next = scheduled === null ? null : Math.max(scheduled, receiverUntil);
    const outcome = delivered ? 'delivered' : next === null ? 'failed' : 'pending';
    const recorded = await recordAttempt(
      deps.database,
      claimed,
      deps.nodeId,
      { at, status: result.status, error: result.error },
      outcome === 'pending' ? { status: outcome, nextAttemptAt: next! } : { status: outcome, now },
    );
    const fields = {
      attempt: attempts,
      status: result.status,
      error: result.error,
      outcome,
      ...(next !== null ? { next_attempt_at: new Date(next).toISOString() } : {}),
    };
    if (!recorded)
      log.warn(fields, 'callback attempt made after this node lost its lease: another node records its own');
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
