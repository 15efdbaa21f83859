import { and, eq, lt, or } from 'drizzle-orm';
import type { Queryable } from './database.js';

/**
 * Named leases, for work that one node at a time must do (eviction, reconciliation): taken when
 * free or expired, renewed by taking again, given back when done. A node that dies holding one
 * loses it when it expires.
 */
export async function takeLease(q: Queryable, name: string, holder: string, now: number, ttlMs: number): Promise<boolean> {
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
