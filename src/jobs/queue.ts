import { and, asc, eq, inArray, isNull, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { jobs, type JobRow, type JobStatus } from '../db/schema.js';

/**
 * The job queue: job rows in SQLite and every state change they go through.
 *
 *   queued ──claim──▶ running ──▶ done | failed | canceled
 *     │                  └──(crash, shutdown)──▶ queued again, while attempts remain
 *     └──cancel──▶ canceled
 *
 * A job submitted while another job for the same URL is queued or running "follows" it
 * (followsJobId): it is never claimed, and ends with its leader's outcome.
 * Each transition is one conditional UPDATE, so a transition that lost a race changes nothing.
 */
export const FINAL_STATUSES: ReadonlySet<JobStatus> = new Set(['done', 'failed', 'canceled']);

export interface JobError {
  code: string;
  message: string;
}

export function insertJob(db: Db, job: typeof jobs.$inferInsert): JobRow {
  return db.insert(jobs).values(job).returning().get();
}

export function getJobRow(db: Db, id: string): JobRow | undefined {
  return db.select().from(jobs).where(eq(jobs.id, id)).get();
}

export function followersOf(db: Db, leaderId: string): JobRow[] {
  return db.select().from(jobs).where(eq(jobs.followsJobId, leaderId)).all();
}

/** The job that currently leads work on a URL, if any. */
export function activeLeaderFor(db: Db, urlKey: string): JobRow | undefined {
  return db
    .select()
    .from(jobs)
    .where(and(eq(jobs.urlKey, urlKey), inArray(jobs.status, ['queued', 'running']), isNull(jobs.followsJobId)))
    .orderBy(asc(jobs.createdAt))
    .get();
}

/** Atomically takes the oldest claimable job. */
export function claimNextJob(db: Db, owner: string, now: number): JobRow | undefined {
  return db
    .update(jobs)
    .set({ status: 'running', lockOwner: owner, lockedAt: now, startedAt: now, attempts: sql`${jobs.attempts} + 1` })
    .where(
      eq(
        jobs.id,
        sql`(select ${jobs.id} from ${jobs} where ${jobs.status} = 'queued' and ${jobs.followsJobId} is null order by ${jobs.createdAt} limit 1)`,
      ),
    )
    .returning()
    .get();
}

export function countQueued(db: Db): number {
  return db.select({ n: sql<number>`count(*)` }).from(jobs).where(eq(jobs.status, 'queued')).get()?.n ?? 0;
}

export function recordProgress(db: Db, id: string, bytes: number, totalBytes: number | null): void {
  db.update(jobs)
    .set({ progressBytes: bytes, progressTotalBytes: totalBytes })
    .where(and(eq(jobs.id, id), eq(jobs.status, 'running')))
    .run();
}

export function recordMediaIdentity(db: Db, id: string, extractor: string, mediaId: string): void {
  db.update(jobs).set({ extractor, mediaId }).where(eq(jobs.id, id)).run();
}

/** running → done, with every follower. Returns false when the job was no longer running (canceled). */
export function markDone(db: Db, id: string, contentId: string, now: number): boolean {
  const changed = db
    .update(jobs)
    .set({ status: 'done', contentId, finishedAt: now, lockOwner: null, lockedAt: null })
    .where(and(eq(jobs.id, id), eq(jobs.status, 'running')))
    .run().changes;
  if (changed === 0) return false;
  db.update(jobs)
    .set({ status: 'done', contentId, finishedAt: now, startedAt: sql`coalesce(${jobs.startedAt}, ${now})` })
    .where(and(eq(jobs.followsJobId, id), eq(jobs.status, 'queued')))
    .run();
  return true;
}

/** running → failed, with every follower. */
export function markFailed(db: Db, id: string, error: JobError, now: number): boolean {
  const set = { status: 'failed' as const, errorCode: error.code, errorMessage: error.message, finishedAt: now };
  const changed = db
    .update(jobs)
    .set({ ...set, lockOwner: null, lockedAt: null })
    .where(and(eq(jobs.id, id), eq(jobs.status, 'running')))
    .run().changes;
  if (changed === 0) return false;
  db.update(jobs)
    .set(set)
    .where(and(eq(jobs.followsJobId, id), eq(jobs.status, 'queued')))
    .run();
  return true;
}

/**
 * queued or running → canceled. A canceled leader hands its followers on: the oldest becomes
 * the new leader (queued, claimable) and the others follow it, so one client's cancel never
 * cancels another client's job. Returns the row after the change, or undefined if unknown.
 */
export function markCanceled(db: Db, id: string, now: number): JobRow | undefined {
  return db.transaction((tx) => {
    const changed = tx
      .update(jobs)
      .set({ status: 'canceled', finishedAt: now, lockOwner: null, lockedAt: null })
      .where(and(eq(jobs.id, id), inArray(jobs.status, ['queued', 'running'])))
      .run().changes;
    if (changed > 0) {
      const followers = tx
        .select({ id: jobs.id })
        .from(jobs)
        .where(and(eq(jobs.followsJobId, id), eq(jobs.status, 'queued')))
        .orderBy(asc(jobs.createdAt))
        .all();
      const [heir, ...rest] = followers;
      if (heir) {
        tx.update(jobs).set({ followsJobId: null }).where(eq(jobs.id, heir.id)).run();
        if (rest.length > 0) {
          tx.update(jobs)
            .set({ followsJobId: heir.id })
            .where(inArray(jobs.id, rest.map((row) => row.id)))
            .run();
        }
      }
    }
    return tx.select().from(jobs).where(eq(jobs.id, id)).get();
  });
}

/** running → queued, for jobs a shutdown interrupted; the attempt does not count. */
export function requeueInterrupted(db: Db, id: string): void {
  db.update(jobs)
    .set({
      status: 'queued',
      lockOwner: null,
      lockedAt: null,
      startedAt: null,
      progressBytes: null,
      progressTotalBytes: null,
      attempts: sql`max(${jobs.attempts} - 1, 0)`,
    })
    .where(and(eq(jobs.id, id), eq(jobs.status, 'running')))
    .run();
}

/**
 * At start-up, before any worker runs: jobs left running by a crash are queued again while
 * they have attempts left, and failed otherwise. Returns the counts.
 */
export function recoverAbandonedJobs(db: Db, maxAttempts: number, now: number): { requeued: number; failed: number } {
  return db.transaction((tx) => {
    const failed = tx
      .update(jobs)
      .set({
        status: 'failed',
        errorCode: 'attempts_exhausted',
        errorMessage: `The job was interrupted ${maxAttempts} times and is not retried again.`,
        finishedAt: now,
        lockOwner: null,
        lockedAt: null,
      })
      .where(and(eq(jobs.status, 'running'), sql`${jobs.attempts} >= ${maxAttempts}`))
      .returning({ id: jobs.id })
      .all();
    for (const { id } of failed) {
      tx.update(jobs)
        .set({ status: 'failed', errorCode: 'attempts_exhausted', errorMessage: 'The job this one waited for failed.', finishedAt: now })
        .where(and(eq(jobs.followsJobId, id), eq(jobs.status, 'queued')))
        .run();
    }
    const requeued = tx
      .update(jobs)
      .set({ status: 'queued', lockOwner: null, lockedAt: null, progressBytes: null, progressTotalBytes: null })
      .where(eq(jobs.status, 'running'))
      .run().changes;
    return { requeued, failed: failed.length };
  });
}
