import type { Queryable } from './database.js';

/**
 * A query built once per database and then run with new values (a drizzle prepared query with
 * placeholders): for the queries every request makes, building the SQL with drizzle costs more
 * than running it. On SQLite a transaction's handle is the database's own. On PostgreSQL a query
 * runs on the connection of the handle it was built from, so a transaction's queries too are
 * built once, on the pool's handle, and each run gets a copy bound to the transaction's
 * connection (Queryable.pooled) instead of a query built anew in every transaction.
 */
const byHandle = new WeakMap<object, Map<string, unknown>>();

export function prepared<T extends object>(q: Queryable, name: string, build: (q: Queryable) => T): T {
  const home = q.pooled?.home ?? q;
  let queries = byHandle.get(home.db);
  if (!queries) {
    queries = new Map();
    byHandle.set(home.db, queries);
  }
  let query = queries.get(name) as T | undefined;
  if (query === undefined) {
    query = build(home);
    queries.set(name, query);
  }
  return q.pooled ? q.pooled.onThisConnection(query) : query;
}
