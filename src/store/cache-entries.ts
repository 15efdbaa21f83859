import { and, eq, sql, type AnyColumn } from 'drizzle-orm';
import type { CacheEntryRow, Queryable } from '../db/database.js';
import { prepared } from '../db/prepared.js';
import { clearEvicted } from './evicted.js';

/** The cache rows that track stored artifacts (kind → content id and file name). */
export const SOURCE_WAV_KIND = 'source_wav';
/** A WAV's waveform peaks (peaks.json), stored, used and evicted with it as one content. */
export const WAVEFORM_PEAKS_KIND = 'waveform_peaks';

type LoudnessColumns = 'loudnessIntegratedLufs' | 'loudnessRangeLu' | 'loudnessTruePeakDbtp';
export type NewCacheEntry = Omit<CacheEntryRow, 'createdAt' | 'lastUsedAt' | LoudnessColumns> &
  Partial<Pick<CacheEntryRow, LoudnessColumns>>;

/**
 * Records a stored artifact; content stored again after an eviction is no longer marked evicted.
 * A row already there is used now, and gains the loudness it lacked.
 */
export async function recordCacheEntry(q: Queryable, entry: NewCacheEntry, now: number): Promise<void> {
  const { cacheEntries } = q.t;
  const known = (column: AnyColumn, value: number | null | undefined) => sql`coalesce(${column}, ${value ?? null})`;
  await q.db
    .insert(cacheEntries)
    .values({ ...entry, createdAt: now, lastUsedAt: now })
    .onConflictDoUpdate({
      target: [cacheEntries.contentId, cacheEntries.name],
      set: {
        lastUsedAt: now,
        loudnessIntegratedLufs: known(cacheEntries.loudnessIntegratedLufs, entry.loudnessIntegratedLufs),
        loudnessRangeLu: known(cacheEntries.loudnessRangeLu, entry.loudnessRangeLu),
        loudnessTruePeakDbtp: known(cacheEntries.loudnessTruePeakDbtp, entry.loudnessTruePeakDbtp),
      },
    });
  await clearEvicted(q, entry.contentId);
}

export async function cacheEntriesFor(q: Queryable, contentId: string): Promise<CacheEntryRow[]> {
  const query = prepared(q, 'cache_entries_by_content', ({ db, t }) =>
    db
      .select()
      .from(t.cacheEntries)
      .where(eq(t.cacheEntries.contentId, sql.placeholder('contentId')))
      .prepare('cache_entries_by_content'),
  );
  return query.execute({ contentId });
}

export async function cacheEntryFor(q: Queryable, contentId: string, name: string): Promise<CacheEntryRow | undefined> {
  const { cacheEntries } = q.t;
  const [row] = await q.db
    .select()
    .from(cacheEntries)
    .where(and(eq(cacheEntries.contentId, contentId), eq(cacheEntries.name, name)));
  return row;
}
