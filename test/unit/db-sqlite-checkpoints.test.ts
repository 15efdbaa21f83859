/**
 * WAL checkpoints in a worker thread (src/db/sqlite-checkpoints.ts), on a real SQLite file: the
 * worker copies committed pages into the database file by itself, well before SQLite's own
 * checkpoint would (the service's connection keeps that for past BACKSTOP_PAGES), and nothing is
 * lost on the way or at close.
 */
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openSqlite } from '../../src/db/sqlite.js';
import { startCheckpointer } from '../../src/db/sqlite-checkpoints.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-checkpoints-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const job = (id: number) => ({
  id: `job-${id}`,
  url: `https://media.example/${id}/${'x'.repeat(2000)}`,
  urlKey: `key-${id}`,
  status: 'queued' as const,
  createdAt: 1,
});

describe('background checkpoints', () => {
  it('copy committed pages into the database file, and the rows survive close and reopen', async () => {
    const file = path.join(dir, 'db.sqlite');
    const errors: string[] = [];
    const database = openSqlite(file, {
      backgroundCheckpoints: { intervalMs: 20, onError: (message) => errors.push(message) },
    });
    const before = (await stat(file)).size;
    // About 200 pages (2 KB URLs, twice: the row and the url index's entry): far below both SQLite's
    // default 1000-page checkpoint and the backstop, so only the worker checkpoints them.
    await database.transaction(async (q) => {
      for (let i = 0; i < 400; i++) await q.db.insert(q.t.jobs).values(job(i));
    });
    await expect
      .poll(async () => (await stat(file)).size, { timeout: 5000, interval: 20 })
      .toBeGreaterThan(before + 400 * 2000);
    await database.close();
    expect(errors).toEqual([]);

    const reopened = new BetterSqlite3(file, { readonly: true });
    try {
      expect(reopened.prepare('select count(*) as n from jobs').get()).toEqual({ n: 400 });
      expect(reopened.pragma('integrity_check', { simple: true })).toBe('ok');
    } finally {
      reopened.close();
    }
  });

  it('report a worker that cannot run, once', async () => {
    const failures: string[] = [];
    const checkpointer = startCheckpointer(path.join(dir, 'missing.sqlite'), {
      intervalMs: 20,
      onFailed: (message) => failures.push(message),
    });
    await checkpointer.close();
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatch(/SQLITE_CANTOPEN|unable to open/i);
  });
});
