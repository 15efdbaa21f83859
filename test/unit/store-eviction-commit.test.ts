import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { statfsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { openSqlite } from '../../src/db/sqlite.js';
import { createLogger } from '../../src/logger.js';
import { resolveAlias } from '../../src/store/aliases.js';
import { recordCacheEntry, SOURCE_WAV_KIND } from '../../src/store/cache-entries.js';
import { COMMIT_RESERVE_BYTES, createCommitReserve } from '../../src/store/commit-reserve.js';
import type { ContentStore } from '../../src/store/content-store.js';
import { evictedAt } from '../../src/store/evicted.js';
import { evictToCap, readStoreTotals, removeUnrecorded } from '../../src/store/eviction.js';
import { reconcileStore } from '../../src/store/reconcile.js';
import { createSizeCap } from '../../src/store/size-cap.js';
import { wav } from '../support/fetch-task-fakes.js';
import { createStoreFixture, type StoreFixture } from '../support/store-fixture.js';
import { openTestDatabase, type TestDatabase } from '../support/test-database.js';

/**
 * Eviction removes a content's rows in one transaction and its files only once that has committed
 * (src/store/eviction.ts), so a failure never leaves a row without its file:
 *  - a commit the database refuses leaves every row with its file; on SQLite its volume full (a
 *    tmpfs that holds the database, filled: the WAL cannot grow at COMMIT; needs mount(2), root, as
 *    CI runs, else skipped with a message; the store on it too), on PostgreSQL disk_full or the connection lost at COMMIT
 *    (a deferred constraint trigger raises the one, ends its own backend for the other, when the
 *    transaction commits). With the refusal lifted, the same eviction removes rows and files. On
 *    SQLite's full volume, an eviction given the reserve kept for its commits commits there.
 *  - files left by an eviction that committed (an unlink refused, a node that stopped before it)
 *    are removed by the size cap's next run, or by start-up reconciliation (not adopted again), and
 *    a put that takes the content up meanwhile keeps them.
 */
let base: string;
const mounted: string[] = [];

beforeAll(async () => {
  base = await mkdtemp(path.join(tmpdir(), 'sf-evict-commit-'));
});

afterAll(async () => {
  for (const root of mounted) execFileSync('umount', ['-l', root]);
  if (base) await rm(base, { recursive: true, force: true });
});

const freeOn = (dir: string) => {
  const stats = statfsSync(dir);
  return stats.bavail * stats.bsize;
};

interface Refusal {
  /** The database, opened where it can be refused; why not, where it cannot be here. */
  open(): Promise<TestDatabase | string>;
  /** Where the store goes: on the database's volume, if it has one here. */
  parent?: () => string;
  on(): Promise<void>;
  off(): Promise<void>;
  error: RegExp;
}

/** SQLite's volume full: the database on a tmpfs of its own, filled to the last byte (the WAL emptied first). */
function sqliteDiskFull(): Refusal {
  let volume: string;
  let file: string;
  const filler = () => path.join(volume, 'filler.bin');
  return {
    async open() {
      volume = await mkdtemp(path.join(base, 'volume-'));
      try {
        execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=8m,mode=0755', 'tmpfs', volume], { stdio: 'pipe' });
      } catch (err) {
        return `cannot mount a tmpfs here (needs root): ${String((err as { stderr?: Buffer }).stderr ?? err).trim()}`;
      }
      mounted.push(volume);
      file = path.join(volume, 'source-fetch.sqlite');
      return Object.assign(openSqlite(file), { location: file });
    },
    async on() {
      const connection = new BetterSqlite3(file, { fileMustExist: true });
      try {
        const [result] = connection.pragma('wal_checkpoint(TRUNCATE)') as Array<{ busy: number }>;
        expect(result?.busy).toBe(0);
      } finally {
        connection.close();
      }
      // Written, not truncated: a hole would take no space.
      await writeFile(filler(), Buffer.alloc(freeOn(volume), 1));
      expect(freeOn(volume)).toBe(0);
    },
    async off() {
      await rm(filler());
    },
    error: /database or disk is full/,
    parent: () => volume,
  };
}

/** PostgreSQL refusing COMMIT: a deferred constraint trigger on cache_entries' deletes runs `body` there. */
function postgresAtCommit(body: string, error: RegExp): Refusal {
  let url: string;
  const sql = () => {
    const client = postgres(url, { max: 1, onnotice: () => {} });
    onTestFinished(() => client.end());
    return client;
  };
  return {
    async open() {
      const database = await openTestDatabase('postgres');
      url = database.location;
      return database;
    },
    async on() {
      const client = sql();
      await client.unsafe(
        `create function refuse_commit() returns trigger language plpgsql as $$ begin ${body} end $$`,
      );
      await client.unsafe(
        'create constraint trigger refuse_commit after delete on cache_entries deferrable initially deferred for each row execute function refuse_commit()',
      );
    },
    async off() {
      await sql().unsafe('drop trigger refuse_commit on cache_entries');
    },
    error,
  };
}

const REFUSALS = [
  { kind: 'sqlite' as const, refusal: 'its volume full', make: sqliteDiskFull },
  {
    kind: 'postgres' as const,
    refusal: 'disk_full',
    make: () =>
      postgresAtCommit(
        "raise exception 'could not extend file: No space left on device' using errcode = 'disk_full';",
        /No space left on device/,
      ),
  },
  {
    kind: 'postgres' as const,
    refusal: 'the connection lost',
    // pg_sleep takes the termination at once.
    make: () =>
      postgresAtCommit(
        'perform pg_terminate_backend(pg_backend_pid()); perform pg_sleep(30); return null;',
        /terminating connection|CONNECTION_(CLOSED|ENDED)|write CONNECTION/,
      ),
  },
];

/** Every cache row, as `<content id>/<name>`, sorted. */
async function rowsOf(fx: StoreFixture): Promise<string[]> {
  const { cacheEntries } = fx.database.t;
  const rows = await fx.database.db
    .select({ contentId: cacheEntries.contentId, name: cacheEntries.name })
    .from(cacheEntries);
  return rows.map((row) => `${row.contentId}/${row.name}`).sort();
}

/** Three contents with URL aliases, the coldest with peaks. */
async function stock(fx: StoreFixture): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) ids.push(await fx.addArtifact(1000, 1000 + i, `https://media.example/${i}`));
  await fx.addPeaks(ids[0]!, 300, 1000);
  return ids;
}

/** A store whose unlinks are refused while `refuse()` says so (EIO: the volume failing). */
function unlinkRefused(store: ContentStore, refuse: () => boolean): ContentStore {
  return {
    ...store,
    removeSync(contentId, name) {
      if (refuse()) throw Object.assign(new Error('EIO: i/o error, rm'), { code: 'EIO' });
      store.removeSync(contentId, name);
    },
  };
}

describe.each(REFUSALS)('an eviction whose commit $kind refuses ($refusal)', ({ kind, make }) => {
  it('leaves every row with its file; with the refusal lifted it removes rows and files', async (ctx) => {
    const refusal = make();
    const database = await refusal.open();
    if (typeof database === 'string') return ctx.skip(database);
    const fx = await createStoreFixture(kind, { database, parent: refusal.parent?.() });
    const ids = await stock(fx);
    const rows = await rowsOf(fx);
    expect(rows).toHaveLength(4);
    const totals = await readStoreTotals(fx.database);

    await refusal.on();
    await expect(evictToCap({ database: fx.database, store: fx.store, capBytes: 0, now: Date.now })).rejects.toThrow(
      refusal.error,
    );
    await refusal.off();
    // Nothing of it committed, and every row's file is there to serve.
    expect(await rowsOf(fx)).toEqual(rows);
    for (const row of rows) {
      const [contentId, name] = row.split('/') as [string, string];
      expect({ row, stored: fx.store.hasSync(contentId, name) }).toEqual({ row, stored: true });
    }
    expect(await readStoreTotals(fx.database)).toEqual(totals);
    expect(await fx.bytesOnDisk()).toBe(totals.bytes);
    expect(await resolveAlias(fx.database, 'url', 'https://media.example/0')).toBe(ids[0]);
    expect(await evictedAt(fx.database, ids)).toEqual(new Map());

    const result = await evictToCap({ database: fx.database, store: fx.store, capBytes: 0, now: Date.now });
    expect(result.evictedContentIds.sort()).toEqual([...ids].sort());
    expect(result.filesLeft).toEqual([]);
    expect(await rowsOf(fx)).toEqual([]);
    expect(await fx.contentIdsOnDisk()).toEqual([]);
    expect(await readStoreTotals(fx.database)).toEqual({ bytes: 0, artifacts: 0 });
  });
});

describe('an eviction on a full volume that SQLite shares with the store', () => {
  it('commits in the reserve kept for it, removes rows and files, and writes the reserve again', async (ctx) => {
    const refusal = sqliteDiskFull();
    const database = await refusal.open();
    if (typeof database === 'string') return ctx.skip(database);
    const fx = await createStoreFixture('sqlite', { database, parent: refusal.parent?.() });
    // A content larger than the WAL the eviction writes, so that it makes room for the reserve again.
    const ids = [...(await stock(fx)), await fx.addArtifact(1024 * 1024, 500)];
    const file = path.join(path.dirname(database.location), 'commit-reserve.bin');
    const reserve = createCommitReserve(file);
    expect((await stat(file)).size).toBe(COMMIT_RESERVE_BYTES);
    await refusal.on();

    const result = await evictToCap({ database: fx.database, store: fx.store, capBytes: 0, now: Date.now, reserve });
    expect(result.evictedContentIds.sort()).toEqual([...ids].sort());
    expect(result.filesLeft).toEqual([]);
    expect(await rowsOf(fx)).toEqual([]);
    expect(await fx.contentIdsOnDisk()).toEqual([]);
    // Written again in the room the eviction made (the store shares the database's volume here).
    expect((await stat(file)).size).toBe(COMMIT_RESERVE_BYTES);
    await refusal.off();
  });
});

describe.each(['sqlite', 'postgres'] as const)('files an eviction on %s committed but did not remove', (kind) => {
  it("are removed by the size cap's next run", async () => {
    const fx = await createStoreFixture(kind);
    const ids = await stock(fx);
    let refused = true;
    const cap = createSizeCap({
      database: fx.database,
      store: unlinkRefused(fx.store, () => refused),
      capBytes: 0,
      log: createLogger('silent'),
      nodeId: 'n1',
      now: Date.now,
      flushUsage: async () => {},
    });

    const first = await cap.run();
    // The rows went (committed) and the run stopped at the first batch whose files stayed.
    expect(first.evictedContentIds.sort()).toEqual([...ids].sort());
    expect(first.filesLeft.sort()).toEqual([...ids].sort());
    expect(await rowsOf(fx)).toEqual([]);
    expect(await fx.contentIdsOnDisk()).toEqual([ids[0], ...ids].sort());
    expect([...(await evictedAt(fx.database, ids)).keys()].sort()).toEqual([...ids].sort());

    refused = false;
    const second = await cap.run();
    expect(second).toMatchObject({ evictedArtifacts: 0, filesLeft: [] });
    expect(await fx.contentIdsOnDisk()).toEqual([]);
  });

  it('are removed by start-up reconciliation, not adopted again', async () => {
    const fx = await createStoreFixture(kind);
    const ids = await stock(fx);
    // For contrast, a WAV never evicted and never recorded (a crash between its store and its record): adopted.
    const bytes = wav(7);
    const orphan = createHash('sha256').update(bytes).digest('hex');
    await mkdir(path.dirname(fx.store.pathOf(orphan, 'audio.wav')), { recursive: true });
    await writeFile(fx.store.pathOf(orphan, 'audio.wav'), bytes);
    const result = await evictToCap({
      database: fx.database,
      store: unlinkRefused(fx.store, () => true),
      capBytes: 0,
      now: Date.now,
    });
    expect(result.filesLeft.sort()).toEqual([...ids].sort());
    expect(await fx.contentIdsOnDisk()).toEqual([ids[0], ...ids, orphan].sort());

    const counts = await reconcileStore({ database: fx.database, store: fx.store, now: Date.now });
    expect(counts).toMatchObject({ adopted: 1, filesRemoved: 4, rowsDropped: 0 });
    expect(await fx.contentIdsOnDisk()).toEqual([orphan]);
    expect(await rowsOf(fx)).toEqual([`${orphan}/audio.wav`]);
    // Their jobs' records still say they were evicted.
    expect([...(await evictedAt(fx.database, ids)).keys()].sort()).toEqual([...ids].sort());
  });

  it('stay while a put that found them holds them, and once it has recorded them', async () => {
    const fx = await createStoreFixture(kind);
    const [id] = await stock(fx);
    const result = await evictToCap({
      database: fx.database,
      store: unlinkRefused(fx.store, () => true),
      capBytes: 0,
      now: Date.now,
    });
    expect(result.filesLeft).toContain(id);

    // A job storing the same bytes finds them at their address, and pins them.
    const copy = path.join(fx.dir, 'copy.wav');
    await copyFile(fx.store.pathOf(id!, 'audio.wav'), copy);
    const stored = await fx.store.put(copy, 'audio.wav');
    expect(stored).toMatchObject({ contentId: id, reused: true });
    const remove = () => removeUnrecorded({ database: fx.database, store: fx.store, contentIds: [id!], now: Date.now });
    expect(await remove()).toEqual([]);
    expect(fx.store.hasSync(id!, 'audio.wav')).toBe(true);

    // Recorded, and its pin ended: the content is stored again, with its file.
    const bytes = (await stat(fx.store.pathOf(id!, 'audio.wav'))).size;
    await recordCacheEntry(
      fx.database,
      {
        contentId: id!,
        name: 'audio.wav',
        kind: SOURCE_WAV_KIND,
        bytes,
        contentType: 'audio/wav',
        sampleRate: 44100,
        channels: 2,
        durationS: 1,
      },
      Date.now(),
    );
    await stored.release();
    expect(await remove()).toEqual([]);
    expect(fx.store.hasSync(id!, 'audio.wav')).toBe(true);

    // Control: the others, neither pinned nor recorded, go.
    const others = result.filesLeft.filter((other) => other !== id);
    expect(
      (await removeUnrecorded({ database: fx.database, store: fx.store, contentIds: others, now: Date.now })).sort(),
    ).toEqual(others.sort());
    expect(await fx.contentIdsOnDisk()).toEqual([id, id]);
  });
});
