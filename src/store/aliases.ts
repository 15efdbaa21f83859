import { and, eq } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { aliases, cacheEntries, type AliasKind } from '../db/schema.js';

/**
 * Aliases point a submitted URL (kind 'url', normalized by aliasKey) or a downloader media
 * identity (kind 'media', '<extractor_key>:<id>') at a content id.
 */
export function mediaAliasKey(extractorKey: string, mediaId: string): string {
  return `${extractorKey.toLowerCase()}:${mediaId}`;
}

export function setAlias(db: Db, kind: AliasKind, key: string, contentId: string, now: number): void {
  db.insert(aliases)
    .values({ kind, key, contentId, createdAt: now })
    .onConflictDoUpdate({ target: [aliases.kind, aliases.key], set: { contentId, createdAt: now } })
    .run();
}

/** The content id an alias points to, only while that content still has a cache row. */
export function resolveAlias(db: Db, kind: AliasKind, key: string): string | undefined {
  const row = db
    .select({ contentId: aliases.contentId })
    .from(aliases)
    .innerJoin(cacheEntries, eq(cacheEntries.contentId, aliases.contentId))
    .where(and(eq(aliases.kind, kind), eq(aliases.key, key)))
    .get();
  return row?.contentId;
}
