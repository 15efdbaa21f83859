import { describe, expect, it } from 'vitest';
import { resolveAlias } from '../../src/store/aliases.js';
import { evictToCap, readStoreTotals } from '../../src/store/eviction.js';
import { createUsageRecorder } from '../../src/store/usage.js';
import { createStoreFixture } from '../support/store-fixture.js';

describe('least-recently-used eviction', () => {
  it('evicts the coldest content until the store is within its cap, and keeps the hottest', async () => {
    const fx = await createStoreFixture();
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push(await fx.addArtifact(1000, 1000 + i, `https://media.example/${i}`));
    expect(readStoreTotals(fx.db)).toEqual({ bytes: 10_000, artifacts: 10 });

    const result = await evictToCap({ db: fx.db, store: fx.store, capBytes: 6500 });
    expect(result.evictedArtifacts).toBe(4);
    expect(result.evictedBytes).toBe(4000);
    expect(result.evictedContentIds.sort()).toEqual(ids.slice(0, 4).sort());
    expect(await fx.contentIdsOnDisk()).toEqual(ids.slice(4).sort());
    expect(readStoreTotals(fx.db)).toEqual({ bytes: 6000, artifacts: 6 });
    expect(await fx.bytesOnDisk()).toBe(6000);
    // An alias to evicted content no longer resolves; one to kept content does.
    expect(resolveAlias(fx.db, 'url', 'https://media.example/0')).toBeUndefined();
    expect(resolveAlias(fx.db, 'url', 'https://media.example/9')).toBe(ids[9]);
  });

  it('orders by last use, so content served recently survives content stored recently', async () => {
    const fx = await createStoreFixture();
    const old = await fx.addArtifact(1000, 1000);
    const fresh = await fx.addArtifact(1000, 2000);
    let clock = 3000;
    const usage = createUsageRecorder({ db: fx.db, now: () => clock });
    usage.touch(old);
    usage.touch(old);
    clock = 3001;
    usage.touch(old);
    expect(usage.flush()).toBe(1);

    await evictToCap({ db: fx.db, store: fx.store, capBytes: 1000 });
    expect(await fx.contentIdsOnDisk()).toEqual([old]);
    expect(await fx.store.has(fresh, 'audio.wav')).toBe(false);
  });

  it('does nothing within the cap, and stays exact across many stores and evictions', async () => {
    const fx = await createStoreFixture();
    for (let i = 0; i < 30; i++) await fx.addArtifact(100 + i, i);
    expect((await evictToCap({ db: fx.db, store: fx.store, capBytes: 1_000_000 })).evictedArtifacts).toBe(0);
    for (const cap of [3000, 1500, 700, 0]) {
      await evictToCap({ db: fx.db, store: fx.store, capBytes: cap, batchSize: 7 });
      const totals = readStoreTotals(fx.db);
      expect(totals.bytes).toBeLessThanOrEqual(cap);
      expect(totals.bytes).toBe(await fx.bytesOnDisk());
      expect(totals.artifacts).toBe((await fx.contentIdsOnDisk()).length);
    }
  });
});
