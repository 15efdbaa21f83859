import type { PostgresJsDatabase } from 'drizzle-orm/postgres-js';
import * as pgSchema from './schema/postgres.js';

/**
 * The database, whichever it is: SQLite in a file (the embedded default, ./sqlite.ts) or
 * PostgreSQL shared by many nodes (./postgres.ts). One set of repository functions serves both:
 * they are written against the Postgres flavour of drizzle's query builder and tables, and on
 * SQLite they get its twin tables (./schema/sqlite.ts, checked equal by a test) and an
 * asynchronous SQLite session. They only await queries (no dialect-specific .get()/.run()) and
 * ask for rows back with RETURNING where they need to know what changed.
 */
export type Tables = typeof pgSchema;
export type Db = PostgresJsDatabase<Tables>;
export type DatabaseKind = 'sqlite' | 'postgres';

/** What repository functions run their queries on: the database, or a transaction on it. */
export interface Queryable {
  readonly kind: DatabaseKind;
  readonly db: Db;
  readonly t: Tables;
  /**
   * A PostgreSQL transaction's: the pool's handle, which prepared queries are built on, and how
   * one built there runs on this transaction's connection instead (./prepared.ts).
   */
  readonly pooled?: { readonly home: Queryable; onThisConnection<T extends object>(query: T): T };
}

export interface Database extends Queryable {
  /**
   * Runs `fn` in one transaction and commits, or rolls back if it throws. Inside, queries must go
   * through the Queryable it is given. A transaction started inside another joins it.
   *
   * With `handleOnly`, `fn` promises more: every query it makes goes through that Queryable,
   * and it starts no transaction. Then no async context follows it (./transaction-context.ts),
   * which spares every request node's promise hooks while such transactions are open; but on
   * SQLite a query made from inside on the database itself would wait for this transaction's end,
   * for ever. For short, hot transactions whose every step takes the handle (a born-done job).
   * On SQLite those that wait for each other commit together, each in a savepoint (./sqlite.ts).
   */
  transaction<T>(fn: (q: Queryable) => Promise<T>, options?: { handleOnly?: boolean }): Promise<T>;
  /**
   * A number that differs from any it returned before once the database's contents may have
   * changed, so a value read from it can be kept while the number stays the same (a read begun
   * after a mark was taken may see later changes, never earlier ones). SQLite only, where one
   * service process makes the writes (./sqlite-lock.ts) and counts them; a commit by another
   * connection to the file (an operator's sqlite3) moves the mark within a second. Absent on
   * PostgreSQL, where other nodes write unseen and only a round trip could tell.
   */
  changeMark?(): number;
  /**
   * `read` served as this database serves a read that every request makes best: on SQLite, where
   * this process makes every write, each value is kept until the database changes (./read-cache.ts,
   * at most `kept` of them); on PostgreSQL, where other nodes write unseen, the keys asked for
   * while reads are under way go together as one `many` (./gathered.ts, `together`). Answers may be
   * shared and frozen: not to be modified. Undefined: no such key.
   */
  hotReads<T extends object>(
    read: KeyedRead<T>,
    options: { kept: number; together: { concurrency: number; maxKeys: number } },
  ): (key: string) => Promise<T | undefined>;
  /**
   * `op` made as this database makes it cheapest and still atomic (./guarded-write.ts): on SQLite
   * read and write in one transaction, where the read stands; on PostgreSQL the read and the
   * checked write each made with those asked for at the same time (`together`).
   */
  guardedWrites<V extends object, W, R>(
    op: GuardedWrite<V, W, R>,
    together: { concurrency: number; maxItems: number },
  ): GuardedWriter<V, W, R>;
  /** Tells every node listening on `channel` (Postgres NOTIFY; on SQLite, this process). */
  notify(channel: string, payload: string): Promise<void>;
  /** Calls `onMessage` for each notification on `channel` until the returned function is called. */
  listen(channel: string, onMessage: (payload: string) => void): Promise<() => Promise<void>>;
  ping(): Promise<boolean>;
  close(): Promise<void>;
}

/** A read by key in both forms a database may serve it by (Database.hotReads): one key, or many in one statement. */
export interface KeyedRead<T extends object> {
  one: (key: string) => Promise<T | undefined>;
  many: (keys: string[]) => Promise<Map<string, T>>;
}

/**
 * A write that may be made only while what was read for it still holds (a job born done: the
 * URL's alias still points to its content, and that content is still stored), in the forms a
 * database may make it by (Database.guardedWrites). Each part makes every query through the
 * Queryable it is given and starts no transaction: on SQLite they all run in one handle-only
 * transaction (Database.transaction).
 */
export interface GuardedWrite<V, W, R> {
  /** What the write depends on, by key. */
  read(q: Queryable, key: string): Promise<V | undefined>;
  /** `read` for many keys in one statement; a key without a value is left out. */
  readMany(q: Queryable, keys: string[]): Promise<Map<string, V>>;
  /** Makes the write where the read it depends on still stands: in the same transaction, no other writer between. */
  write(q: Queryable, write: W): Promise<R>;
  /** Makes the write only if what it depends on still holds, checked again under a lock; undefined if not. */
  writeChecked(q: Queryable, write: W): Promise<R | undefined>;
  /** `writeChecked` for many in one round trip and one commit: one answer per write, in order (a promise, for one to wait for apart). */
  writeCheckedMany(q: Queryable, writes: W[]): Promise<Array<R | undefined | PromiseLike<R | undefined>>>;
}

/**
 * One guarded write: `decide` tells from what was read what to write (undefined: nothing); it is
 * synchronous, as it may run inside the transaction. `along` is written in the same transaction,
 * given what the write made. Undefined when nothing was written (nothing decided, or what was
 * read no longer held).
 */
export type GuardedWriter<V, W, R> = <A = never>(
  key: string,
  plan: { decide: (value: V | undefined) => W | undefined; along?: (q: Queryable, written: R) => Promise<A> },
) => Promise<{ value: V | undefined; written: R; along: A | undefined } | undefined>;

export type JobRow = Tables['jobs']['$inferSelect'];
export type NewJobRow = Tables['jobs']['$inferInsert'];
export type CacheEntryRow = Tables['cacheEntries']['$inferSelect'];
export type CallbackDeliveryRow = Tables['callbackDeliveries']['$inferSelect'];

export type { AliasKind, JobStatus } from './schema/model.js';
export { ALIAS_KINDS, JOB_STATUSES } from './schema/model.js';

/** True for the error a unique index (or primary key) gives on a conflicting write, in either database. */
export function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: unknown; cause?: { code?: unknown } } | null;
  const code = e?.code ?? e?.cause?.code;
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}
