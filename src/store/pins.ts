import { and, eq, gt, inArray, lt, ne, sql } from 'drizzle-orm';
import type { Database, Queryable } from '../db/database.js';
import { prepared } from '../db/prepared.js';
import type { ContentPins } from './content-store.js';

/**
 * Pins of content a job is storing, in the database so that every node's eviction sees them. A
 * pin and an eviction of the same content serialise on a per-content lock (`lockContent`), so
 * an eviction either sees the pin, or finishes removing the files before the pin exists and the
 * put that wanted it renames into a fresh folder. Pins expire: a node that died holding one
 * does not keep content forever.
 */
const DEFAULT_PIN_TTL_MS = 60 * 60 * 1000;

/**
 * Locks these content ids until the transaction ends: `use` by work that takes the content up (a
 * born-done job, a job reusing it through the media alias, a pin), `remove` by work that may
 * delete it (eviction, a put's clean-up). Uses share the lock, so concurrent submissions of one
 * popular URL do not queue behind each other; a removal waits for every use under way, and every
 * use waits for a removal under way. Postgres: transaction-level advisory locks (shared or
 * exclusive), in a fixed order (no deadlock between two lockers); born_done_job() takes the same
 * key in SQL (drizzle/postgres/0012_source_media.sql): they change together. SQLite: nothing
 * to do, its transactions run one at a time.
 */
export type ContentLock = 'use' | 'remove';

export async function lockContent(q: Queryable, contentIds: string[], lock: ContentLock): Promise<void> {
  if (q.kind !== 'postgres') return;
  // A prepared select (a raw execute() would ask PostgreSQL for its parameter's type first).
  const name = `lock_content_${lock}`;
  const query = prepared(q, name, ({ db }) => {
    const lockFunction = sql.raw(lock === 'use' ? 'pg_advisory_xact_lock_shared' : 'pg_advisory_xact_lock');
    return db
      .select({ locked: sql<number>`1` })
      .from(sql`${lockFunction}(hashtextextended(${sql.placeholder('key')}, 0))`)
      .prepare(name);
  });
  for (const contentId of [...new Set(contentIds)].sort()) await query.execute({ key: `store:${contentId}` });
}

/** The ids among `contentIds` that hold a live pin. */
export async function pinnedAmong(q: Queryable, contentIds: string[], now: number): Promise<Set<string>> {
  if (contentIds.length === 0) return new Set();
  const { storePins } = q.t;
  const rows = await q.db
    .select({ contentId: storePins.contentId })
    .from(storePins)
    .where(and(inArray(storePins.contentId, contentIds), gt(storePins.expiresAt, now)));
  return new Set(rows.map((row) => row.contentId));
}

/** Whether a live pin other than `holder`'s holds a content id. */
export async function pinnedByOthers(q: Queryable, contentId: string, holder: string, now: number): Promise<boolean> {
  const { storePins } = q.t;
  const rows = await q.db
    .select({ holder: storePins.holder })
    .from(storePins)
    .where(and(eq(storePins.contentId, contentId), ne(storePins.holder, holder), gt(storePins.expiresAt, now)))
    .limit(1);
  return rows.length > 0;
}

/** Ends one pin; in the transaction that records its content, so that the content is never unpinned and unrecorded. */
export async function endPin(q: Queryable, contentId: string, holder: string): Promise<void> {
  const { storePins } = q.t;
  await q.db.delete(storePins).where(and(eq(storePins.contentId, contentId), eq(storePins.holder, holder)));
}

export function createDatabasePins(deps: {
  database: Database;
  holder: () => string;
  now: () => number;
  ttlMs?: number;
}): ContentPins {
  const ttlMs = deps.ttlMs ?? DEFAULT_PIN_TTL_MS;
  return {
    async pin(contentId) {
      // One holder per put: the same bytes may be put by two jobs of one node at once.
      const holder = deps.holder();
      await deps.database.transaction(async (q) => {
        await lockContent(q, [contentId], 'use');
        await q.db.insert(q.t.storePins).values({ contentId, holder, expiresAt: deps.now() + ttlMs });
      });
      return { holder, unpin: () => endPin(deps.database, contentId, holder) };
    },
  };
}

/** Drops pins that have expired; returns how many. */
export async function dropExpiredPins(q: Queryable, now: number): Promise<number> {
  const { storePins } = q.t;
  const rows = await q.db
    .delete(storePins)
    .where(lt(storePins.expiresAt, now))
    .returning({ contentId: storePins.contentId });
  return rows.length;
}
