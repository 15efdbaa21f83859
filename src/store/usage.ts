import { and, eq, lt } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { cacheEntries } from '../db/schema.js';

/**
 * Records that content was used (served), for least-recently-used eviction, without a database
 * write per request: touches are coalesced in memory and written in one transaction per flush.
 */
export interface UsageRecorder {
  touch(contentId: string): void;
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

export function createUsageRecorder(deps: { db: Db; now: () => number; flushIntervalMs?: number }): UsageRecorder {
  let pending = new Map<string, number>();
  let timer: NodeJS.Timeout | undefined;

  const recorder: UsageRecorder = {
    touch(contentId) {
      pending.set(contentId, deps.now());
    },
    flush() {
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
