import BetterSqlite3 from 'better-sqlite3';

/**
 * One process per SQLite database. Two would share the file but not what the service keeps in
 * memory: notifications (a job queued, a job canceled) reach only their own process, and kept
 * reads (./read-cache.ts) would not see the other's writes. A second process is refused at open,
 * with the way to many nodes named.
 *
 * The lock is SQLite's own: a small database beside the file, held with an exclusive lock for as
 * long as the service runs (locking_mode=EXCLUSIVE keeps it after its first write). Its POSIX
 * locks go with the process, however it ends, so no stale lock outlives a crash.
 */
export interface DatabaseLock {
  release(): void;
}

export class DatabaseInUseError extends Error {
  constructor(file: string) {
    super(
      `another process has the SQLite database ${file} open: SQLite serves one process; ` +
        'stop the other one, or run many nodes on PostgreSQL (DATABASE_URL)',
    );
    this.name = 'DatabaseInUseError';
  }
}

export function lockDatabaseFile(file: string): DatabaseLock {
  const lock = new BetterSqlite3(`${file}.lock`, { timeout: 0 });
  try {
    lock.pragma('locking_mode = EXCLUSIVE');
    lock.exec('BEGIN EXCLUSIVE; COMMIT');
  } catch (err) {
    lock.close();
    if ((err as { code?: unknown }).code === 'SQLITE_BUSY') throw new DatabaseInUseError(file);
    throw err;
  }
  return { release: () => lock.close() };
}
