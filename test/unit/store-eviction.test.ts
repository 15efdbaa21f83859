import { copyFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveAlias } from '../../src/store/aliases.js';
import { evictionBatchQuery, evictToCap, readStoreTotals } from '../../src/store/eviction.js';
import { createSizeCap } from '../../src/store/size-cap.js';
import { createUsageRecorder } from '../../src/store/usage.js';
import { createLogger } from '../../src/logger.js';
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
    expect(fx.store.hasSync(fresh, 'audio.wav')).toBe(false);
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

  it('reads each batch by walking the (last_used_at, content_id, name) index up to the LIMIT, never sorting', async () => {
    const fx = await createStoreFixture();
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push(await fx.addArtifact(10, i % 4));
    const plan = (cursor: Parameters<typeof evictionBatchQuery>[1]) => {
      const query = evictionBatchQuery(fx.db, cursor, 200).toSQL();
      const rows = fx.db.$client.prepare(`EXPLAIN QUERY PLAN ${query.sql}`).all(...query.params) as Array<{ detail: string }>;
      return rows.map((row) => row.detail);
    };

    expect(plan(undefined)).toEqual(['SCAN cache_entries USING INDEX cache_entries_lru_idx']);
    // The cursor is a range on the index, not a filter over a scan.
    const after = plan({ lastUsedAt: 1, contentId: ids[0]!, name: 'audio.wav' });
    expect(after).toEqual(['SEARCH cache_entries USING INDEX cache_entries_lru_idx ((last_used_at,content_id,name)>(?,?,?))']);
    expect([...plan(undefined), ...after].join('\n')).not.toMatch(/TEMP B-TREE/);
  });

  it('resumes after the cursor in (last_used_at, content_id, name) order, ties included', async () => {
    const fx = await createStoreFixture();
    for (let i = 0; i < 12; i++) await fx.addArtifact(10, i % 3);
    const all = evictionBatchQuery(fx.db, undefined, 100).all();
    const pages: typeof all = [];
    let cursor: (typeof all)[number] | undefined;
    for (;;) {
      const page = evictionBatchQuery(fx.db, cursor, 5).all();
      if (page.length === 0) break;
      pages.push(...page);
      cursor = page.at(-1);
    }
    expect(pages).toEqual(all);
    const keys = all.map((row) => [row.lastUsedAt, row.contentId] as const);
    expect(keys).toEqual([...keys].sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : 1)));
  });

  it('writes the uses still pending in memory before choosing victims, so content served in the last second stays', async () => {
    const fx = await createStoreFixture();
    const served = await fx.addArtifact(1000, 1000);
    const stored = await fx.addArtifact(1000, 2000);
    const usage = createUsageRecorder({ db: fx.db, now: () => 3000 });
    usage.touch(served); // not flushed yet: the timer has not fired
    const cap = createSizeCap({ db: fx.db, store: fx.store, capBytes: 1000, log: createLogger('silent'), flushUsage: () => usage.flush() });

    const result = await cap.run();
    expect(result.evictedContentIds).toEqual([stored]);
    expect(await fx.contentIdsOnDisk()).toEqual([served]);
  });

  it('never evicts content a put holds, looking past batches that are all held, until it is released', async () => {
    const fx = await createStoreFixture();
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await fx.addArtifact(1000, 1000 + i));
    // Two jobs storing the same bytes as the two coldest (put finds them stored, and pins them).
    const held = [];
    for (const id of ids.slice(0, 2)) {
      const copy = path.join(fx.dir, `${id}.copy`);
      await copyFile(fx.store.pathOf(id, 'audio.wav'), copy);
      held.push(await fx.store.put(copy, 'audio.wav'));
    }
    expect(held.map((stored) => [stored.contentId, stored.reused])).toEqual([
      [ids[0], true],
      [ids[1], true],
    ]);

    // Batches of one: the first two batches hold only held content, and eviction looks past them.
    const result = await evictToCap({ db: fx.db, store: fx.store, capBytes: 1000, batchSize: 1 });
    expect(result.evictedContentIds).toEqual([ids[2], ids[3]]);
    // The cap is out of reach while both are held: they stay, rows and files.
    expect((await fx.contentIdsOnDisk()).sort()).toEqual([ids[0]!, ids[1]!].sort());
    expect(readStoreTotals(fx.db)).toEqual({ bytes: 2000, artifacts: 2 });

    for (const stored of held) stored.release();
    held[0]!.release(); // a second release changes nothing
    expect(fx.store.isPinned(ids[0]!)).toBe(false);
    expect((await evictToCap({ db: fx.db, store: fx.store, capBytes: 1000 })).evictedContentIds).toEqual([ids[0]]);
    expect(await fx.contentIdsOnDisk()).toEqual([ids[1]]);
  });
});
