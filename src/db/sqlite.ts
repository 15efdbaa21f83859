import { EventEmitter } from 'node:events';
import { closeSync, fsyncSync, mkdirSync, openSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import BetterSqlite3 from 'better-sqlite3';
import { drizzle as drizzleSync } from 'drizzle-orm/better-sqlite3';
import { migrate } from 'drizzle-orm/better-sqlite3/migrator';
import { drizzle as drizzleProxy } from 'drizzle-orm/sqlite-proxy';
import type { Database, Db, Queryable, Tables } from './database.js';
import { createGroupSync } from './group-sync.js';
import { BACKSTOP_PAGES, startCheckpointer } from './sqlite-checkpoints.js';
import { lockDatabaseFile, type DatabaseLock } from './sqlite-lock.js';
import { createTransactionContext } from './transaction-context.js';
import * as sqliteSchema from './schema/sqlite.js';

/** drizzle/ sits at the package root, one level above both src/ and dist/. */
const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../drizzle/sqlite', import.meta.url));
/** Distinct statements stay few; the cache is only a bound against queries built with varying IN lists. */
const STATEMENT_CACHE_SIZE = 500;

/**
 * SQLite in one file, WAL mode (readers never block the writer), migrations applied on open, one
 * process at a time (./sqlite-lock.ts).
 *
 * Durability: no write is reported done (a transaction's promise, an autocommit write's) before
 * it is on disk, so a 202 survives a power cut. SQLite's synchronous=FULL would get that by an
 * fsync of the WAL inside every COMMIT, on the event loop, one per transaction. Here COMMIT only
 * appends to the WAL (synchronous=NORMAL), and the writer then waits for an fdatasync of the WAL
 * file, made in the thread pool and shared by every write committed before it started (group
 * commit, ./group-sync.ts). The WAL holds every frame of a commit and is replayed in order up to
 * its last whole commit, so once it is synced the commit and all before it survive, as with FULL.
 * Checkpoints sync the WAL and the database file themselves; the service makes them in a worker
 * thread (./sqlite-checkpoints.ts), off the COMMIT that would otherwise make them. The folder is
 * synced once at open, so the database and WAL files' entries are on disk too.
 *
 * better-sqlite3 is synchronous and one connection serves the whole process, so a transaction
 * whose code awaits between its queries would otherwise take in the queries of whatever else runs
 * meanwhile. The queries go through drizzle's asynchronous SQLite session (sqlite-proxy) to a
 * gate: while a transaction is open, only queries made from inside it (same async context,
 * ./transaction-context.ts) run; the others wait for its COMMIT. Queries still execute
 * synchronously, on prepared statements kept by SQL text.
 */
export interface SqliteOptions {
  /** Makes the WAL's committed frames durable; default: fdatasync of the -wal file. Tests pass one they control. */
  syncWal?: (walFile: string) => Promise<void>;
  /** WAL checkpoints in a worker thread (./sqlite-checkpoints.ts), as the service runs; default: SQLite's own, in COMMIT. */
  backgroundCheckpoints?: { intervalMs: number; onError: (message: string) => void };
}

export function openSqlite(file: string, options: SqliteOptions = {}): Database {
  mkdirSync(path.dirname(file), { recursive: true });
  const lock = lockDatabaseFile(file);
  try {
    return openLocked(file, options, lock);
  } catch (err) {
    lock.release();
    throw err;
  }
}

function openLocked(file: string, options: SqliteOptions, lock: DatabaseLock): Database {
  const client = new BetterSqlite3(file);
  client.pragma('journal_mode = WAL');
  // Durable through the group sync below, not per COMMIT.
  client.pragma('synchronous = NORMAL');
  client.pragma('busy_timeout = 5000');
  client.pragma('foreign_keys = ON');
  migrate(drizzleSync(client), { migrationsFolder: MIGRATIONS_FOLDER });
  syncFolder(path.dirname(file));
  const background = options.backgroundCheckpoints;
  const checkpointer =
    background &&
    startCheckpointer(file, {
      intervalMs: background.intervalMs,
      onFailed: (message) => {
        // Back to SQLite's own checkpoints, at its default size.
        if (client.open) client.pragma('wal_autocheckpoint = 1000');
        background.onError(message);
      },
    });
  if (checkpointer) client.pragma(`wal_autocheckpoint = ${BACKSTOP_PAGES}`);
  const walFile = `${file}-wal`;
  const wal = options.syncWal ? { sync: () => options.syncWal!(walFile), close: async () => {} } : openWalSync(walFile);
  const group = createGroupSync(wal.sync);

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

  // What changeMark() counts: every write, all of them made on this connection (the lock keeps
  // other processes out; the checkpointer moves pages, it changes no contents).
  let changes = 0;

  const context = createTransactionContext<Transaction>();
  /** The open transaction, if any. */
  let owner: Transaction | null = null;
  const released = new EventEmitter().setMaxListeners(0);
  const free = () => new Promise((resolve) => released.once('free', resolve));

  const db = drizzleProxy(
    async (text, params, method) => {
      // Outside the open transaction: wait for its end. The last check and the statement run
      // with no await in between, so no transaction can begin in the gap.
      const inside = context.current();
      while (owner !== null && owner !== inside) await free();
      const statement = prepare(text);
      let rows: unknown[] = [];
      if (method === 'run') statement.run(...params);
      else rows = (method === 'get' ? statement.raw(true).get(...params) : statement.raw(true).all(...params)) as unknown[];
      if (!statement.readonly) {
        changes++;
        // Inside a transaction its COMMIT waits; an autocommit write waits here.
        if (owner !== null && owner === inside) owner.wrote = true;
        else await group.durable();
      }
      return { rows };
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
      const current = context.current();
      if (current !== undefined && current === owner) return fn(q);
      const token: Transaction = { wrote: false };
      const result = await context.run(token, async () => {
        // Checked and taken with no await in between.
        while (owner !== null) await free();
        owner = token;
        try {
          client.exec('BEGIN IMMEDIATE');
          try {
            const value = await fn(q);
            client.exec('COMMIT');
            return value;
          } catch (err) {
            if (client.inTransaction) client.exec('ROLLBACK');
            throw err;
          }
        } finally {
          // A rollback takes back writes already counted, which views read inside may have seen.
          changes++;
          owner = null;
          released.emit('free');
        }
      });
      // The gate is open again: the next transactions commit while this one waits for the disk.
      if (token.wrote) await group.durable();
      return result;
    },
    changeMark: () => changes,
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
      await group.settled();
      await checkpointer?.close();
      await wal.close();
      client.close();
      lock.release();
    },
  };
}

interface Transaction {
  /** Whether it wrote anything, so that its end must wait for the disk. */
  wrote: boolean;
}

/** fdatasync of the WAL, through one descriptor kept open (SQLite keeps the file while the database is open). */
function openWalSync(walFile: string): { sync: () => Promise<void>; close: () => Promise<void> } {
  let handle: Promise<FileHandle> | undefined;
  return {
    async sync() {
      handle ??= open(walFile, 'r').catch((err: unknown) => {
        handle = undefined;
        throw err;
      });
      await (await handle).datasync();
    },
    async close() {
      if (handle) await (await handle).close();
    },
  };
}

function syncFolder(folder: string): void {
  const fd = openSync(folder, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
