/**
 * Eviction cost against store size (run by hand: npx tsx bench/eviction.ts). For stores of
 * 1,000, 10,000 and 100,000 cache rows (real SQLite file, real files of 1 KiB), evicts the
 * coldest 10 rows and 1%, and prints the time per run and per evicted row; then times one batch
 * query alone (the first batch, and a batch after a cursor in the middle of the store), median
 * of repeated runs, which file removal does not blur. The cost should grow with what is
 * evicted, not with the store's size.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import type { Database } from '../src/db/database.js';
import { openSqlite } from '../src/db/sqlite.js';
import { createContentStore } from '../src/store/content-store.js';
import { evictionBatchQuery, evictToCap, readStoreTotals, type EvictionCursor } from '../src/store/eviction.js';
import { AUDIO_ARTIFACT_NAME } from '../src/store/layout.js';

const SIZES = [1_000, 10_000, 100_000];
const FILE_BYTES = 1024;
const BATCH = 200;
const QUERY_RUNS = 21;

async function medianQueryMs(database: Database, cursor: EvictionCursor | undefined): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < QUERY_RUNS; i++) {
    const started = performance.now();
    await evictionBatchQuery(database, cursor, BATCH);
    times.push(performance.now() - started);
  }
  return times.sort((a, b) => a - b)[Math.floor(QUERY_RUNS / 2)]!;
}

for (const rows of SIZES) {
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-bench-evict-'));
  const file = path.join(dir, 'db.sqlite');
  const database = openSqlite(file);
  // Nothing evicts while the store is filled: no pins are needed.
  const store = createContentStore(
    path.join(dir, 'artifacts'),
    { pin: () => Promise.resolve({ holder: 'bench', unpin: async () => {} }) },
    'bench',
  );
  // Filled through a second connection of its own, in one transaction: the service's is asynchronous.
  const filler = new BetterSqlite3(file);
  const insert = filler.prepare(
    'insert into cache_entries (content_id, name, kind, bytes, content_type, created_at, last_used_at) values (?, ?, ?, ?, ?, ?, ?)',
  );
  filler.transaction(() => {
    for (let i = 0; i < rows; i++) {
      const contentId = createHash('sha256').update(String(i)).digest('hex');
      const file = store.pathOf(contentId, AUDIO_ARTIFACT_NAME);
      mkdirSync(path.dirname(file), { recursive: true });
      writeFileSync(file, Buffer.alloc(FILE_BYTES));
      insert.run(contentId, AUDIO_ARTIFACT_NAME, 'source_wav', FILE_BYTES, 'audio/wav', i, i);
    }
  })();
  filler.close();

  for (const evict of [10, Math.round(rows / 100)]) {
    const before = (await readStoreTotals(database)).bytes;
    const started = performance.now();
    const result = await evictToCap({ database, store, capBytes: before - evict * FILE_BYTES, now: Date.now });
    const ms = performance.now() - started;
    process.stdout.write(
      `rows=${String(rows).padStart(6)}  evicted=${String(result.evictedArtifacts).padStart(5)}  ` +
        `time=${ms.toFixed(1).padStart(7)} ms  per evicted row=${(ms / result.evictedArtifacts).toFixed(3)} ms\n`,
    );
  }

  const middle = Math.floor(rows / 2);
  const cursor = {
    lastUsedAt: middle,
    contentId: createHash('sha256').update(String(middle)).digest('hex'),
    name: AUDIO_ARTIFACT_NAME,
  };
  process.stdout.write(
    `rows=${String(rows).padStart(6)}  batch query of ${BATCH} (median of ${QUERY_RUNS}): ` +
      `first=${(await medianQueryMs(database, undefined)).toFixed(3)} ms  after cursor=${(await medianQueryMs(database, cursor)).toFixed(3)} ms\n`,
  );
  await database.close();
  await rm(dir, { recursive: true, force: true });
}
