import { and, asc, eq, getTableColumns, sql } from 'drizzle-orm';
import type { AliasKind, CacheEntryRow, Queryable } from '../db/database.js';
import { prepared } from '../db/prepared.js';

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

/**
 * Points the alias at `contentId`. `media`: for a 'url' alias, what the job that stored it knew
 * of the source (the record's `media` in JSON), which jobs born done from the alias show.
 */
export async function setAlias(
  q: Queryable,
  kind: AliasKind,
  key: string,
  contentId: string,
  now: number,
  media: string | null = null,
): Promise<void> {
  const { aliases } = q.t;
  await q.db
    .insert(aliases)
    .values({ kind, key, contentId, createdAt: now, media })
    .onConflictDoUpdate({ target: [aliases.kind, aliases.key], set: { contentId, createdAt: now, media } });
}

/** The content id an alias points to, only while that content still has a cache row. */
export async function resolveAlias(q: Queryable, kind: AliasKind, key: string): Promise<string | undefined> {
  const query = prepared(q, 'alias_content', ({ db, t: { aliases, cacheEntries } }) =>
    db
      .select({ contentId: aliases.contentId })
      .from(aliases)
      .innerJoin(cacheEntries, eq(cacheEntries.contentId, aliases.contentId))
      .where(and(eq(aliases.kind, sql.placeholder('kind')), eq(aliases.key, sql.placeholder('key'))))
      .limit(1)
      .prepare('alias_content'),
  );
  const [row] = await query.execute({ kind, key });
  return row?.contentId;
}

/**
 * The artifacts (cache rows, by name) of the content an alias points to; none when it points to
 * no content still stored. A born-done submission reads them once, for its job and its record.
 */
export async function aliasedArtifacts(q: Queryable, kind: AliasKind, key: string): Promise<CacheEntryRow[]> {
  const query = prepared(q, 'alias_artifacts', ({ db, t: { aliases, cacheEntries } }) =>
    db
      .select(getTableColumns(cacheEntries))
      .from(aliases)
      .innerJoin(cacheEntries, eq(cacheEntries.contentId, aliases.contentId))
      .where(and(eq(aliases.kind, sql.placeholder('kind')), eq(aliases.key, sql.placeholder('key'))))
      .orderBy(asc(cacheEntries.name))
      .prepare('alias_artifacts'),
  );
  return query.execute({ kind, key });
}

/** aliasedArtifacts for many keys of one kind in one statement, by key: PostgreSQL only (`= any` of an array). */
export async function aliasedArtifactsOfKeys(
  q: Queryable,
  kind: AliasKind,
  keys: string[],
): Promise<Map<string, CacheEntryRow[]>> {
  const query = prepared(q, 'alias_artifacts_of_keys', ({ db, t: { aliases, cacheEntries } }) =>
    db
      .select({ key: aliases.key, artifact: cacheEntries })
      .from(aliases)
      .innerJoin(cacheEntries, eq(cacheEntries.contentId, aliases.contentId))
      .where(and(eq(aliases.kind, sql.placeholder('kind')), sql`${aliases.key} = any(${sql.placeholder('keys')})`))
      .orderBy(asc(cacheEntries.name))
      .prepare('alias_artifacts_of_keys'),
  );
  const byKey = new Map<string, CacheEntryRow[]>();
  for (const { key, artifact } of await query.execute({ kind, keys })) {
    const artifacts = byKey.get(key);
    if (artifacts) artifacts.push(artifact);
    else byKey.set(key, [artifact]);
  }
  return byKey;
}
