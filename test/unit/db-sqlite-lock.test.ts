import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openSqlite } from '../../src/db/sqlite.js';
import { DatabaseInUseError } from '../../src/db/sqlite-lock.js';

const HOLDER = path.join(import.meta.dirname, 'db-sqlite-holder.ts');

/** One process per SQLite file: what it keeps in memory (notifications, kept reads) is not shared. */
describe('the SQLite database lock', () => {
  let dir: string;
  let file: string;
  beforeEach(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'sf-lock-'));
    file = path.join(dir, 'db.sqlite');
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses a second opening while the first is open, and allows one after it closed', async () => {
    const first = openSqlite(file);
    expect(() => openSqlite(file)).toThrow(DatabaseInUseError);
    expect(() => openSqlite(file)).toThrow(/SQLite serves one process.*PostgreSQL/);
    // The first still works after the refusal.
    expect(await first.ping()).toBe(true);
    await first.close();

    const second = openSqlite(file);
    expect(await second.ping()).toBe(true);
    await second.close();
  });

  it('refuses the file another process has open, and takes it once that process is killed', async () => {
    const holder = spawn(process.execPath, ['--import', 'tsx', HOLDER, file], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = once(holder, 'exit');
    let holderStderr = '';
    holder.stderr.setEncoding('utf8').on('data', (text: string) => (holderStderr += text));
    try {
      const lines = createInterface({ input: holder.stdout });
      const [line] = (await once(lines, 'line')) as [string];
      expect(line).toBe('open');

      let refusal: unknown = null;
      try {
        await openSqlite(file).close();
      } catch (err) {
        refusal = err;
      }
      // Once in many runs so far the refusal did not come, unexplained: what the holder was doing then.
      // Its state letter (R, S, Z...), field 3 of /proc/PID/stat; gone when there is no such process.
      const state = await readFile(`/proc/${holder.pid}/stat`, 'utf8').then(
        (stat) => stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0],
        () => 'gone',
      );
      expect(refusal, `holder ${state}, its stderr: ${JSON.stringify(holderStderr)}`).toBeInstanceOf(
        DatabaseInUseError,
      );

      // SIGKILL: no close, no exit handler. The lock goes with the process.
      holder.kill('SIGKILL');
      await exited;
      const after = openSqlite(file);
      expect(await after.ping()).toBe(true);
      await after.close();
    } finally {
      if (holder.exitCode === null && holder.signalCode === null) holder.kill('SIGKILL');
    }
  });
});
