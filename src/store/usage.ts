import { and, eq, lt, sql } from 'drizzle-orm';
import { prepared } from '../db/prepared.js';
import type { Database, Queryable } from '../db/database.js';

/**
 * Records that content was used (served), for least-recently-used eviction, without a database
 * write per request: touches are coalesced in memory and written in one transaction per flush.
 */
export interface UsageRecorder {
  /** A use now, or at `atMs` when it happened elsewhere earlier (never later than now). */
  touch(contentId: string, atMs?: number): void;
  flush(): Promise<number>;
  start(): void;
  stop(): Promise<void>;
}

/**
 * Writes one use at once, for callers that must make content hot in the same transaction as
 * the job that reuses it. Never moves a use back in time, and writes nothing when the content is
 * already the most recently used of all: eviction goes by rank, which such a write would not
 * change (eviction takes the hottest content only when the cap leaves no room for it beside the
 * pinned, and a use would only put that off to its next batch). So reuses of the hottest content
 * write nothing, where each would write (on PostgreSQL, waiting for the previous one's row lock
 * until its COMMIT), and a use is written as soon as any other content was used later.
 */
export async function recordUse(q: Queryable, contentId: string, at: number): Promise<void> {
  const query = prepared(q, 'record_use', ({ db, t: { cacheEntries } }) =>
    db
      .update(cacheEntries)
      .set({ lastUsedAt: sql`${sql.placeholder('at')}` })
      .where(
        and(
          eq(cacheEntries.contentId, sql.placeholder('contentId')),
          lt(cacheEntries.lastUsedAt, sql.placeholder('at')),
          // Uncorrelated: read once per statement, from the end of cache_entries_lru_idx.
          lt(cacheEntries.lastUsedAt, sql`(select max(${cacheEntries.lastUsedAt}) from ${cacheEntries})`),
        ),
      )
      .prepare('record_use'),
  );
  await query.execute({ contentId, at });
}

export function createUsageRecorder(deps: {
  database: Database;
  now: () => number;
  flushIntervalMs?: number;
  onError?: (err: unknown) => void;
  /** Called first in every flush, to touch uses recorded elsewhere (nginx's usage log). */
  collect?: () => void;
}): UsageRecorder {
  let pending = new Map<string, number>();
  let timer: NodeJS.Timeout | undefined;
  // Flushes write one after another, so a flush returns only once every touch made before it is
  // written: one that finds nothing pending still waits for the batch another flush is writing.
  let writing: Promise<unknown> = Promise.resolve();

  const touch = (contentId: string, at: number) => pending.set(contentId, Math.max(pending.get(contentId) ?? 0, at));

  async function write(batch: Map<string, number>): Promise<void> {
    try {
      await deps.database.transaction(async (q) => {
        for (const [contentId, at] of batch) await recordUse(q, contentId, at);
      });
    } catch (err) {
      // Kept for the next flush: a use is lost only if the process ends first.
      for (const [contentId, at] of batch) touch(contentId, at);
      throw err;
    }
  }

  const recorder: UsageRecorder = {
    touch(contentId, atMs) {
      const now = deps.now();
      touch(contentId, atMs === undefined ? now : Math.min(atMs, now));
    },
    async flush() {
      deps.collect?.();
      const batch = pending;
      pending = new Map();
      const written = writing.then(() => (batch.size === 0 ? undefined : write(batch)));
      writing = written.catch(() => undefined);
      await written;
      return batch.size;
    },
    start() {
      timer = setInterval(() => {
        recorder.flush().catch((err: unknown) => deps.onError?.(err));
      }, deps.flushIntervalMs ?? 1000);
      timer.unref();
    },
    async stop() {
      if (timer) clearInterval(timer);
      await recorder.flush();
    },
  };
  return recorder;
}
