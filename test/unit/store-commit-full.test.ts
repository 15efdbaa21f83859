import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { statfsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import type { Database } from '../../src/db/database.js';
import { openSqlite } from '../../src/db/sqlite.js';
import { createCommitReserve } from '../../src/store/commit-reserve.js';
import { createContentStore, type ContentStore } from '../../src/store/content-store.js';
import { evictToCap, readStoreTotals } from '../../src/store/eviction.js';
import { createDatabasePins } from '../../src/store/pins.js';
import { fakeTools, runJob, wav } from '../support/fetch-task-fakes.js';
import { storedFiles } from '../support/store-inspect.js';
import { BACKENDS, openTestDatabase } from '../support/test-database.js';

/**
 * A job's commit is all or nothing, whichever of its writes the full volume refuses: the fetch
 * task (../support/fetch-task-fakes.ts: its tools stand-ins, the store, the peaks and the
 * database real) on a small tmpfs that holds the whole data folder (work/, artifacts/ and, on
 * SQLite, the database), or the artifact root alone; kept at the same free space before each job
 * by a filler file. The WAVs the conversion writes scan the boundary in steps smaller than
 * peaks.json and than a database page, so the volume fills in each write in turn: the rows, the
 * put's pin (SQLite), peaks.json, the WAV's copy (the store apart), the conversion (one volume).
 * Every job ends done, with bytes that hash to its content id and that the store's totals count,
 * or failed with nothing of it in artifacts/ or work/ and the volume's free space as before (the
 * database's own growth aside). A job after the scan, with room, ends done. Not reached here: a
 * refused flush (tmpfs never refuses one). Needs mount(2) (root, as CI runs); skipped with a
 * message otherwise.
 */
const VOLUME_BYTES = 16 * 1024 * 1024;
/** Free space before each job: what the converted WAVs are scanned around. */
const FREE_BEFORE = 384 * 1024;
/** Smaller than a page of either database (4 KiB, 8 KiB) and than peaks.json (some 12 KB here). */
const STEP = 2048;
/**
 * WAVs from this much below FREE_BEFORE to a step above: the first fit with all the job's writes
 * (its download, peaks.json and, on SQLite, the WAL the job's transactions fill), the last not
 * even as the conversion's output.
 */
const BELOW = { sqlite: 176 * 1024, postgres: 64 * 1024 };

let base: string;
const mounted: string[] = [];
let mountError = '';

beforeAll(async () => {
  base = await mkdtemp(path.join(tmpdir(), 'sf-commit-full-'));
});

afterAll(async () => {
  for (const root of mounted) execFileSync('umount', ['-l', root]);
  if (base) await rm(base, { recursive: true, force: true });
});

async function tmpfs(name: string): Promise<string | undefined> {
  const root = path.join(base, name);
  await mkdir(root);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${VOLUME_BYTES},mode=0755`, 'tmpfs', root], { stdio: 'pipe' });
    mounted.push(root);
    return root;
  } catch (err) {
    mountError = String((err as { stderr?: Buffer }).stderr ?? err).trim();
    return undefined;
  }
}

const freeOn = (dir: string) => {
  const stats = statfsSync(dir);
  return stats.bavail * stats.bsize;
};

/** The space the database's files take on the volume (SQLite's file, WAL and shared memory), in allocated blocks. */
async function databaseBytes(dir: string): Promise<number> {
  let bytes = 0;
  for (const name of await readdir(dir)) {
    if (name.startsWith('source-fetch.sqlite')) bytes += (await stat(path.join(dir, name))).blocks * 512;
  }
  return bytes;
}

/** Every file under `dir`, relative to it (folders left empty are no leftover: they take no space on tmpfs). */
async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries
    .filter((entry) => !entry.isDirectory())
    .map((entry) => path.relative(dir, path.join(entry.parentPath, entry.name)));
}

/** Grows or shrinks the filler so that the volume has exactly `free` bytes free. */
async function keepFree(dir: string, filler: string, free: number): Promise<void> {
  const size = (await stat(filler)).size + freeOn(dir) - free;
  if (size < 0) throw new Error(`the volume cannot be brought to ${free} bytes free`);
  // Written, not truncated: a hole would take no space.
  await writeFile(filler, Buffer.alloc(size, 1));
  expect(freeOn(dir)).toBe(free);
}

/** Copies SQLite's WAL into the database file and empties it, through a connection of its own. */
function walTruncation(file: string): () => void {
  const connection = new BetterSqlite3(file, { fileMustExist: true });
  onTestFinished(() => void connection.close());
  return () => {
    const [result] = connection.pragma('wal_checkpoint(TRUNCATE)') as Array<{ busy: number }>;
    expect(result?.busy).toBe(0);
  };
}

/**
 * Where the store is: on the data folder's volume (SQLite's file and work/ beside it, the WAV moved
 * in), or on a volume of its own (the WAV copied in, the database and work/ elsewhere).
 */
const CASES = BACKENDS.flatMap((kind) => [
  { kind, layout: 'one volume' as const },
  { kind, layout: 'the store apart' as const },
]);

describe.each(CASES)('a commit on a full volume, on $kind, $layout', ({ kind, layout }) => {
  it('is all or nothing, whichever write meets ENOSPC; a job with room after it ends done', async (ctx) => {
    const volume = await tmpfs(`${kind}-${layout.replaceAll(' ', '-')}`);
    if (!volume) return ctx.skip(`cannot mount a tmpfs here (needs root): ${mountError}`);
    const dir = layout === 'one volume' ? volume : await mkdtemp(path.join(base, 'data-'));
    const database: Database =
      kind === 'sqlite' ? openSqlite(path.join(dir, 'source-fetch.sqlite')) : await openTestDatabase(kind);
    ctx.onTestFinished(() => database.close());
    const checkpoint = kind === 'sqlite' ? walTruncation(path.join(dir, 'source-fetch.sqlite')) : undefined;
    let holders = 0;
    const store: ContentStore = createContentStore(
      path.join(volume, 'artifacts'),
      createDatabasePins({ database, holder: () => `test:${++holders}`, now: Date.now }),
      'test-node',
    );
    await mkdir(store.root);
    // As the service keeps beside its SQLite database: eviction commits there, on a full volume.
    const reserve = kind === 'sqlite' ? createCommitReserve(path.join(dir, 'commit-reserve.bin')) : undefined;
    const filler = path.join(volume, 'filler.bin');
    await writeFile(filler, '');

    /**
     * How far each job got: 'conversion' (its WAV did not fit in work/), 'put' (refused before the
     * WAV reached its address: its copy, or the put's pin, a database write), 'peaks', 'rows' (the
     * record).
     */
    let stage: string;
    const watched: ContentStore = {
      ...store,
      put: (...args) => {
        stage = 'put';
        return store.put(...args);
      },
      putDerived: (...args) => {
        stage = 'peaks';
        return store.putDerived(...args).then((stored) => {
          stage = 'rows';
          return stored;
        });
      },
    };
    const outcomes: string[] = [];
    let n = 0;
    const below = layout === 'one volume' ? BELOW[kind] : BELOW.postgres;
    for (let wavBytes = FREE_BEFORE - below; wavBytes <= FREE_BEFORE + STEP; wavBytes += STEP) {
      n++;
      const bytes = wav(n, wavBytes - 44);
      // Each job from an empty WAL, so that what the database needs of the volume is the same each time.
      checkpoint?.();
      await keepFree(volume, filler, FREE_BEFORE);
      const databaseBefore = await databaseBytes(volume);
      const tools = fakeTools({ extractorKey: 'Generic', id: `x${n}` }, bytes);
      stage = 'conversion';
      const job = await runJob(
        { database, store: watched, dir },
        { id: `job-${n}`, url: `https://media.example/${n}.m4a`, run: tools.run, now: 1000 + n },
      );
      const seen = { wavBytes, status: job.status, error: job.errorCode };
      if (job.status === 'done') {
        expect(seen).toMatchObject({ status: 'done', error: null });
        const cid = createHash('sha256').update(bytes).digest('hex');
        expect(job.contentId).toBe(cid);
        const files = await storedFiles(store.root);
        expect(files.map((file) => file.name).sort()).toEqual(['audio.wav', 'peaks.json']);
        expect(files.find((file) => file.name === 'audio.wav')).toMatchObject({ contentId: cid, sha256: cid });
        // What the store's accounting counts is what is on the volume.
        expect((await readStoreTotals(database)).bytes).toBe(files.reduce((sum, file) => sum + file.bytes, 0));
        outcomes.push('done');
        // Evicted whole, for the next job to start from the same free space.
        await evictToCap({ database, store, capBytes: 0, now: Date.now, reserve });
        expect(await filesUnder(store.root)).toEqual([]);
      } else {
        expect(seen).toMatchObject({ status: 'failed', error: 'storage_full' });
        outcomes.push(stage);
        expect({
          wavBytes,
          artifacts: await filesUnder(store.root),
          work: await filesUnder(path.join(dir, 'work')),
        }).toEqual({ wavBytes, artifacts: [], work: [] });
        expect((await readStoreTotals(database)).bytes).toBe(0);
        // As before the job, but for what the database itself grew by (its WAL, on SQLite).
        expect({ wavBytes, free: freeOn(volume) + (await databaseBytes(volume)) - databaseBefore }).toEqual({
          wavBytes,
          free: FREE_BEFORE,
        });
      }
    }
    // The scan crossed the boundary, from done to failed, and the volume filled in each write of
    // the commit on its way: with the store apart, its copy of the WAV; on one volume the
    // conversion's, and on SQLite the database's (PostgreSQL's is elsewhere).
    expect(outcomes[0]).toBe('done');
    const expected =
      layout === 'the store apart'
        ? ['done', 'peaks', 'put']
        : kind === 'sqlite'
          ? ['done', 'rows', 'peaks', 'put', 'conversion']
          : ['done', 'peaks', 'conversion'];
    expect(outcomes.at(-1)).toBe(expected.at(-1));
    expect(new Set(outcomes)).toEqual(new Set(expected));

    // Room again: a job ends done, and its bytes are the store's whole content.
    await truncate(filler, 0);
    const bytes = wav(0, FREE_BEFORE);
    const job = await runJob(
      { database, store, dir },
      {
        id: 'after',
        url: 'https://media.example/after.m4a',
        run: fakeTools({ extractorKey: 'Generic', id: 'after' }, bytes).run,
        now: 9999,
      },
    );
    expect(job).toMatchObject({ status: 'done', contentId: createHash('sha256').update(bytes).digest('hex') });
    expect(await readFile(store.pathOf(job.contentId!, 'audio.wav'))).toEqual(bytes);
    // Some hundred jobs: a bound on a hang, on two busy cores.
  }, 90_000);
});
