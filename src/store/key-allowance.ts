import { and, eq, gte, isNotNull, sql } from 'drizzle-orm';
import type { Queryable } from '../db/database.js';
import { jobError, type JobError } from '../job-errors.js';
import { prepared } from '../db/prepared.js';

/**
 * What one API key may put into the store: at most `bytes` of new content over any `windowMs`
 * (STORE_BYTES_PER_KEY_PER_DAY, a rolling day), so that no key can push the others' content out
 * of the store. A job's new content counts against the key that submitted it (jobs.api_key_id,
 * jobs.stored_bytes), from the moment the job is done, whether or not the content is evicted
 * later; content that was already stored adds nothing and counts nothing. The check and the
 * job's record are one transaction under the key's lock (lockKeyStorage), so jobs of one key
 * ending at once on any node cannot together pass the allowance.
 */
export interface KeyAllowance {
  bytes: number;
  windowMs: number;
}

export const KEY_ALLOWANCE_WINDOW_MS = 24 * 3600 * 1000;

/** The bytes of new content the key's jobs stored from `since` on. */
export async function storedBytesSince(q: Queryable, apiKeyId: string, since: number): Promise<number> {
  const query = prepared(q, 'key_stored_bytes', ({ db, t: { jobs } }) =>
    db
      .select({ bytes: sql<number | string | null>`sum(${jobs.storedBytes})` })
      .from(jobs)
      // The conditions of jobs_key_stored_idx: only jobs that stored something are read.
      .where(
        and(
          eq(jobs.apiKeyId, sql.placeholder('apiKeyId')),
          gte(jobs.finishedAt, sql.placeholder('since')),
          isNotNull(jobs.storedBytes),
        ),
      )
      .prepare('key_stored_bytes'),
  );
  const [row] = await query.execute({ apiKeyId, since });
  return Number(row?.bytes ?? 0);
}

/**
 * Locks the key's storage until the transaction ends: a job's allowance check and its record
 * wait for those of another job of the same key. PostgreSQL: a transaction-level advisory lock;
 * SQLite: nothing to do, its transactions run one at a time.
 */
export async function lockKeyStorage(q: Queryable, apiKeyId: string): Promise<void> {
  if (q.kind !== 'postgres') return;
  const query = prepared(q, 'lock_key_storage', ({ db }) =>
    db
      .select({ locked: sql<number>`1` })
      .from(sql`pg_advisory_xact_lock(hashtextextended(${sql.placeholder('key')}, 0))`)
      .prepare('lock_key_storage'),
  );
  await query.execute({ key: `key-storage:${apiKeyId}` });
}

/**
 * Whether `adding` more bytes keep the key within its allowance at `now`; when not, the job's
 * error (key_storage_quota_exceeded). Call under lockKeyStorage, in the transaction that records
 * the bytes.
 */
export async function allowanceRefusal(
  q: Queryable,
  allowance: KeyAllowance,
  apiKeyId: string,
  adding: number,
  now: number,
): Promise<JobError | undefined> {
  const used = await storedBytesSince(q, apiKeyId, now - allowance.windowMs);
  if (used + adding <= allowance.bytes) return undefined;
  const hours = Math.round(allowance.windowMs / 3600_000);
  return jobError('key_storage_quota_exceeded', {
    values: { limit: allowance.bytes, hours },
    detail: `The new content is ${adding} bytes (the WAV with its waveform peaks); ${used} bytes were stored in the last ${hours} h. Nothing was stored and nothing evicted.`,
  });
}
