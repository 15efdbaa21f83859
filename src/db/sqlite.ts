import { AsyncLocalStorage } from 'node:async_hooks';
import { EventEmitter } from 'node:events';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import BetterSqlite3 from 'better-sqlite3';
import { drizzle as drizzleSync } from 'drizzle-orm/better-sqlite3';
import { migrate } from 'drizzle-orm/better-sqlite3/migrator';
import { drizzle as drizzleProxy } from 'drizzle-orm/sqlite-proxy';
import type { Database, Db, Queryable, Tables } from './database.js';
import * as sqliteSchema from './schema/sqlite.js';

/** drizzle/ sits at the package root, one level above both src/ and dist/. */
const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../drizzle/sqlite', import.meta.url));
/** Distinct statements stay few; the cache is only a bound against queries built with varying IN lists. */
const STATEMENT_CACHE_SIZE = 500;

/**
 * SQLite in one file: WAL mode (readers never block the writer), synchronous=NORMAL (durable
 * across process crashes in WAL mode), migrations applied on open.
 *
 * better-sqlite3 is synchronous and one connection serves the whole process, so a transaction
 * whose code awaits between its queries would otherwise take in the queries of whatever else runs
 * meanwhile. The queries go through drizzle's asynchronous SQLite session (sqlite-proxy) to a
 * gate: while a transaction is open, only queries made from inside it (same async context,
 * tracked with AsyncLocalStorage) run; the others wait for its COMMIT. Queries still execute
 * synchronously, on prepared statements kept by SQL text.
 */
export function openSqlite(file: string): Database {
  mkdirSync(path.dirname(file), { recursive: true });
  const client = new BetterSqlite3(file);
  client.pragma('journal_mode = WAL');
  client.pragma('synchronous = NORMAL');
  client.pragma('busy_timeout = 5000');
  client.pragma('foreign_keys = ON');
  migrate(drizzleSync(client), { migrationsFolder: MIGRATIONS_FOLDER });

  const statements = new Map<string, BetterSqlite3.Statement>();
  const prepare = (text: string): BetterSqlite3.Statement => {
    let statement = statements.get(text);
    if (!statement) {
      if (statements.size >= STATEMENT_CACHE_SIZE) statements.clear();
      statement = client.prepare(text);
      statements.set(text, statement);
    }
    return statement;
  };

  const context = new AsyncLocalStorage<symbol>();
  /** The open transaction, if any. */
  let owner: symbol | null = null;
  const released = new EventEmitter().setMaxListeners(0);
  const free = () => new Promise((resolve) => released.once('free', resolve));

  const db = drizzleProxy(
    async (text, params, method) => {
      // Outside the open transaction: wait for its end. The last check and the statement run
      // with no await in between, so no transaction can begin in the gap.
      while (owner !== null && owner !== context.getStore()) await free();
      const statement = prepare(text);
      if (method === 'run') {
        statement.run(...params);
        return { rows: [] };
      }
      const rows = method === 'get' ? statement.raw(true).get(...params) : statement.raw(true).all(...params);
      return { rows: rows as unknown[] };
    },
    { schema: sqliteSchema },
  );
  // The twin tables and an async SQLite session behave like their Postgres types for every
  // builder the repositories use (see database.ts); the schema test keeps the tables in step.
  const q: Queryable = { kind: 'sqlite', db: db as unknown as Db, t: sqliteSchema as unknown as Tables };
  const channels = new EventEmitter().setMaxListeners(0);

  return {
    ...q,
    async transaction(fn) {
      const current = context.getStore();
      if (current !== undefined && current === owner) return fn(q);
      const token = Symbol('transaction');
      return context.run(token, async () => {
        // Checked and taken with no await in between.
        while (owner !== null) await free();
        owner = token;
        try {
          client.exec('BEGIN IMMEDIATE');
          try {
            const result = await fn(q);
            client.exec('COMMIT');
            return result;
          } catch (err) {
            if (client.inTransaction) client.exec('ROLLBACK');
            throw err;
          }
        } finally {
          owner = null;
          released.emit('free');
        }
      });
    },
    async notify(channel, payload) {
      channels.emit(channel, payload);
    },
    async listen(channel, onMessage) {
      channels.on(channel, onMessage);
      return async () => {
        channels.off(channel, onMessage);
      };
    },
    async ping() {
      return client.prepare('select 1 as ok').get() !== undefined;
    },
    async close() {
      client.close();
    },
  };
}
