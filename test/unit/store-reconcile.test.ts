import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { setAlias } from '../../src/store/aliases.js';
import { cacheEntriesFor } from '../../src/store/cache-entries.js';
import { readStoreTotals } from '../../src/store/eviction.js';
import { reconcileStore } from '../../src/store/reconcile.js';
import { createStoreFixture } from '../support/store-fixture.js';
import { BACKENDS } from '../support/test-database.js';

describe.each(BACKENDS)('start-up reconciliation on %s', (kind) => {
  it('drops rows without files, removes stray files, adopts valid WAVs, clears dangling aliases', async () => {
    const fx = await createStoreFixture(kind);
    const kept = await fx.addArtifact(500, 1, 'https://media.example/kept');
    const lost = await fx.addArtifact(700, 2, 'https://media.example/lost');
    fx.store.removeSync(lost); // a row whose file is gone

    // A file with no row whose bytes do not match its address: removed.
    const bogus = 'ab'.padEnd(64, '0');
    await mkdir(path.join(fx.store.root, 'ab', bogus), { recursive: true });
    await writeFile(path.join(fx.store.root, 'ab', bogus, 'audio.wav'), 'not what the address says');

    // A real WAV with no row at its right address (a crash between store and commit): adopted.
    const wav = path.join(fx.dir, 'tone.wav');
    const made = spawnSync('ffmpeg', [
      '-v',
      'error',
      '-f',
      'lavfi',
      '-i',
      'sine=duration=0.5',
      '-ar',
      '44100',
      '-c:a',
      'pcm_s16le',
      '-bitexact',
      '-map_metadata',
      '-1',
      wav,
    ]);
    expect(made.status).toBe(0);
    const wavBytes = readFileSync(wav);
    const adoptedId = createHash('sha256').update(wavBytes).digest('hex');
    await mkdir(path.dirname(fx.store.pathOf(adoptedId, 'audio.wav')), { recursive: true });
    await writeFile(fx.store.pathOf(adoptedId, 'audio.wav'), wavBytes);

    await setAlias(fx.database, 'url', 'https://media.example/dangling', 'f'.repeat(64), 3);

    const counts = await reconcileStore({ database: fx.database, store: fx.store, now: () => 10 });
    expect(counts).toEqual({ adopted: 1, filesRemoved: 1, rowsDropped: 1, aliasesCleared: 2 });
    expect((await fx.contentIdsOnDisk()).sort()).toEqual([kept, adoptedId].sort());
    expect(await cacheEntriesFor(fx.database, adoptedId)).toEqual([
      expect.objectContaining({ bytes: wavBytes.length, sampleRate: 44100, channels: 1, lastUsedAt: 0 }),
    ]);
    expect(await readStoreTotals(fx.database)).toEqual({ bytes: 500 + wavBytes.length, artifacts: 2 });
    expect(await fx.bytesOnDisk()).toBe(500 + wavBytes.length);
    expect((await fx.database.db.select().from(fx.database.t.aliases)).map((row) => row.key)).toEqual([
      'https://media.example/kept',
    ]);
  });

  it('leaves alone content a put on some node holds: its row is on its way', async () => {
    const fx = await createStoreFixture(kind);
    const source = path.join(fx.dir, 'incoming.bin');
    await writeFile(source, 'bytes another node is storing right now');
    const stored = await fx.store.put(source, 'audio.wav');
    const counts = await reconcileStore({ database: fx.database, store: fx.store, now: Date.now });
    expect(counts).toEqual({ adopted: 0, filesRemoved: 0, rowsDropped: 0, aliasesCleared: 0 });
    expect(fx.store.hasSync(stored.contentId, 'audio.wav')).toBe(true);
    // Released without a row (its job gave up): the next pass removes it.
    await stored.release();
    expect((await reconcileStore({ database: fx.database, store: fx.store, now: Date.now })).filesRemoved).toBe(1);
  });
});
