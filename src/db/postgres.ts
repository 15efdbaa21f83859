import { fileURLToPath } from 'node:url';
import { drizzle } from 'drizzle-orm/postgres-js';
import { migrate } from 'drizzle-orm/postgres-js/migrator';
import postgres from 'postgres';
import type { Database, Queryable } from './database.js';
import { gatheredReads } from './gathered.js';
import { guardedByCheckedWrite } from './guarded-write.js';
import { createTransactionContext } from './transaction-context.js';
import * as pgSchema from './schema/postgres.js';

const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../drizzle/postgres', import.meta.url));
/** Any constant: nodes starting at once take turns to migrate. */
const MIGRATION_LOCK = 0x53465f4d; // "SF_M"

/**
 * PostgreSQL shared by many nodes, through postgres.js: a pool of `poolSize` connections, named
 * prepared statements per connection, and LISTEN on one connection of its own. Migrations run
 * at open under an advisory lock, so nodes that start together migrate one after the other.
 */
export async function openPostgres(
  url: string,
  opts: { poolSize?: number; applicationName?: string } = {},
): Promise<Database> {
  const connection = { application_name: opts.applicationName ?? 'source-fetch' };
  const migrator = postgres(url, connecting({ max: 1, onnotice: () => {}, connection }));
  try {
    await migrator`select pg_advisory_lock(${MIGRATION_LOCK})`;
    await migrate(drizzle(migrator), { migrationsFolder: MIGRATIONS_FOLDER });
    await migrator`select pg_advisory_unlock(${MIGRATION_LOCK})`;
  } finally {
    await migrator.end({ timeout: 5 });
  }

  const client = postgres(url, connecting({ max: opts.poolSize ?? 10, onnotice: () => {}, connection }));
  const db = drizzle(client, { schema: pgSchema });
  const q: Queryable = { kind: 'postgres', db, t: pgSchema };
  const context = createTransactionContext<Queryable>();

  const database: Database = {
    ...q,
    transaction(fn, options) {
      const current = options?.handleOnly ? undefined : context.current();
      if (current !== undefined) return fn(current);
      return db.transaction((tx) => {
        // drizzle's postgres-js transaction runs its queries on `session.client`, the connection
        // postgres.js reserved for it.
        const connection = (tx as unknown as { session: { client: unknown } }).session.client;
        const inner: Queryable = {
          kind: 'postgres',
          db: tx,
          t: q.t,
          pooled: { home: q, onThisConnection: (query) => onConnection(query, connection) },
        };
        return options?.handleOnly ? fn(inner) : context.run(inner, () => fn(inner));
      });
    },
    hotReads: (read, options) => gatheredReads(read.many, options.together),
    guardedWrites: (op, together) => guardedByCheckedWrite(database, op, together),
    async notify(channel, payload) {
      await client.notify(channel, payload);
    },
    async listen(channel, onMessage) {
      const subscription = await client.listen(channel, onMessage);
      return () => subscription.unlisten();
    },
    async ping() {
      const rows = await client`select 1 as ok`;
      return rows.length === 1;
    },
    async close() {
      await client.end({ timeout: 5 });
    },
  };
  return database;
}

/**
 * How a pool connects: after a failed attempt, again within a second at most. postgres.js's own
 * back-off grows to 20 s, and the queries queued meanwhile wait for the next attempt, so a request
 * would learn only that late that the database is out of reach. (The driver is patched so that a
 * lost connection or a refused one settles its queries: patches/README.md.)
 */
function connecting<T extends object>(options: T): T {
  return Object.assign(options, { backoff: reconnectDelaySeconds });
}

/** Doubling from 50 ms up to 1 s, with jitter so that a pool's connections do not retry in step. */
function reconnectDelaySeconds(failures: number): number {
  return (0.5 + Math.random() / 2) * Math.min(0.05 * 2 ** failures, 1);
}

/** A copy of a prepared query that runs on `connection`: drizzle's PostgresJsPreparedQuery runs on its own `client`. */
function onConnection<T extends object>(query: T, connection: unknown): T {
  return Object.assign(Object.create(Object.getPrototypeOf(query) as object) as T, query, { client: connection });
}
