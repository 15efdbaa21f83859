import fs from 'node:fs/promises';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';

/**
 * An online backup of the service's SQLite database, made by another process while the service
 * runs (docs/backups.md). The service's lock (./sqlite-lock.ts) is a file of its own beside the
 * database and keeps out a second service only; in WAL mode a reader neither waits for the
 * service's writes nor holds them up.
 *
 * SQLite's backup API copies the database in steps, and starts over whenever another connection
 * writes between two steps: in steps of 100 pages (the sqlite3 shell's .backup), a busy service
 * can keep it from ever finishing. Here the whole copy is one step, one read transaction: a
 * consistent snapshot as of its start, never restarted. It is written to `<destination>.partial`,
 * checked, made a single file (journal_mode=DELETE), synced and only then renamed onto
 * `destination`, so a backup that failed leaves nothing that looks like one. An existing
 * destination is never overwritten.
 */
export interface SqliteBackup {
  pages: number;
  bytes: number;
}

/** sqlite3_backup_step's page count for "all of it" (better-sqlite3 takes at most this). */
const ALL_PAGES = 0x7fffffff;

export async function backupSqlite(source: string, destination: string): Promise<SqliteBackup> {
  if (await exists(destination)) throw new Error(`${destination} exists: a backup never overwrites a file`);
  const partial = `${destination}.partial`;
  await fs.rm(partial, { force: true });
  try {
    const db = new BetterSqlite3(source, { readonly: true, fileMustExist: true });
    let pages: number;
    try {
      // The first step (better-sqlite3 makes it with 0 pages) starts the backup; the next copies every page.
      pages = (await db.backup(partial, { progress: () => ALL_PAGES })).totalPages;
    } finally {
      db.close();
    }
    const copy = new BetterSqlite3(partial, { fileMustExist: true });
    try {
      const check = String(copy.pragma('quick_check', { simple: true }));
      if (check !== 'ok') throw new Error(`the copy failed SQLite's quick_check: ${check}`);
      copy.pragma('journal_mode = DELETE');
    } finally {
      copy.close();
    }
    const handle = await fs.open(partial, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(partial, destination);
    const dir = await fs.open(path.dirname(destination), 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
    return { pages, bytes: (await fs.stat(destination)).size };
  } catch (err) {
    await fs.rm(partial, { force: true });
    throw err;
  }
}

async function exists(file: string): Promise<boolean> {
  return fs.stat(file).then(
    () => true,
    () => false,
  );
}
