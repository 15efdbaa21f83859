import { and, asc, eq, inArray, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { aliases, cacheEntries, storeTotals } from '../db/schema.js';
import type { ContentStore } from './content-store.js';

/**
 * Least-recently-used garbage collection: while the store holds more than its cap, the coldest
 * cache rows go, with their files and the aliases that pointed at them. Rows are read in
 * last-use order through the index, a batch at a time, so the cost grows with what is evicted,
 * not with the size of the store. Database first, files after: a crash in between leaves files
 * without rows, which start-up reconciliation removes; never a row without its file.
 *
 * Never evicted: content a job is storing (pinned by the store's put until the job has recorded
 * it; choosing victims, dropping their rows and removing their files is one synchronous run, so a
 * put cannot pin in between), and content a job reuses, which it checks and records in one
 * synchronous transaction. A queued job holds no content: it may need content only through an
 * alias, which it checks when it runs.
 */
export interface StoreTotals {
  bytes: number;
  artifacts: number;
}

export function readStoreTotals(db: Db): StoreTotals {
  return db.select({ bytes: storeTotals.bytes, artifacts: storeTotals.artifacts }).from(storeTotals).where(eq(storeTotals.id, 1)).get() ?? { bytes: 0, artifacts: 0 };
}

export interface EvictionResult {
  evictedArtifacts: number;
  evictedBytes: number;
  evictedContentIds: string[];
}

export interface EvictionCursor {
  lastUsedAt: number;
  contentId: string;
  name: string;
}

/**
 * One batch of eviction candidates, coldest first, after `cursor`. The cursor is a row-value
 * comparison in the index's column order, which SQLite turns into a range on
 * cache_entries_lru_idx: it walks the index from the cursor and stops at the LIMIT (the same
 * condition spelled as an OR of comparisons walks from the start of the index). Exported so
 * that a test can check its query plan.
 */
export function evictionBatchQuery(db: Db, cursor: EvictionCursor | undefined, batchSize: number) {
  return db
    .select({ contentId: cacheEntries.contentId, name: cacheEntries.name, bytes: cacheEntries.bytes, lastUsedAt: cacheEntries.lastUsedAt })
    .from(cacheEntries)
    .where(
      cursor
        ? sql`(${cacheEntries.lastUsedAt}, ${cacheEntries.contentId}, ${cacheEntries.name}) > (${cursor.lastUsedAt}, ${cursor.contentId}, ${cursor.name})`
        : undefined,
    )
    .orderBy(asc(cacheEntries.lastUsedAt), asc(cacheEntries.contentId), asc(cacheEntries.name))
    .limit(batchSize);
}

export async function evictToCap(deps: {
  db: Db;
  store: ContentStore;
  capBytes: number;
  batchSize?: number;
}): Promise<EvictionResult> {
  const batchSize = deps.batchSize ?? 200;
  const result: EvictionResult = { evictedArtifacts: 0, evictedBytes: 0, evictedContentIds: [] };
  let cursor: EvictionCursor | undefined;

  while (readStoreTotals(deps.db).bytes > deps.capBytes) {
    const rows = evictionBatchQuery(deps.db, cursor, batchSize).all();
    if (rows.length === 0) break;

    let excess = readStoreTotals(deps.db).bytes - deps.capBytes;
    const victims: typeof rows = [];
    for (const row of rows) {
      cursor = row;
      if (excess <= 0) break;
      if (deps.store.isPinned(row.contentId)) continue;
      victims.push(row);
      excess -= row.bytes;
    }
    if (victims.length === 0) {
      if (excess > 0) continue; // this batch was all pinned: look further
      break;
    }

    const goneContentIds = deps.db.transaction((tx) => {
      for (const victim of victims) {
        tx.delete(cacheEntries).where(and(eq(cacheEntries.contentId, victim.contentId), eq(cacheEntries.name, victim.name))).run();
      }
      const touched = [...new Set(victims.map((victim) => victim.contentId))];
      const stillThere = new Set(
        tx.select({ contentId: cacheEntries.contentId }).from(cacheEntries).where(inArray(cacheEntries.contentId, touched)).all().map((row) => row.contentId),
      );
      const gone = touched.filter((contentId) => !stillThere.has(contentId));
      if (gone.length > 0) tx.delete(aliases).where(inArray(aliases.contentId, gone)).run();
      return gone;
    });
    // A reader that has a file open keeps reading it: unlinking does not cut a download short.
    for (const contentId of goneContentIds) deps.store.removeSync(contentId);
    const gone = new Set(goneContentIds);
    await Promise.all(
      victims.filter((victim) => !gone.has(victim.contentId)).map((victim) => deps.store.removeArtifact(victim.contentId, victim.name)),
    );
    result.evictedArtifacts += victims.length;
    result.evictedBytes += victims.reduce((sum, victim) => sum + victim.bytes, 0);
    result.evictedContentIds.push(...goneContentIds);
  }
  return result;
}
