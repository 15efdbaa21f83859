import { and, asc, eq, inArray, sql } from 'drizzle-orm';
import type { Database, Queryable } from '../db/database.js';
import { databaseOutage } from '../db/outage.js';
import type { CommitReserve } from './commit-reserve.js';
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
 * not with the size of the store. Rows first, in one transaction; files only once it has
 * committed (`removeUnrecorded`), so a commit the database refuses (its disk full, its connection
 * lost) leaves every row with its file; one refused for lack of room on a volume it shares with
 * the store commits in a reserve kept for it (./commit-reserve.ts), as no unlink has made room
 * before it. Never a row without its file: a crash or a failure
 * between the commit and the unlink leaves files without rows, of content marked evicted, which
 * the next run of the size cap (./size-cap.ts) or start-up reconciliation (./reconcile.ts) removes.
 *
 * Never evicted: content a job is storing, pinned in the database by the store's put until the
 * job has recorded it, on any node (the victims are locked and their pins checked before their
 * rows go, and a pin takes the same lock); and content a job reuses, which it checks and records
 * in one transaction. Between the commit and the unlink, born-done jobs and delivery find no row;
 * a put that pins the content then may find its file still there and take it up: the unlink
 * takes the lock again and leaves the files of content pinned or recorded since. A queued job
 * holds no content: it may need content only through an alias, which it checks when it runs.
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
  /**
   * Evicted content whose files could not be removed after the commit (the database lost, an
   * unlink refused): the run stopped there, as its files still take their space; for the next run.
   */
  filesLeft: string[];
  /** Why `filesLeft` are left. */
  filesError?: unknown;
}

/**
 * Removes the files of content whose rows are gone, once their removal has committed: under the
 * content locks, but for content a put has pinned since (it may have found the files there and be
 * recording them; a put that fails takes back what no row names) or that has rows again. Returns
 * the ids whose folders it removed. A reader that has a file open keeps reading it: unlinking does
 * not cut a download short.
 */
export async function removeUnrecorded(deps: {
  database: Database;
  store: ContentStore;
  contentIds: string[];
  now: () => number;
}): Promise<string[]> {
  const { database, store, contentIds } = deps;
  if (contentIds.length === 0) return [];
  return database.transaction(async (q) => {
    const { cacheEntries } = q.t;
    await lockContent(q, contentIds, 'remove');
    const pinned = await pinnedAmong(q, contentIds, deps.now());
    const recorded = await q.db
      .selectDistinct({ contentId: cacheEntries.contentId })
      .from(cacheEntries)
      .where(inArray(cacheEntries.contentId, contentIds));
    const kept = new Set([...pinned, ...recorded.map((row) => row.contentId)]);
    const removable = contentIds.filter((contentId) => !kept.has(contentId));
    // Still under the locks: no put can pin these until their files are gone.
    for (const contentId of removable) store.removeSync(contentId);
    return removable;
  });
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
  /** Room on the database's volume for a commit refused for lack of it (./commit-reserve.ts). */
  reserve?: CommitReserve;
  batchSize?: number;
}): Promise<EvictionResult> {
  const { database, store } = deps;
  const batchSize = deps.batchSize ?? 200;
  const result: EvictionResult = { evictedArtifacts: 0, evictedBytes: 0, evictedContentIds: [], filesLeft: [] };
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

    const removeRows = () =>
      database.transaction(async (q) => {
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
        return { deleted, goneIds };
      });
    let removed;
    try {
      removed = await removeRows();
    } catch (err) {
      // Refused for lack of room on the database's volume, which no unlink has freed yet: the reserve's.
      if (databaseOutage(err) !== 'full' || !deps.reserve?.release()) throw err;
      removed = await removeRows();
    }
    // A candidate used meanwhile is hot now: the order changed, so the next batch starts over.
    if (removed.goneIds.length < new Set(candidates.map((row) => row.contentId)).size) cursor = undefined;
    result.evictedArtifacts += removed.deleted.length;
    result.evictedBytes += removed.deleted.reduce((sum, victim) => sum + victim.bytes, 0);
    result.evictedContentIds.push(...removed.goneIds);
    try {
      await removeUnrecorded({ database, store, contentIds: removed.goneIds, now: deps.now });
    } catch (err) {
      // Their space is not free yet: evicting more would not make up for it.
      result.filesLeft.push(...removed.goneIds);
      result.filesError = err;
      break;
    }
  }
  deps.reserve?.restore();
  return result;
}
