import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createHealthCheck } from '../../src/health.js';
import { createLogger } from '../../src/logger.js';
import { recordCacheEntry, SOURCE_WAV_KIND } from '../../src/store/cache-entries.js';
import { evictToCap, readStoreTotals } from '../../src/store/eviction.js';
import { createStoreSpace, type StatFs } from '../../src/store/free-space.js';
import { AUDIO_ARTIFACT_NAME } from '../../src/store/layout.js';
import { createSizeCap } from '../../src/store/size-cap.js';
import { createStoreFixture, type StoreFixture } from '../support/store-fixture.js';
import { BACKENDS } from '../support/test-database.js';

/**
 * The store and the free space of its volume, with statfs given by the test: eviction keeps
 * STORE_MIN_FREE_BYTES free whatever the cap, a node short of it takes no job and says degraded.
 * test/e2e/store-free-space.test.ts does the same with the real service on a real small volume.
 */
const statfsOf =
  (free: () => number): StatFs =>
  () => ({ bavail: free() / 4096, bsize: 4096 });

describe('the free space of the store', () => {
  it('reads statfs as an unprivileged writer sees it, and says unknown when it cannot', () => {
    const asked: string[] = [];
    const statfs: StatFs = (dir) => {
      asked.push(dir);
      return { bavail: 3n, bsize: 4096n };
    };
    const space = createStoreSpace({ root: '/store', minFreeBytes: 8192, statfs, now: () => 0 });
    expect(space.freeBytes()).toBe(12_288);
    expect(space.canStoreJob()).toBe(true);
    expect(asked).toEqual(['/store', '/store']);
    const gone: StatFs = () => {
      throw new Error('ENOENT');
    };
    const broken = createStoreSpace({ root: '/gone', minFreeBytes: 8192, statfs: gone, now: () => 0 });
    expect(broken.freeBytes()).toBeNull();
    expect(broken.canStoreJob()).toBe(true);
  });

  it('a node short of room for one job takes none, and asks for eviction at most once per notice period', () => {
    let free = 4096;
    let clock = 0;
    let shorts = 0;
    let rooms = 0;
    const space = createStoreSpace({
      root: '/store',
      minFreeBytes: 8192,
      statfs: statfsOf(() => free),
      now: () => clock,
      onShort: () => shorts++,
      onRoom: () => rooms++,
      shortNoticeMs: 5000,
    });
    expect(space.canStoreJob()).toBe(false);
    clock = 4999;
    expect(space.canStoreJob()).toBe(false);
    expect(shorts).toBe(1);
    clock = 5000;
    expect(space.canStoreJob()).toBe(false);
    expect(shorts).toBe(2);
    expect(rooms).toBe(0);
    // The control: with room for one job, it takes it, asks for nothing, and says so once.
    free = 8192;
    clock = 20_000;
    expect(space.canStoreJob()).toBe(true);
    expect(space.canStoreJob()).toBe(true);
    expect(shorts).toBe(2);
    expect(rooms).toBe(1);
  });

  it('/healthz says degraded, with a warning, while there is not room for one job; ok once there is', async () => {
    let free = 1000;
    let stored = 0;
    const check = createHealthCheck({
      tools: { ytdlp: 'yt-dlp', ffmpeg: 'ffmpeg' },
      checkConfinement: () => Promise.resolve({ mode: 'netns', ok: true }),
      locate: (name) => Promise.resolve(`/usr/bin/${name}`),
      version: (found) => Promise.resolve(found.endsWith('yt-dlp') ? '2026.10.01' : `${found} version 5.1`),
      pingDatabase: () => Promise.resolve(true),
      databaseKind: 'sqlite',
      nodeId: 'node-1',
      artifactRoot: '/',
      storeSpace: createStoreSpace({ root: '/store', minFreeBytes: 8192, statfs: statfsOf(() => free), now: () => 0 }),
      storedBytes: () => Promise.resolve(stored),
      now: () => Date.UTC(2026, 10, 1),
    });
    // Nothing of the store to evict: only the operator can make room, and the warning says so.
    const stuck = await check();
    expect(stuck).toMatchObject({
      status: 'degraded',
      can_fetch: true,
      artifact_root: { free_bytes: 1000, min_free_bytes: 8192, can_store: false, stored_bytes: 0 },
    });
    expect(stuck.warnings).toEqual([
      {
        code: 'store_low_on_space',
        message: expect.stringMatching(
          /STORE_MIN_FREE_BYTES, 8192.*Eviction cannot make room: the store holds 0 bytes of content and 7192 must be freed; files that are not the store's/,
        ),
      },
    ]);
    // Enough of the store to evict: eviction is making room.
    stored = 7192;
    const evicting = await check();
    expect(evicting).toMatchObject({ status: 'degraded', artifact_root: { can_store: false, stored_bytes: 7192 } });
    expect(evicting.warnings).toEqual([
      {
        code: 'store_low_on_space',
        message: expect.stringContaining(
          'Eviction is making room: the store holds 7192 bytes of content, 7192 must go.',
        ),
      },
    ]);
    free = 8192;
    const room = await check();
    expect(room).toMatchObject({
      status: 'ok',
      artifact_root: { free_bytes: 8192, can_store: true, stored_bytes: 7192 },
      warnings: [],
    });
  });
});

/** A volume of `volumeBytes` holding the store's files (and `otherBytes` of something else). */
function volume(
  fx: StoreFixture,
  ids: string[],
  sizes: Map<string, number>,
  volumeBytes: number,
  otherBytes = () => 0,
) {
  return () =>
    volumeBytes -
    otherBytes() -
    ids
      .filter((id) => existsSync(fx.store.pathOf(id, AUDIO_ARTIFACT_NAME)))
      .reduce((sum, id) => sum + sizes.get(id)!, 0);
}

describe.each(BACKENDS)('eviction for free space on %s', (kind) => {
  it('evicts the coldest content until the volume has the free space to keep, whatever the cap', async () => {
    const fx = await createStoreFixture(kind);
    const ids: string[] = [];
    const sizes = new Map<string, number>();
    for (let i = 0; i < 10; i++) {
      const id = await fx.addArtifact(1000, 1000 + i);
      ids.push(id);
      sizes.set(id, 1000);
    }
    const free = volume(fx, ids, sizes, 12_000);
    expect(free()).toBe(2000);
    const evict = (minFreeBytes: number) =>
      evictToCap({
        database: fx.database,
        store: fx.store,
        capBytes: 1_000_000,
        now: Date.now,
        space: { minFreeBytes, freeBytes: free },
      });

    // The control: with the free space it keeps, nothing goes, though the volume is nearly full.
    expect((await evict(2000)).evictedArtifacts).toBe(0);
    const result = await evict(4500);
    expect(result.evictedContentIds.sort()).toEqual(ids.slice(0, 3).sort());
    expect(free()).toBe(5000);
    expect(await fx.contentIdsOnDisk()).toEqual(ids.slice(3).sort());
    expect(await readStoreTotals(fx.database)).toEqual({ bytes: 7000, artifacts: 7 });
  });

  it('stops when only pinned content is left, however short the volume', async () => {
    const fx = await createStoreFixture(kind);
    const ids = [await fx.addArtifact(1000, 1), await fx.addArtifact(1000, 2)];
    const sizes = new Map(ids.map((id) => [id, 1000]));
    // Content a job is storing: pinned, and the coldest of all.
    const file = path.join(fx.dir, 'staged.wav');
    await writeFile(file, 'pinned bytes');
    const pinned = await fx.store.put(file, AUDIO_ARTIFACT_NAME);
    await recordCacheEntry(
      fx.database,
      {
        contentId: pinned.contentId,
        name: AUDIO_ARTIFACT_NAME,
        kind: SOURCE_WAV_KIND,
        bytes: 12,
        contentType: 'audio/wav',
        sampleRate: 44100,
        channels: 1,
        durationS: 0,
      },
      0,
    );
    // Something else fills the volume: the store cannot make the room alone.
    const free = volume(fx, ids, sizes, 10_000, () => 9000);
    try {
      const result = await evictToCap({
        database: fx.database,
        store: fx.store,
        capBytes: 1_000_000,
        now: Date.now,
        space: { minFreeBytes: 5000, freeBytes: free },
      });
      expect(result.evictedContentIds.sort()).toEqual([...ids].sort());
      expect(fx.store.hasSync(pinned.contentId, AUDIO_ARTIFACT_NAME)).toBe(true);
      expect(free()).toBe(1000);
    } finally {
      await pinned.release();
    }
  });

  it('a run that leaves the volume short says once that eviction cannot make room, until there is room', async () => {
    const fx = await createStoreFixture(kind);
    const ids = [await fx.addArtifact(1000, 1)];
    let other = 9500;
    const free = volume(fx, ids, new Map(ids.map((id) => [id, 1000])), 12_000, () => other);
    const lines: Array<{ msg: string; stored_bytes?: number }> = [];
    const sizeCap = createSizeCap({
      database: fx.database,
      store: fx.store,
      capBytes: 1_000_000,
      space: { minFreeBytes: 5000, freeBytes: free },
      log: createLogger('warn', { write: (line: string) => void lines.push(JSON.parse(line) as (typeof lines)[0]) }),
      nodeId: 'n1',
      now: Date.now,
      flushUsage: () => Promise.resolve(),
    });
    const cannot = () => lines.filter((line) => line.msg.startsWith('eviction cannot make room for a job'));
    // The store's 1000 bytes go, and the volume is still 2500 short: said once, with what is left.
    expect((await sizeCap.run()).evictedContentIds).toEqual(ids);
    expect(free()).toBe(2500);
    await sizeCap.run();
    expect(cannot()).toEqual([expect.objectContaining({ stored_bytes: 0 })]);
    // The operator frees space: room again, then short again, and said again.
    other = 0;
    await sizeCap.run();
    other = 9500;
    await sizeCap.run();
    expect(cannot()).toHaveLength(2);
  });
});
