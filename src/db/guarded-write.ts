import type { Database, GuardedWrite, GuardedWriter } from './database.js';
import { gathered, gatheredReads } from './gathered.js';

/**
 * Database.guardedWrites where one writer runs at a time (SQLite): the read, the decision, the
 * write and what goes along with it are one handle-only transaction, committed together with
 * those waiting beside it. No other write can come between the read and the write, so the read
 * stands and the write needs no check of its own.
 */
export function guardedInOneTransaction<V, W, R>(
  database: Database,
  op: GuardedWrite<V, W, R>,
): GuardedWriter<V, W, R> {
  return (key, plan) =>
    database.transaction(
      async (q) => {
        const value = await op.read(q, key);
        const write = plan.decide(value);
        if (write === undefined) return undefined;
        const written = await op.write(q, write);
        return { value, written, along: plan.along && (await plan.along(q, written)) };
      },
      { handleOnly: true },
    );
}

/**
 * Database.guardedWrites where other nodes write at the same time (PostgreSQL): the read is made
 * outside any transaction, with the reads asked for at the same time (one `readMany`); the write
 * is `writeChecked`, which takes its lock and reads again in the same round trip, made with the
 * writes asked for at the same time (one `writeCheckedMany`, one commit). A write with something
 * along is made alone, in a transaction of its own with it.
 */
export function guardedByCheckedWrite<V extends object, W, R>(
  database: Database,
  op: GuardedWrite<V, W, R>,
  together: { concurrency: number; maxItems: number },
): GuardedWriter<V, W, R> {
  const read = gatheredReads((keys) => op.readMany(database, keys), {
    concurrency: together.concurrency,
    maxKeys: together.maxItems,
  });
  const writeChecked = gathered((writes: W[]) => op.writeCheckedMany(database, writes), together);
  return async (key, plan) => {
    const value = await read(key);
    const write = plan.decide(value);
    if (write === undefined) return undefined;
    const along = plan.along;
    if (!along) {
      const written = await writeChecked(write);
      return written === undefined ? undefined : { value, written, along: undefined };
    }
    return database.transaction(async (q) => {
      const written = await op.writeChecked(q, write);
      return written === undefined ? undefined : { value, written, along: await along(q, written) };
    });
  };
}
