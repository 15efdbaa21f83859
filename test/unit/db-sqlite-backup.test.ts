import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { backupSqlite } from '../../src/db/sqlite-backup.js';
import { openSqlite } from '../../src/db/sqlite.js';

/**
 * A process that commits a row every millisecond to `file` until killed, or until its parent is
 * gone (its stdin ends); prints "ready" once it has begun.
 */
const WRITER = `
const Database = require(process.argv[1]);
const db = new Database(process.argv[2]);
db.pragma('busy_timeout = 5000');
const insert = db.prepare('insert into filler (v) values (?)');
setInterval(() => insert.run(Buffer.alloc(100)), 1);
process.stdin.on('end', () => process.exit(0)).resume();
process.stdout.write('ready\\n');
`;

describe('backupSqlite: an online backup of the service database', () => {
  let dir: string;
  let file: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'sf-backup-'));
    file = path.join(dir, 'source-fetch.sqlite');
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('copies a database the service holds open while another process commits every millisecond: whole, consistent, one file', async () => {
    const service = openSqlite(file);
    const filler = new BetterSqlite3(file);
    filler.exec('create table filler (id integer primary key, v blob)');
    // About 48 MB, some 12,000 pages: copied in steps of 100 pages (the sqlite3 shell's .backup), with
    // a commit between steps starting it over, it does not finish within the time limit.
    const insert = filler.prepare('insert into filler (v) values (?)');
    filler.transaction(() => {
      for (let i = 0; i < 12000; i++) insert.run(Buffer.alloc(4000, i % 251));
    })();
    const countRows = () => filler.prepare('select count(*) from filler').pluck().get() as number;
    const writer = spawn(
      process.execPath,
      ['-e', WRITER, createRequire(import.meta.url).resolve('better-sqlite3'), file],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    try {
      const [ready] = (await once(createInterface({ input: writer.stdout }), 'line')) as [string];
      expect(ready).toBe('ready');
      const before = countRows();
      const destination = path.join(dir, 'backup.sqlite');
      const result = await backupSqlite(file, destination);
      const after = countRows();
      // Commits went on during the backup, and it saw a snapshot between them.
      const backup = new BetterSqlite3(destination, { readonly: true, fileMustExist: true });
      try {
        expect(backup.pragma('integrity_check', { simple: true })).toBe('ok');
        expect(backup.pragma('journal_mode', { simple: true })).toBe('delete');
        const copied = backup.prepare('select count(*) from filler').pluck().get() as number;
        expect(copied).toBeGreaterThanOrEqual(before);
        expect(copied).toBeLessThanOrEqual(after);
        // The service's own tables came along.
        expect(backup.prepare("select count(*) from sqlite_master where name = 'jobs'").pluck().get()).toBe(1);
      } finally {
        backup.close();
      }
      expect(result.pages).toBeGreaterThan(12000);
      // Nothing beside it: no partial file, no WAL.
      expect((await readdir(dir)).filter((name) => name.startsWith('backup'))).toEqual(['backup.sqlite']);
      // The service's connection is untouched.
      expect(await service.ping()).toBe(true);
    } finally {
      writer.kill('SIGKILL');
      filler.close();
      await service.close();
    }
  });

  it('never overwrites a file, and leaves nothing behind when it fails', async () => {
    const service = openSqlite(file);
    try {
      const existing = path.join(dir, 'taken.sqlite');
      await writeFile(existing, 'an earlier backup');
      await expect(backupSqlite(file, existing)).rejects.toThrow(/exists/);
      await expect(backupSqlite(file, path.join(dir, 'missing-folder', 'backup.sqlite'))).rejects.toThrow();
      await expect(backupSqlite(path.join(dir, 'no-such.sqlite'), path.join(dir, 'backup.sqlite'))).rejects.toThrow();
      // Beside the service's own files, only the earlier backup, untouched.
      expect((await readdir(dir)).filter((name) => !name.startsWith('source-fetch.sqlite'))).toEqual(['taken.sqlite']);
      expect(await readFile(existing, 'utf8')).toBe('an earlier backup');
    } finally {
      await service.close();
    }
  });
});
