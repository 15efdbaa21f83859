import { eq, inArray, sql } from 'drizzle-orm';
import type { Queryable } from '../db/database.js';
import { prepared } from '../db/prepared.js';

/**
 * When the store removed content (evicted it, or found its file gone at start-up), kept so that a
 * job done with that content can say why its artifacts are gone and when (its record's
 * result.evicted). Written in the transaction that removes the content's rows; cleared when the
 * same content is stored again, in the transaction that records it.
 */
export async function markEvicted(q: Queryable, contentIds: string[], at: number): Promise<void> {
  if (contentIds.length === 0) return;
  const { evictedContent } = q.t;
  await q.db
    .insert(evictedContent)
    .values(contentIds.map((contentId) => ({ contentId, evictedAt: at })))
    .onConflictDoUpdate({ target: evictedContent.contentId, set: { evictedAt: at } });
}

/** The content is stored again: its jobs' records no longer say it was evicted. */
export async function clearEvicted(q: Queryable, contentId: string): Promise<void> {
  const query = prepared(q, 'clear_evicted', ({ db, t: { evictedContent } }) =>
    db
      .delete(evictedContent)
      .where(eq(evictedContent.contentId, sql.placeholder('contentId')))
      .prepare('clear_evicted'),
  );
  await query.execute({ contentId });
}

/** When each of these content ids was removed, for those that were. */
export async function evictedAt(q: Queryable, contentIds: string[]): Promise<Map<string, number>> {
  if (contentIds.length === 0) return new Map();
  const { evictedContent } = q.t;
  const rows = await q.db.select().from(evictedContent).where(inArray(evictedContent.contentId, contentIds));
  return new Map(rows.map((row) => [row.contentId, row.evictedAt]));
}
