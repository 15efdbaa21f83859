import type { Queryable } from './database.js';

/**
 * A query built once per database handle and then run with new values (a drizzle prepared query
 * with placeholders): for the queries every request makes, building the SQL with drizzle cost
 * more than running it. Kept per handle because a prepared query runs on the handle it was built
 * from: on PostgreSQL one built inside a transaction lives as long as that transaction (so only
 * the pool's are reused), on SQLite the transaction's handle is the database's own.
 */
const byHandle = new WeakMap<object, Map<string, unknown>>();

export function prepared<T>(q: Queryable, name: string, build: (q: Queryable) => T): T {
  let queries = byHandle.get(q.db);
  if (!queries) {
    queries = new Map();
    byHandle.set(q.db, queries);
  }
  let query = queries.get(name) as T | undefined;
  if (query === undefined) {
    query = build(q);
    queries.set(name, query);
  }
  return query;
}
