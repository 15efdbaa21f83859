import { and, eq, lt } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { cacheEntries } from '../db/schema.js';

/**
 * Records that content was used (served), for least-recently-used eviction, without a database
 * write per request: touches are coalesced in memory and written in one transaction per flush.
 */
export interface UsageRecorder {
  /** A use now, or at `atMs` when it happened elsewhere earlier (never later than now). */
  touch(contentId: string, atMs?: number): void;
  flush(): number;
  start(): void;
  stop(): void;
}

/**
 * Writes one use at once, for callers that must make content hot in the same transaction as
 * the job that reuses it. Never moves a use back in time.
 */
export function recordUse(db: Db, contentId: string, at: number): void {
  db.update(cacheEntries)
    .set({ lastUsedAt: at })
    .where(and(eq(cacheEntries.contentId, contentId), lt(cacheEntries.lastUsedAt, at)))
    .run();
}

export function createUsageRecorder(deps: {
  db: Db;
  now: () => number;
  flushIntervalMs?: number;
  /** Called first in every flush, to touch uses recorded elsewhere (nginx's usage log). */
  collect?: () => void;
}): UsageRecorder {
  let pending = new Map<string, number>();
  let timer: NodeJS.Timeout | undefined;

  const recorder: UsageRecorder = {
    touch(contentId, atMs) {
      const now = deps.now();
      const at = atMs === undefined ? now : Math.min(atMs, now);
      pending.set(contentId, Math.max(pending.get(contentId) ?? 0, at));
    },
    flush() {
      deps.collect?.();
      if (pending.size === 0) return 0;
      const batch = pending;
      pending = new Map();
      deps.db.transaction(() => {
        for (const [contentId, at] of batch) recordUse(deps.db, contentId, at);
      });
      return batch.size;
    },
    start() {
      timer = setInterval(() => recorder.flush(), deps.flushIntervalMs ?? 1000);
      timer.unref();
    },
    stop() {
      if (timer) clearInterval(timer);
      recorder.flush();
    },
  };
  return recorder;
}
