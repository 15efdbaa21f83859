import type { Database } from './database.js';

/**
 * Two ways to serve the same read by key often (a job polled by its clients), one per database:
 *  - keptUntilChange (SQLite): results kept until the database changes (Database.changeMark).
 *  - gatheredReads (PostgreSQL, where other nodes write unseen): no result is kept, but the reads
 *    asked for while others are under way go together as one query, one round trip.
 */

/**
 * A read by key, its results kept until the database changes (Database.changeMark): any write
 * makes all of them stale at once.
 * What it saves is the read on the hot path where nothing is written between reads (a job polled
 * while nothing moves); where the database has no mark it is the read itself.
 *
 * A value is kept under the mark taken before its read began, so a change during the read leaves
 * it stale. Kept values are frozen (and their arrays and objects one level down), as every caller
 * shares them. Not found (undefined) is not kept.
 */
export function keptUntilChange<T extends object>(
  database: Pick<Database, 'changeMark'>,
  read: (key: string) => Promise<T | undefined>,
  capacity: number,
): (key: string) => Promise<T | undefined> {
  const changeMark = database.changeMark?.bind(database);
  if (!changeMark) return read;
  const kept = new Map<string, { mark: number; value: T }>();
  return async (key) => {
    const mark = changeMark();
    const hit = kept.get(key);
    if (hit !== undefined && hit.mark === mark) return hit.value;
    const value = await read(key);
    if (value === undefined) return value;
    if (hit !== undefined) kept.delete(key);
    else if (kept.size >= capacity) kept.delete(kept.keys().next().value!);
    kept.set(key, { mark, value: frozen(value) });
    return value;
  };
}

/**
 * Reads by key gathered into few queries: at most `concurrency` run at once; the keys asked for
 * meanwhile wait and go together (up to `maxKeys` of them) as one call of `readMany` when one of
 * those ends. A key asked for twice by the same wait is read once and its askers share the value,
 * frozen. A read is never answered by a query sent before it was asked for, so it sees every write
 * committed before that, as its own query would: nothing is kept, no node's answer is older than
 * the request. Idle, a read goes at once; under load a round trip serves many.
 */
export function gatheredReads<T extends object>(
  readMany: (keys: string[]) => Promise<Map<string, T>>,
  options: { concurrency: number; maxKeys: number },
): (key: string) => Promise<T | undefined> {
  type Asker = { resolve: (value: T | undefined) => void; reject: (err: unknown) => void };
  const waiting = new Map<string, Asker[]>();
  let running = 0;
  const send = () => {
    const batch = new Map<string, Asker[]>();
    for (const [key, askers] of waiting) {
      if (batch.size === options.maxKeys) break;
      batch.set(key, askers);
    }
    for (const key of batch.keys()) waiting.delete(key);
    running++;
    readMany([...batch.keys()])
      .then(
        (values) => {
          for (const [key, askers] of batch) {
            const value = values.get(key);
            const shared = value !== undefined && askers.length > 1 ? frozen(value) : value;
            for (const asker of askers) asker.resolve(shared);
          }
        },
        (err: unknown) => {
          for (const askers of batch.values()) for (const asker of askers) asker.reject(err);
        },
      )
      .finally(() => {
        running--;
        sendWhileRoom();
      });
  };
  const sendWhileRoom = () => {
    while (waiting.size > 0 && running < options.concurrency) send();
  };
  return (key) =>
    new Promise<T | undefined>((resolve, reject) => {
      const askers = waiting.get(key);
      if (askers) askers.push({ resolve, reject });
      else waiting.set(key, [{ resolve, reject }]);
      sendWhileRoom();
    });
}

function frozen<T extends object>(value: T): T {
  for (const part of Object.values(value)) {
    if (part === null || typeof part !== 'object') continue;
    if (Array.isArray(part)) for (const item of part) if (item !== null && typeof item === 'object') Object.freeze(item);
    Object.freeze(part);
  }
  return Object.freeze(value);
}
