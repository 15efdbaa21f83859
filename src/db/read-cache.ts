import type { Database } from './database.js';

/**
 * A read by key, its results kept until the database changes (Database.changeMark): any write
 * makes all of them stale at once.
 * What it saves is the read on the hot path where nothing is written between reads (a job polled
 * while nothing moves); where the database has no mark it is the read itself. SQLite's way; on
 * PostgreSQL, where other nodes write unseen, reads made at once are read together (./gathered.ts).
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

/** Freezes a value shared by callers, and its arrays and objects one level down. */
export function frozen<T extends object>(value: T): T {
  for (const part of Object.values(value)) {
    if (part === null || typeof part !== 'object') continue;
    if (Array.isArray(part))
      for (const item of part) if (item !== null && typeof item === 'object') Object.freeze(item);
    Object.freeze(part);
  }
  return Object.freeze(value);
}
