import { and, eq, lt, or } from 'drizzle-orm';
import type { Queryable } from './database.js';

/**
 * Named leases, for work that one node at a time must do (eviction, reconciliation): taken when
 * free or expired, renewed by taking again, given back when done. A node that dies holding one
 * loses it when it expires.
 */
export async function takeLease(
  q: Queryable,
  name: string,
  holder: string,
  now: number,
  ttlMs: number,
): Promise<boolean> {
  const { serviceLeases } = q.t;
  const rows = await q.db
    .insert(serviceLeases)
    .values({ name, holder, expiresAt: now + ttlMs })
    .onConflictDoUpdate({
      target: serviceLeases.name,
      set: { holder, expiresAt: now + ttlMs },
      setWhere: or(eq(serviceLeases.holder, holder), lt(serviceLeases.expiresAt, now)),
    })
    .returning({ name: serviceLeases.name });
  return rows.length > 0;
}

export async function giveBackLease(q: Queryable, name: string, holder: string): Promise<void> {
  const { serviceLeases } = q.t;
  await q.db.delete(serviceLeases).where(and(eq(serviceLeases.name, name), eq(serviceLeases.holder, holder)));
}

/** A lease's holder and expiry, whether or not it has expired; undefined when nobody took it. */
export async function readLease(
  q: Queryable,
  name: string,
): Promise<{ holder: string; expiresAt: number } | undefined> {
  const { serviceLeases } = q.t;
  const [row] = await q.db
    .select({ holder: serviceLeases.holder, expiresAt: serviceLeases.expiresAt })
    .from(serviceLeases)
    .where(eq(serviceLeases.name, name));
  return row;
}

/**
 * Sets a lease whoever holds it: for a row that marks a time for every node to see (when the next
 * scrub of the store is due, src/store/scrubber.ts) rather than work under way.
 */
export async function setLease(q: Queryable, name: string, holder: string, expiresAt: number): Promise<void> {
  const { serviceLeases } = q.t;
  await q.db
    .insert(serviceLeases)
    .values({ name, holder, expiresAt })
    .onConflictDoUpdate({ target: serviceLeases.name, set: { holder, expiresAt } });
}
