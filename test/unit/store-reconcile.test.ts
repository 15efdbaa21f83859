import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { setAlias } from '../../src/store/aliases.js';
import { cacheEntriesFor } from '../../src/store/cache-entries.js';
import { evictedAt } from '../../src/store/evicted.js';
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

  it('keeps a WAV and its peaks one content: adopts peaks beside a recorded WAV, drops peaks without their WAV', async () => {
    const fx = await createStoreFixture(kind);
    const peaks = JSON.stringify({
      version: 2,
      channels: 1,
      sample_rate: 44100,
      samples_per_pixel: 32,
      bits: 8,
      length: 1,
      data: [0, 0],
    });
    // Peaks with no row beside a WAV that has one (a crash before the commit): adopted, with the WAV's last use.
    const withPeaks = await fx.addArtifact(500, 7, 'https://media.example/with-peaks');
    await writeFile(fx.store.pathOf(withPeaks, 'peaks.json'), peaks);
    // Something else by that name beside a WAV: removed.
    const junk = await fx.addArtifact(400, 8);
    await writeFile(fx.store.pathOf(junk, 'peaks.json'), 'not peaks');
    // A peaks row whose file is gone: that row dropped, its WAV kept and not marked evicted.
    const peaksLost = await fx.addArtifact(300, 9);
    await fx.addPeaks(peaksLost, 50, 9);
    await rm(fx.store.pathOf(peaksLost, 'peaks.json'));
    // A WAV whose file is gone: its peaks (row and file) go with it, and the content is marked evicted.
    const wavLost = await fx.addArtifact(200, 10, 'https://media.example/wav-lost');
    await fx.addPeaks(wavLost, 60, 10);
    await rm(fx.store.pathOf(wavLost, 'audio.wav'));

    const counts = await reconcileStore({ database: fx.database, store: fx.store, now: () => 20 });
    expect(counts).toEqual({ adopted: 1, filesRemoved: 1, rowsDropped: 3, aliasesCleared: 1 });
    expect(await cacheEntriesFor(fx.database, withPeaks)).toEqual([
      expect.objectContaining({ name: 'audio.wav', lastUsedAt: 7 }),
      expect.objectContaining({ name: 'peaks.json', kind: 'waveform_peaks', bytes: peaks.length, lastUsedAt: 7 }),
    ]);
    expect((await cacheEntriesFor(fx.database, junk)).map((row) => row.name)).toEqual(['audio.wav']);
    expect((await cacheEntriesFor(fx.database, peaksLost)).map((row) => row.name)).toEqual(['audio.wav']);
    expect(await cacheEntriesFor(fx.database, wavLost)).toEqual([]);
    expect((await fx.contentIdsOnDisk()).sort()).toEqual([withPeaks, withPeaks, junk, peaksLost].sort());
    expect([...(await evictedAt(fx.database, [peaksLost, wavLost])).keys()]).toEqual([wavLost]);
    expect(await readStoreTotals(fx.database)).toEqual({ bytes: 500 + peaks.length + 400 + 300, artifacts: 4 });
    expect(await fx.bytesOnDisk()).toBe(500 + peaks.length + 400 + 300);
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
