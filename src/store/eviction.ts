import { and, asc, eq, inArray, sql } from 'drizzle-orm';
import type { Database, Queryable } from '../db/database.js';
import type { ContentStore } from './content-store.js';
import { markEvicted } from './evicted.js';
import type { StoreSpace } from './free-space.js';
import { lockContent, pinnedAmong } from './pins.js';

/**
 * Least-recently-used garbage collection: while the store holds more than its cap, the coldest
 * cache rows go, each with the other rows of its content (a WAV and its peaks are one content,
 * used together), with their files and the aliases that pointed at them; the time each content
 * went is kept (./evicted.ts) for the records of the jobs done with it. Rows are read in
 * last-use order through the index, a batch at a time, so the cost grows with what is evicted,
 * not with the size of the store. Rows first, files after, in one transaction: a crash in
 * between leaves files without rows, which start-up reconciliation removes; never a row without
 * its file.
 *
 * Never evicted: content a job is storing, pinned in the database by the store's put until the
 * job has recorded it, on any node (the victims are locked, their pins checked, their rows and
 * files removed before the lock is let go, and a pin takes the same lock); and content a job
 * reuses, which it checks and records in one transaction. A queued job holds no content: it
 * may need content only through an alias, which it checks when it runs.
 */
export interface StoreTotals {
  bytes: number;
  artifacts: number;
}

export async function readStoreTotals(q: Queryable): Promise<StoreTotals> {
  const { storeTotals } = q.t;
  const [row] = await q.db
    .select({ bytes: storeTotals.bytes, artifacts: storeTotals.artifacts })
    .from(storeTotals)
    .where(eq(storeTotals.id, 1));
  return row ? { bytes: Number(row.bytes), artifacts: Number(row.artifacts) } : { bytes: 0, artifacts: 0 };
}

/** The bytes of each content's rows together. */
async function bytesOfContents(q: Queryable, contentIds: string[]): Promise<Map<string, number>> {
  const { cacheEntries } = q.t;
  const rows = await q.db
    .select({ contentId: cacheEntries.contentId, bytes: sql<number | string>`sum(${cacheEntries.bytes})` })
    .from(cacheEntries)
    .where(inArray(cacheEntries.contentId, contentIds))
    .groupBy(cacheEntries.contentId);
  return new Map(rows.map((row) => [row.contentId, Number(row.bytes)]));
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
 * comparison in the index's column order, which both databases turn into a range on
 * cache_entries_lru_idx: they walk the index from the cursor and stop at the LIMIT (the same
 * condition spelled as an OR of comparisons walks from the start of the index). Exported so
 * that a test can check its query plan.
 */
export function evictionBatchQuery(q: Queryable, cursor: EvictionCursor | undefined, batchSize: number) {
  const { cacheEntries } = q.t;
  return q.db
    .select({
      contentId: cacheEntries.contentId,
      name: cacheEntries.name,
      bytes: cacheEntries.bytes,
      lastUsedAt: cacheEntries.lastUsedAt,
    })
    .from(cacheEntries)
    .where(
      cursor
        ? sql`(${cacheEntries.lastUsedAt}, ${cacheEntries.contentId}, ${cacheEntries.name}) > (${cursor.lastUsedAt}, ${cursor.contentId}, ${cursor.name})`
        : undefined,
    )
    .orderBy(asc(cacheEntries.lastUsedAt), asc(cacheEntries.contentId), asc(cacheEntries.name))
    .limit(batchSize);
}

/**
 * Evicts until the store is within `capBytes` and, given `space`, its volume has at least
 * `space.minFreeBytes` free: each batch goes by whichever falls shorter, read anew before it (the
 * files of a batch are gone from the volume when the next is read; one a reader still holds open
 * keeps its blocks until it is closed, and the next batch makes up for it). Stops when nothing is
 * left to evict but pinned content.
 */
export async function evictToCap(deps: {
  database: Database;
  store: ContentStore;
  capBytes: number;
  now: () => number;
  space?: Pick<StoreSpace, 'freeBytes' | 'minFreeBytes'>;
  batchSize?: number;
}): Promise<EvictionResult> {
  const { database, store } = deps;
  const batchSize = deps.batchSize ?? 200;
  const result: EvictionResult = { evictedArtifacts: 0, evictedBytes: 0, evictedContentIds: [] };
  let cursor: EvictionCursor | undefined;
  /** Bytes to evict: past the cap, or short of the free space to keep, whichever is more. */
  const shortfall = async () => {
    const overCap = (await readStoreTotals(database)).bytes - deps.capBytes;
    const free = deps.space?.freeBytes() ?? null;
    return Math.max(overCap, free === null ? 0 : deps.space!.minFreeBytes - free);
  };

  while ((await shortfall()) > 0) {
    const rows = await evictionBatchQuery(database, cursor, batchSize);
    if (rows.length === 0) break;

    const contentIds = [...new Set(rows.map((row) => row.contentId))];
    const pinned = await pinnedAmong(database, contentIds, deps.now());
    const contentBytes = await bytesOfContents(database, contentIds);
    let excess = await shortfall();
    const candidates: typeof rows = [];
    const chosen = new Set<string>();
    for (const row of rows) {
      if (excess <= 0) break;
      cursor = row;
      if (pinned.has(row.contentId)) continue;
      candidates.push(row);
      // Its content goes whole: all of its rows' bytes count, once.
      if (chosen.has(row.contentId)) continue;
      chosen.add(row.contentId);
      excess -= contentBytes.get(row.contentId) ?? row.bytes;
    }
    if (candidates.length === 0) {
      if (excess > 0) continue; // this batch was all pinned: look further
      break;
    }

    const removed = await database.transaction(async (q) => {
      const { cacheEntries, aliases } = q.t;
      const touched = [...new Set(candidates.map((row) => row.contentId))];
      await lockContent(q, touched, 'remove');
      // Pinned since the batch was read: a put on some node is storing it now.
      const pinnedNow = await pinnedAmong(q, touched, deps.now());
      const victims = candidates.filter((row) => !pinnedNow.has(row.contentId));
      const deleted: Array<{ contentId: string; bytes: number }> = [];
      for (const victim of victims) {
        // Only if unused since the batch was read: a job (born done, or through the media alias)
        // may have taken it up, under the same lock, in between.
        const gone = await q.db
          .delete(cacheEntries)
          .where(
            and(
              eq(cacheEntries.contentId, victim.contentId),
              eq(cacheEntries.name, victim.name),
              eq(cacheEntries.lastUsedAt, victim.lastUsedAt),
            ),
          )
          .returning({ bytes: cacheEntries.bytes });
        if (gone.length === 0) continue;
        // A content's files go together (its WAV and the peaks drawn from it): the others of its rows too.
        const rest = await q.db
          .delete(cacheEntries)
          .where(eq(cacheEntries.contentId, victim.contentId))
          .returning({ bytes: cacheEntries.bytes });
        for (const row of [...gone, ...rest]) deleted.push({ contentId: victim.contentId, bytes: row.bytes });
      }
      const goneIds = [...new Set(deleted.map((row) => row.contentId))];
      if (goneIds.length > 0) await q.db.delete(aliases).where(inArray(aliases.contentId, goneIds));
      await markEvicted(q, goneIds, deps.now());
      // Still under the content locks: no put can pin these until their files are gone. A reader
      // that has a file open keeps reading it: unlinking does not cut a download short.
      for (const contentId of goneIds) store.removeSync(contentId);
      return { deleted, goneIds };
    });
    // A candidate used meanwhile is hot now: the order changed, so the next batch starts over.
    if (removed.goneIds.length < new Set(candidates.map((row) => row.contentId)).size) cursor = undefined;
    result.evictedArtifacts += removed.deleted.length;
    result.evictedBytes += removed.deleted.reduce((sum, victim) => sum + victim.bytes, 0);
    result.evictedContentIds.push(...removed.goneIds);
  }
  return result;
}
