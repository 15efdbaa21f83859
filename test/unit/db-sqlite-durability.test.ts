import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { eq, sql } from 'drizzle-orm';
import { afterEach, describe, expect, it } from 'vitest';
import type { Database } from '../../src/db/database.js';
import { openSqlite } from '../../src/db/sqlite.js';

/**
 * The SQLite database on a real file, with its WAL sync held by the test: nothing that wrote is
 * reported done before a sync that began after its COMMIT has finished, concurrent transactions
 * share syncs, and one that fails rolls back alone.
 */
interface Held {
  calls: Array<() => void>;
  calledTimes(n: number): Promise<void>;
}

let dir: string;
let database: Database | undefined;

async function openHeld(): Promise<{ database: Database; held: Held; walFiles: string[] }> {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-durable-'));
  const calls: Array<() => void> = [];
  const walFiles: string[] = [];
  let called = () => {};
  database = openSqlite(path.join(dir, 'db.sqlite'), {
    syncWal: (walFile) =>
      new Promise<void>((resolve) => {
        walFiles.push(walFile);
        calls.push(resolve);
        called();
      }),
  });
  const held: Held = {
    calls,
    async calledTimes(n) {
      while (calls.length < n) await new Promise<void>((resolve) => (called = resolve));
    },
  };
  return { database, held, walFiles };
}

afterEach(async () => {
  await database?.close();
  database = undefined;
  await rm(dir, { recursive: true, force: true });
});

const job = (id: string) => ({
  id,
  url: `https://media.example/${id}`,
  urlKey: `https://media.example/${id}`,
  status: 'queued' as const,
  createdAt: 1,
});

async function state(promise: Promise<unknown>): Promise<string> {
  let seen = 'pending';
  promise.then(
    () => (seen = 'resolved'),
    () => (seen = 'rejected'),
  );
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
  return seen;
}

async function jobCount(db: Database): Promise<number> {
  const [row] = await db.db.select({ n: sql<number>`count(*)` }).from(db.t.jobs);
  return Number(row!.n);
}

describe('SQLite durability', () => {
  it('a transaction that wrote resolves only after a sync of the WAL that began after its commit', async () => {
    const { database: db, held, walFiles } = await openHeld();
    const written = db.transaction(async (q) => {
      await q.db.insert(q.t.jobs).values(job('a'));
      return 'committed';
    });
    await held.calledTimes(1);
    // Committed (readable) but not yet reported: the 202 would wait here.
    expect(await jobCount(db)).toBe(1);
    expect(await state(written)).toBe('pending');
    held.calls[0]!();
    await expect(written).resolves.toBe('committed');
    expect(walFiles).toEqual([path.join(dir, 'db.sqlite-wal')]);
  });

  it('reads wait for no sync; an autocommit write does', async () => {
    const { database: db, held } = await openHeld();
    expect(await db.transaction(async (q) => jobCount(q as Database))).toBe(0);
    expect(await jobCount(db)).toBe(0);
    expect(held.calls).toHaveLength(0);

    const write = db.db
      .insert(db.t.jobs)
      .values(job('b'))
      .then(() => 'done');
    await held.calledTimes(1);
    expect(await state(write)).toBe('pending');
    held.calls[0]!();
    await expect(write).resolves.toBe('done');
  });

  it('a write that changed no row waits for no sync and leaves the change mark; the same write changing a row does both', async () => {
    const { database: db, held } = await openHeld();
    const { jobs } = db.t;
    const mark = () => db.changeMark!();
    // An update, an update with RETURNING and a delete, each matching no row, outside and inside a transaction.
    const noOps = async (q: Database | Parameters<Parameters<Database['transaction']>[0]>[0]) => {
      await q.db.update(jobs).set({ attempts: 1 }).where(eq(jobs.id, 'none'));
      await q.db.update(jobs).set({ attempts: 1 }).where(eq(jobs.id, 'none')).returning();
      await q.db.delete(jobs).where(eq(jobs.id, 'none'));
    };
    const before = mark();
    await noOps(db);
    await db.transaction(noOps);
    expect(held.calls).toHaveLength(0);
    expect(mark()).toBe(before);

    // The control: a row to change, then the same three statements on it.
    // Started now (drizzle's queries run when awaited).
    const insert = db.db
      .insert(jobs)
      .values(job('a'))
      .then(() => 'done');
    await held.calledTimes(1);
    held.calls[0]!();
    await insert;
    const afterInsert = mark();
    expect(afterInsert).toBeGreaterThan(before);
    const update = db.db
      .update(jobs)
      .set({ attempts: 1 })
      .where(eq(jobs.id, 'a'))
      .then(() => 'done');
    await held.calledTimes(2);
    expect(await state(update)).toBe('pending');
    held.calls[1]!();
    await update;
    expect(mark()).toBeGreaterThan(afterInsert);
    const returning = db.db
      .update(jobs)
      .set({ attempts: 2 })
      .where(eq(jobs.id, 'a'))
      .returning()
      .then((rows) => rows);
    await held.calledTimes(3);
    held.calls[2]!();
    await expect(returning).resolves.toHaveLength(1);
    const deleted = db.db
      .delete(jobs)
      .where(eq(jobs.id, 'a'))
      .then(() => 'done');
    await held.calledTimes(4);
    held.calls[3]!();
    await deleted;
    expect(await jobCount(db)).toBe(0);
  });

  it('concurrent transactions commit one after another and share the syncs; one that throws rolls back alone', async () => {
    const { database: db, held } = await openHeld();
    const ids = Array.from({ length: 10 }, (_, i) => `job-${i}`);
    const writes = ids.map((id, i) =>
      db.transaction(async (q) => {
        await q.db.insert(q.t.jobs).values(job(id));
        if (i === 4) throw new Error('this one fails');
        return id;
      }),
    );
    await held.calledTimes(1);
    // Every other transaction commits while the first sync is held.
    while ((await jobCount(db)) < 9) await new Promise((resolve) => setImmediate(resolve));
    await expect(writes[4]).rejects.toThrow('this one fails');
    expect((await Promise.all(writes.map(state))).filter((s) => s === 'pending')).toHaveLength(9);

    held.calls[0]!();
    await held.calledTimes(2);
    held.calls[1]!();
    const outcomes = await Promise.allSettled(writes);
    expect(outcomes.map((o) => o.status)).toEqual(ids.map((_, i) => (i === 4 ? 'rejected' : 'fulfilled')));
    // Two syncs for nine commits: the first one's, and one for the eight that came while it ran.
    expect(held.calls).toHaveLength(2);
    const [failed] = await db.db.select().from(db.t.jobs).where(eq(db.t.jobs.id, 'job-4'));
    expect(failed).toBeUndefined();
    expect(await jobCount(db)).toBe(9);
  });
});

describe('SQLite handle-only transactions', () => {
  const walBytes = async () => (await stat(path.join(dir, 'db.sqlite-wal'))).size;
  const insertAs = (db: Database, id: string, options?: { handleOnly: boolean }) =>
    db.transaction(async (q) => {
      await q.db.insert(q.t.jobs).values(job(id));
      return id;
    }, options);

  it('those that wait together commit as one, each in its own savepoint, answered after one sync', async () => {
    const { database: db, held } = await openHeld();
    const first = insertAs(db, 'first', { handleOnly: true });
    await held.calledTimes(1);
    const ids = Array.from({ length: 10 }, (_, i) => `job-${i}`);
    const writes = ids.map((id, i) =>
      db.transaction(
        async (q) => {
          await q.db.insert(q.t.jobs).values(job(id));
          if (i === 4) throw new Error('this one fails');
          return id;
        },
        { handleOnly: true },
      ),
    );
    // They wait for the first one's sync, uncommitted.
    expect(await state(writes[0]!)).toBe('pending');
    expect(await jobCount(db)).toBe(1);
    const before = await walBytes();

    held.calls[0]!();
    await expect(first).resolves.toBe('first');
    await held.calledTimes(2);
    // All committed at once, one sync for all, none answered before it.
    expect(await jobCount(db)).toBe(10);
    expect((await Promise.all(writes.map(state))).filter((s) => s === 'pending')).toHaveLength(10);
    held.calls[1]!();
    const outcomes = await Promise.allSettled(writes);
    expect(outcomes.map((o) => o.status)).toEqual(ids.map((_, i) => (i === 4 ? 'rejected' : 'fulfilled')));
    await expect(writes[4]).rejects.toThrow('this one fails');
    const [failed] = await db.db.select().from(db.t.jobs).where(eq(db.t.jobs.id, 'job-4'));
    expect(failed).toBeUndefined();
    expect(held.calls).toHaveLength(2);
    const batched = (await walBytes()) - before;

    // Control: ten transactions of the usual kind, waiting as those did, commit one by one. The
    // WAL is measured before they start: they commit while the syncs are held.
    const beforeMore = await walBytes();
    let settled = false;
    const more = Promise.all(Array.from({ length: 10 }, (_, i) => insertAs(db, `more-${i}`))).finally(
      () => (settled = true),
    );
    // However the commits fall between syncs, every sync asked for is let through.
    while (!settled) {
      for (const release of held.calls.slice(2)) release();
      await new Promise((resolve) => setImmediate(resolve));
    }
    await more;
    expect(await jobCount(db)).toBe(20);
    const oneByOne = (await walBytes()) - beforeMore;
    // Each commit writes the pages it touched to the WAL; as one, the shared pages are written once.
    expect(batched).toBeGreaterThan(0);
    expect(batched * 3).toBeLessThan(oneByOne);
  });

  it('let the queries and transactions that wait for the gate through, however many keep coming', async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'sf-durable-'));
    database = openSqlite(path.join(dir, 'db.sqlite'));
    const db = database;
    // Read-only ones (no sync to wait for between batches), arriving while each batch runs.
    let stop = false;
    let answered = 0;
    const reader = () =>
      db
        .transaction(
          async (q) => {
            await q.db.select({ n: sql<number>`count(*)` }).from(q.t.jobs);
            await new Promise((resolve) => setImmediate(resolve));
          },
          { handleOnly: true },
        )
        .then(() => answered++);
    const inFlight: Promise<unknown>[] = [];
    const produce = () => {
      if (stop) return;
      inFlight.push(reader(), reader());
      setImmediate(produce);
    };
    produce();
    await new Promise((resolve) => setTimeout(resolve, 20));
    const answeredBefore = answered;
    await expect(insertAs(db, 'usual')).resolves.toBe('usual');
    expect(await jobCount(db)).toBe(1);
    stop = true;
    await Promise.all(inFlight);
    // The control: they kept coming and being answered all along.
    expect(answeredBefore).toBeGreaterThan(5);
  });
});
