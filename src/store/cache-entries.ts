import { and, eq } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { cacheEntries, type CacheEntryRow } from '../db/schema.js';

/** The cache rows that track stored artifacts (kind → content id and file name). */
export const SOURCE_WAV_KIND = 'source_wav';

export type NewCacheEntry = Omit<CacheEntryRow, 'createdAt' | 'lastUsedAt'>;

export function recordCacheEntry(db: Db, entry: NewCacheEntry, now: number): void {
  db.insert(cacheEntries)
    .values({ ...entry, createdAt: now, lastUsedAt: now })
    .onConflictDoUpdate({ target: [cacheEntries.contentId, cacheEntries.name], set: { lastUsedAt: now } })
    .run();
}

export function cacheEntriesFor(db: Db, contentId: string): CacheEntryRow[] {
  return db.select().from(cacheEntries).where(eq(cacheEntries.contentId, contentId)).all();
}

export function cacheEntryFor(db: Db, contentId: string, name: string): CacheEntryRow | undefined {
  return db
    .select()
    .from(cacheEntries)
    .where(and(eq(cacheEntries.contentId, contentId), eq(cacheEntries.name, name)))
    .get();
}
