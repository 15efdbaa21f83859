import { and, asc, eq, exists, inArray, isNull, lt, lte, notInArray, or, sql, type SQL } from 'drizzle-orm';
import type { CallbackDeliveryRow, Queryable, Tables } from '../db/database.js';
import { prepared } from '../db/prepared.js';
import { FINAL_STATUSES } from '../jobs/queue.js';

/**
 * Callback deliveries: one row per job submitted with a callback_url, on either database, for any
 * number of nodes.
 *
 * The row is written with its job, in the same transaction (src/jobs/submit.ts). It needs no
 * enqueueing when the job ends: a pending delivery is due as soon as its job's status is final,
 * and that status is written by the very transaction that ends the job, wherever it ends (the
 * fetch task's commit, a failure, a cancel through any node, a born-done submission, attempts
 * exhausted by the lease sweep, a follower carried along by its leader). So no end can be missed,
 * and none can be seen before it is committed.
 *
 * An attempt is claimed like a job: one conditional UPDATE gives a node a lease (lock_owner,
 * lease_expires_at) long enough for one attempt; a node that dies mid-attempt loses it when it
 * expires, and any node tries again (the receiver may then see the same delivery twice: at least
 * once, with the same id). Only the lease holder records the attempt's outcome.
 */
export type { CallbackDeliveryRow };

/** Attempts kept on the row (and shown on the job record); attempt_count has them all. */
export const ATTEMPT_LOG_SIZE = 10;

export interface AttemptEntry {
  /** When the attempt started, ms since the epoch. */
  at: number;
  /** The receiver's HTTP status, when it answered. */
  status: number | null;
  /** Why it failed without an answer (a stable code: timeout, connect_failed, address_private...). */
  error: string | null;
}

export async function insertDelivery(
  q: Queryable,
  delivery: { id: string; jobId: string; url: string; createdAt: number },
): Promise<CallbackDeliveryRow> {
  const [row] = await q.db
    .insert(q.t.callbackDeliveries)
    .values({ ...delivery, status: 'pending', nextAttemptAt: delivery.createdAt, attemptCount: 0, attemptLog: '[]' })
    .returning();
  return row!;
}

/**
 * What a submission is given to write a job's callback delivery (src/jobs/submit.ts), inside the
 * job's own transaction. `newId`: each delivery's id, the receiver's idempotency key.
 */
export function callbackRecorder(
  newId: () => string,
): (q: Queryable, delivery: { jobId: string; url: string; createdAt: number }) => Promise<CallbackDeliveryRow> {
  return (q, delivery) => insertDelivery(q, { id: newId(), ...delivery });
}

export async function deliveryForJob(q: Queryable, jobId: string): Promise<CallbackDeliveryRow | undefined> {
  const query = prepared(q, 'delivery_by_job', ({ db, t }) =>
    db
      .select()
      .from(t.callbackDeliveries)
      .where(eq(t.callbackDeliveries.jobId, sql.placeholder('jobId')))
      .prepare('delivery_by_job'),
  );
  const [row] = await query.execute({ jobId });
  return row;
}

export function attemptsOf(row: CallbackDeliveryRow): AttemptEntry[] {
  return JSON.parse(row.attemptLog) as AttemptEntry[];
}

/** Deliveries a claim passes over: those of jobs of these keys (jobs.api_key_id), and those to these receivers (URL origins). */
export interface ClaimSkips {
  keys: readonly string[];
  receivers: readonly string[];
}

const NO_SKIPS: ClaimSkips = { keys: [], receivers: [] };

/** The delivery's URL is one of `receiver`'s: an http(s) href is its origin followed by "/". */
function toReceiver(d: Tables['callbackDeliveries'], receiver: string): SQL {
  const prefix = `${receiver}/`;
  return sql`substr(${d.url}, 1, ${sql.raw(String(prefix.length))}) = ${prefix}`;
}

/**
 * Atomically takes the delivery that has waited longest among those due: pending, past their
 * backoff, not leased (or leased by a node that let the lease run out), and whose job has ended;
 * of a key and to a receiver not in `skip` (those that have as many attempts under way on this
 * node as they may).
 */
export async function claimDueDelivery(
  q: Queryable,
  lease: { owner: string; now: number; leaseMs: number },
  skip: ClaimSkips = NO_SKIPS,
): Promise<CallbackDeliveryRow | undefined> {
  const { callbackDeliveries: d, jobs } = q.t;
  const free = or(isNull(d.leaseExpiresAt), lt(d.leaseExpiresAt, lease.now));
  const jobEnded = exists(
    q.db
      .select({ one: sql`1` })
      .from(jobs)
      .where(
        and(
          eq(jobs.id, d.jobId),
          inArray(jobs.status, [...FINAL_STATUSES]),
          skip.keys.length > 0 ? notInArray(jobs.apiKeyId, [...skip.keys]) : undefined,
        ),
      ),
  );
  const notToSkipped = skip.receivers.map((receiver) => sql`not (${toReceiver(d, receiver)})`);
  const oldest = q.db
    .select({ id: d.id })
    .from(d)
    .where(and(eq(d.status, 'pending'), lte(d.nextAttemptAt, lease.now), free, jobEnded, ...notToSkipped))
    .orderBy(asc(d.nextAttemptAt))
    .limit(1);
  // As in claimNextJob: nodes claiming at once skip each other's row; a scalar subquery, run once.
  const next = q.kind === 'postgres' ? oldest.for('update', { of: d, skipLocked: true }) : oldest;
  const [row] = await q.db
    .update(d)
    .set({ lockOwner: lease.owner, leaseExpiresAt: lease.now + lease.leaseMs })
    .where(and(eq(d.id, sql`(${next})`), eq(d.status, 'pending'), free))
    .returning();
  return row;
}

/**
 * Records the outcome of an attempt by the lease holder: delivered, failed for good, or pending
 * again until `nextAttemptAt`. False when the lease was no longer this node's (another node took
 * the delivery over after the lease ran out, and records its own attempt).
 */
export async function recordAttempt(
  q: Queryable,
  claimed: CallbackDeliveryRow,
  owner: string,
  attempt: AttemptEntry,
  next: { status: 'delivered' | 'failed'; now: number } | { status: 'pending'; nextAttemptAt: number },
): Promise<boolean> {
  const d = q.t.callbackDeliveries;
  const log = [...attemptsOf(claimed), attempt].slice(-ATTEMPT_LOG_SIZE);
  const rows = await q.db
    .update(d)
    .set({
      status: next.status,
      attemptCount: sql`${d.attemptCount} + 1`,
      attemptLog: JSON.stringify(log),
      lockOwner: null,
      leaseExpiresAt: null,
      ...(next.status === 'pending' ? { nextAttemptAt: next.nextAttemptAt } : { finishedAt: next.now }),
    })
    .where(and(eq(d.id, claimed.id), eq(d.status, 'pending'), eq(d.lockOwner, owner)))
    .returning({ id: d.id });
  return rows.length > 0;
}

/**
 * A receiver backed off (./receiver-backoff.ts): its pending deliveries that no node is
 * attempting are not due before `until`. The number of deliveries put off.
 */
export async function deferReceiver(q: Queryable, receiver: string, until: number, now: number): Promise<number> {
  const d = q.t.callbackDeliveries;
  const rows = await q.db
    .update(d)
    .set({ nextAttemptAt: until })
    .where(
      and(
        eq(d.status, 'pending'),
        lt(d.nextAttemptAt, until),
        or(isNull(d.leaseExpiresAt), lt(d.leaseExpiresAt, now)),
        toReceiver(d, receiver),
      ),
    )
    .returning({ id: d.id });
  return rows.length;
}

/** Gives a claimed delivery back without an attempt, not due before `until` (its receiver is backed off). */
export async function deferDelivery(q: Queryable, id: string, owner: string, until: number): Promise<void> {
  const d = q.t.callbackDeliveries;
  await q.db
    .update(d)
    .set({
      lockOwner: null,
      leaseExpiresAt: null,
      nextAttemptAt: sql`case when ${d.nextAttemptAt} > ${until} then ${d.nextAttemptAt} else ${until} end`,
    })
    .where(and(eq(d.id, id), eq(d.status, 'pending'), eq(d.lockOwner, owner)));
}

/** Gives a claimed delivery back without an attempt (this node is stopping): any node may take it at once. */
export async function releaseDelivery(q: Queryable, id: string, owner: string): Promise<void> {
  const d = q.t.callbackDeliveries;
  await q.db
    .update(d)
    .set({ lockOwner: null, leaseExpiresAt: null })
    .where(and(eq(d.id, id), eq(d.status, 'pending'), eq(d.lockOwner, owner)));
}
