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
import { guardedInOneTransaction } from './guarded-write.js';
import { keptUntilChange } from './read-cache.js';
import { BACKSTOP_PAGES, startCheckpointer } from './sqlite-checkpoints.js';
import { lockDatabaseFile, type DatabaseLock } from './sqlite-lock.js';
import { createTransactionContext } from './transaction-context.js';
import * as sqliteSchema from './schema/sqlite.js';

/** drizzle/ sits at the package root, one level above both src/ and dist/. */
const MIGRATIONS_FOLDER = fileURLToPath(new URL('../../drizzle/sqlite', import.meta.url));
/** Distinct statements stay few; the cache is only a bound against queries built with varying IN lists. */
const STATEMENT_CACHE_SIZE = 500;
/** How often changeMark() looks for other connections' commits. */
const FOREIGN_WRITES_LOOKED_FOR_MS = 1000;
/** Statements whose sqlite3_changes() says whether they wrote (drizzle's, without a WITH before them). */
const ROW_STATEMENT = /^\s*(insert|update|delete|replace)\s/i;
/** Handle-only transactions committed together at most: each is short, so what waits behind a batch waits little. */
const MAX_BATCH = 64;

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

  // Prepared once: client.exec() parses its text on every call, twice per handle-only transaction.
  const control = (text: string) => {
    const statement = client.prepare(text);
    return () => void statement.run();
  };
  const begin = control('BEGIN IMMEDIATE');
  const commit = control('COMMIT');
  const rollback = control('ROLLBACK');
  const savepoint = control('SAVEPOINT one');
  const release = control('RELEASE one');
  const rollbackToSavepoint = control('ROLLBACK TO one');

  // What changeMark() counts: every write made on this connection (the lock keeps other
  // services out; the checkpointer moves pages, it changes no contents), and, looked for once a
  // second, commits made by any other connection (an operator's sqlite3): data_version tells,
  // but it is a statement of its own, too dear for every poll.
  let changes = 0;
  const dataVersion = client.prepare('PRAGMA data_version').pluck();
  let seenDataVersion: unknown = dataVersion.get();
  let dataVersionReadAt = performance.now();
  const changeMark = (): number => {
    const at = performance.now();
    if (at - dataVersionReadAt >= FOREIGN_WRITES_LOOKED_FOR_MS) {
      dataVersionReadAt = at;
      const version = dataVersion.get();
      if (version !== seenDataVersion) {
        seenDataVersion = version;
        changes++;
      }
    }
    return changes;
  };

  const context = createTransactionContext<Transaction>();
  /** The open transaction, if any. */
  let owner: Transaction | null = null;
  const released = new EventEmitter().setMaxListeners(0);
  const free = () => new Promise((resolve) => released.once('free', resolve));

  /**
   * Runs one statement; says whether it wrote. A row statement that changed no row wrote nothing
   * (no WAL frame to sync, no view made stale): the claim loops' polls of empty queues are such
   * updates, several a second. Anything else that is not read-only counts as a write.
   */
  const execute = (text: string, params: unknown[], method: string): { rows: unknown[]; wrote: boolean } => {
    const statement = prepare(text);
    let rows: unknown[] = [];
    let changed: boolean;
    if (method === 'run') {
      const result = statement.run(...params);
      // sqlite3_changes() is that of the last row statement: exact after one, stale after DDL.
      changed = result.changes > 0 || !ROW_STATEMENT.test(text);
    } else if (method === 'get') {
      // Only statements that return rows get here: a write's RETURNING gives one per row changed.
      const row = statement.raw(true).get(...params) as unknown[] | undefined;
      rows = row as unknown[];
      changed = row !== undefined;
    } else {
      rows = statement.raw(true).all(...params);
      changed = rows.length > 0;
    }
    if (statement.readonly || !changed) return { rows, wrote: false };
    changes++;
    return { rows, wrote: true };
  };
  const db = drizzleProxy(
    async (text, params, method) => {
      // Outside the open transaction: wait for its end. The last check and the statement run
      // with no await in between, so no transaction can begin in the gap.
      const inside = context.current();
      while (owner !== null && owner !== inside) await free();
      const { rows, wrote } = execute(text, params, method);
      if (wrote) {
        // Inside a transaction its COMMIT waits; an autocommit write waits here.
        if (owner !== null && owner === inside) owner.wrote = true;
        else await group.durable();
      }
      return { rows };
    },
    { schema: sqliteSchema },
  );
  // The handle given to a handle-only transaction: its queries are that transaction's.
  // drizzle awaits the callback inside its own async methods: a throw here is the query's rejection.
  const handleDb = drizzleProxy(
    (text, params, method) => {
      if (owner === null || !owner.handleOnly)
        throw new Error("a handle-only transaction's handle was used outside it");
      const { rows, wrote } = execute(text, params, method);
      if (wrote) owner.wrote = true;
      return Promise.resolve({ rows });
    },
    { schema: sqliteSchema },
  );
  // The twin tables and an async SQLite session behave like their Postgres types for every
  // builder the repositories use (see database.ts); the schema test keeps the tables in step.
  const q: Queryable = { kind: 'sqlite', db: db as unknown as Db, t: sqliteSchema as unknown as Tables };
  const handle: Queryable = { kind: 'sqlite', db: handleDb as unknown as Db, t: q.t };

  /** Waits for the gate, then runs `fn` in BEGIN IMMEDIATE ... COMMIT as `token`, and waits for the disk if it wrote. */
  async function exclusive<T>(token: Transaction, fn: () => Promise<T>): Promise<T> {
    // Checked and taken with no await in between.
    while (owner !== null) await free();
    owner = token;
    let value: T;
    try {
      begin();
      try {
        value = await fn();
        commit();
      } catch (err) {
        if (client.inTransaction) rollback();
        throw err;
      }
    } finally {
      // A rollback takes back writes already counted, which views read inside may have seen.
      if (token.wrote) changes++;
      owner = null;
      released.emit('free');
    }
    // The gate is open again: the next transactions commit while this one waits for the disk.
    if (token.wrote) await group.durable();
    return value;
  }

  /**
   * Handle-only transactions that wait for the gate together run together: one BEGIN and one
   * COMMIT (one write of the pages they share to the WAL) for all, each in a savepoint of its
   * own, so that one that throws takes back only its own writes. Each is answered after the
   * COMMIT and its sync, as alone; a failed BEGIN or COMMIT fails them all. At most MAX_BATCH
   * at a time, so that what waits behind a batch waits a few milliseconds at most.
   */
  const waiting: {
    fn: (q: Queryable) => Promise<unknown>;
    resolve: (value: unknown) => void;
    reject: (err: unknown) => void;
  }[] = [];
  let draining = false;
  const together = <T>(fn: (q: Queryable) => Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      waiting.push({ fn, resolve: resolve as (value: unknown) => void, reject });
      if (!draining) {
        draining = true;
        void drain();
      }
    });
  async function drain(): Promise<void> {
    try {
      while (waiting.length > 0) await runBatch();
    } finally {
      draining = false;
    }
  }
  async function runBatch(): Promise<void> {
    while (owner !== null) await free();
    const batch = waiting.splice(0, MAX_BATCH);
    const token: Transaction = { wrote: false, handleOnly: true };
    owner = token;
    const outcomes: { ok: boolean; value: unknown }[] = [];
    let failure: { err: unknown } | undefined;
    let othersWaiting: boolean;
    try {
      begin();
      for (const item of batch) {
        savepoint();
        let outcome: { ok: boolean; value: unknown };
        try {
          outcome = { ok: true, value: await item.fn(handle) };
          release();
        } catch (err) {
          outcome = { ok: false, value: err };
          rollbackToSavepoint();
          release();
        }
        outcomes.push(outcome);
      }
      commit();
    } catch (err) {
      if (client.inTransaction) rollback();
      failure = { err };
    } finally {
      if (token.wrote) changes++;
      owner = null;
      othersWaiting = released.listenerCount('free') > 0;
      released.emit('free');
    }
    // Answered once on disk; those that arrive meanwhile make the next batch larger.
    if (failure === undefined && token.wrote) await group.durable().catch((err: unknown) => (failure = { err }));
    batch.forEach((item, i) => {
      if (failure !== undefined) item.reject(failure.err);
      else if (outcomes[i]!.ok) item.resolve(outcomes[i]!.value);
      else item.reject(outcomes[i]!.value);
    });
    // Queries and transactions that waited for this one go first.
    if (othersWaiting) await new Promise((resolve) => setImmediate(resolve));
  }

  const channels = new EventEmitter().setMaxListeners(0);

  const database: Database = {
    ...q,
    async transaction(fn, options) {
      if (options?.handleOnly) return together(fn);
      const current = context.current();
      if (current !== undefined && current === owner) return fn(q);
      const token: Transaction = { wrote: false, handleOnly: false };
      return context.run(token, () => exclusive(token, () => fn(q)));
    },
    changeMark,
    hotReads: (read, options) => keptUntilChange(database, read.one, options.kept),
    guardedWrites: (op) => guardedInOneTransaction(database, op),
    /* eslint-disable @typescript-eslint/require-await -- SQLite answers at once; async makes its throws (and a listener's) rejections, as PostgreSQL's are */
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
    /* eslint-enable @typescript-eslint/require-await */
    async close() {
      await group.settled();
      await checkpointer?.close();
      await wal.close();
      client.close();
      lock.release();
    },
  };
  return database;
}

interface Transaction {
  /** Whether it wrote anything, so that its end must wait for the disk. */
  wrote: boolean;
  /** Made with { handleOnly: true }: its queries come through `handle`, no context tracks it. */
  handleOnly: boolean;
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
