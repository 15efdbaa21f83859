import { and, eq } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { aliases, cacheEntries, type AliasKind } from '../db/schema.js';

/**
 * Aliases point a submitted URL (kind 'url', normalized by aliasKey) or a downloader media
 * identity (kind 'media', '<extractor_key>:<site>:<id>') at a content id.
 *
 * The site (host, and port when not the default, of the media's page) is part of the media key:
 * an extractor id alone can be chosen by whoever controls a host (PeerTube-style extractors
 * accept any host whose page says so), and would let one client store audio under another
 * site's id for every later submission of the real media to receive.
 */
export function mediaAliasKey(extractorKey: string, site: string, mediaId: string): string {
  return `${extractorKey.toLowerCase()}:${site.toLowerCase()}:${mediaId}`;
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
