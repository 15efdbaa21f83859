import { copyFile } from 'node:fs/promises';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import postgres from 'postgres';
import { describe, expect, it } from 'vitest';
import type { DatabaseKind } from '../../src/db/database.js';
import { createLogger } from '../../src/logger.js';
import { resolveAlias } from '../../src/store/aliases.js';
import { evictionBatchQuery, evictToCap, readStoreTotals } from '../../src/store/eviction.js';
import { createSizeCap } from '../../src/store/size-cap.js';
import { createUsageRecorder } from '../../src/store/usage.js';
import { createStoreFixture, type StoreFixture } from '../support/store-fixture.js';
import { BACKENDS } from '../support/test-database.js';

const evict = (fx: StoreFixture, capBytes: number, batchSize?: number) =>
  evictToCap({ database: fx.database, store: fx.store, capBytes, now: Date.now, batchSize });

/** A size cap of 1000 bytes on the fixture's store, as node `nodeId`. */
const sizeCapOf = (fx: StoreFixture, flushUsage: () => Promise<unknown>, nodeId = 'n1') =>
  createSizeCap({
    database: fx.database,
    store: fx.store,
    capBytes: 1000,
    log: createLogger('silent'),
    nodeId,
    now: Date.now,
    flushUsage,
  });

/** The plan each database makes for one eviction batch, as text lines. */
async function batchPlan(
  fx: StoreFixture,
  kind: DatabaseKind,
  cursor: Parameters<typeof evictionBatchQuery>[1],
): Promise<string[]> {
  const query = evictionBatchQuery(fx.database, cursor, 200).toSQL();
  if (kind === 'sqlite') {
    const client = new BetterSqlite3(fx.database.location, { readonly: true });
    try {
      return (client.prepare(`EXPLAIN QUERY PLAN ${query.sql}`).all(...query.params) as Array<{ detail: string }>).map(
        (row) => row.detail,
      );
    } finally {
      client.close();
    }
  }
  const client = postgres(fx.database.location, { max: 1, onnotice: () => {} });
  try {
    // A 20-row table is cheaper to scan (or bitmap-scan and sort) than to walk by index; what
    // matters is that the index can serve the batch in order, as it does on a large table.
    await client`set enable_seqscan = off`;
    await client`set enable_bitmapscan = off`;
    const rows = await client.unsafe(`EXPLAIN ${query.sql}`, query.params as never[]);
    return rows.map((row) => String(row['QUERY PLAN']));
  } finally {
    await client.end();
  }
}

describe.each(BACKENDS)('least-recently-used eviction on %s', (kind) => {
  it('evicts the coldest content until the store is within its cap, and keeps the hottest', async () => {
    const fx = await createStoreFixture(kind);
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push(await fx.addArtifact(1000, 1000 + i, `https://media.example/${i}`));
    expect(await readStoreTotals(fx.database)).toEqual({ bytes: 10_000, artifacts: 10 });

    const result = await evict(fx, 6500);
    expect(result.evictedArtifacts).toBe(4);
    expect(result.evictedBytes).toBe(4000);
    expect(result.evictedContentIds.sort()).toEqual(ids.slice(0, 4).sort());
    expect(await fx.contentIdsOnDisk()).toEqual(ids.slice(4).sort());
    expect(await readStoreTotals(fx.database)).toEqual({ bytes: 6000, artifacts: 6 });
    expect(await fx.bytesOnDisk()).toBe(6000);
    // An alias to evicted content no longer resolves; one to kept content does.
    expect(await resolveAlias(fx.database, 'url', 'https://media.example/0')).toBeUndefined();
    expect(await resolveAlias(fx.database, 'url', 'https://media.example/9')).toBe(ids[9]);
  });

  it("evicts a content's files together: a cold WAV takes its peaks with it, however recently they were used", async () => {
    const fx = await createStoreFixture(kind);
    const cold = await fx.addArtifact(1000, 1000, 'https://media.example/cold');
    await fx.addPeaks(cold, 300, 3000);
    const warm = await fx.addArtifact(1000, 2000, 'https://media.example/warm');
    await fx.addPeaks(warm, 300, 2000);
    expect(await readStoreTotals(fx.database)).toEqual({ bytes: 2600, artifacts: 4 });

    const result = await evict(fx, 1500);
    expect(result.evictedContentIds).toEqual([cold]);
    expect(result.evictedArtifacts).toBe(2);
    expect(result.evictedBytes).toBe(1300);
    // Control: the other content, WAV and peaks, stays whole.
    expect(await fx.contentIdsOnDisk()).toEqual([warm, warm]);
    expect(await fx.bytesOnDisk()).toBe(1300);
    expect(await readStoreTotals(fx.database)).toEqual({ bytes: 1300, artifacts: 2 });
    expect(await resolveAlias(fx.database, 'url', 'https://media.example/cold')).toBeUndefined();
    expect(await resolveAlias(fx.database, 'url', 'https://media.example/warm')).toBe(warm);
  });

  it('orders by last use, so content served recently survives content stored recently', async () => {
    const fx = await createStoreFixture(kind);
    const old = await fx.addArtifact(1000, 1000);
    const fresh = await fx.addArtifact(1000, 2000);
    let clock = 3000;
    const usage = createUsageRecorder({ database: fx.database, now: () => clock });
    usage.touch(old);
    usage.touch(old);
    clock = 3001;
    usage.touch(old);
    expect(await usage.flush()).toBe(1);

    await evict(fx, 1000);
    expect(await fx.contentIdsOnDisk()).toEqual([old]);
    expect(fx.store.hasSync(fresh, 'audio.wav')).toBe(false);
  });

  it('does nothing within the cap, and stays exact across many stores and evictions', async () => {
    const fx = await createStoreFixture(kind);
    for (let i = 0; i < 30; i++) await fx.addArtifact(100 + i, i);
    expect((await evict(fx, 1_000_000)).evictedArtifacts).toBe(0);
    for (const cap of [3000, 1500, 700, 0]) {
      await evict(fx, cap, 7);
      const totals = await readStoreTotals(fx.database);
      expect(totals.bytes).toBeLessThanOrEqual(cap);
      expect(totals.bytes).toBe(await fx.bytesOnDisk());
      expect(totals.artifacts).toBe((await fx.contentIdsOnDisk()).length);
    }
  });

  it('reads each batch by walking the (last_used_at, content_id, name) index from the cursor, never sorting', async () => {
    const fx = await createStoreFixture(kind);
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push(await fx.addArtifact(10, i % 4));
    const first = await batchPlan(fx, kind, undefined);
    const after = await batchPlan(fx, kind, { lastUsedAt: 1, contentId: ids[0]!, name: 'audio.wav' });
    if (kind === 'sqlite') {
      expect(first).toEqual(['SCAN cache_entries USING INDEX cache_entries_lru_idx']);
      // The cursor is a range on the index, not a filter over a scan.
      expect(after).toEqual([
        'SEARCH cache_entries USING INDEX cache_entries_lru_idx ((last_used_at,content_id,name)>(?,?,?))',
      ]);
      expect([...first, ...after].join('\n')).not.toMatch(/TEMP B-TREE/);
    } else {
      for (const plan of [first, after]) {
        expect(plan.join('\n')).toMatch(/Index (Only )?Scan using cache_entries_lru_idx/);
        expect(plan.join('\n')).not.toMatch(/Sort|Seq Scan/);
      }
      // The cursor is an index condition, where the walk starts, not a filter after it.
      expect(after.join('\n')).toMatch(/Index Cond: \(ROW\(last_used_at, content_id, name\) > ROW\(/);
    }
  });

  it('resumes after the cursor in (last_used_at, content_id, name) order, ties included', async () => {
    const fx = await createStoreFixture(kind);
    for (let i = 0; i < 12; i++) await fx.addArtifact(10, i % 3);
    const all = await evictionBatchQuery(fx.database, undefined, 100);
    const pages: typeof all = [];
    let cursor: (typeof all)[number] | undefined;
    for (;;) {
      const page = await evictionBatchQuery(fx.database, cursor, 5);
      if (page.length === 0) break;
      pages.push(...page);
      cursor = page.at(-1);
    }
    expect(pages).toEqual(all);
    const keys = all.map((row) => [row.lastUsedAt, row.contentId] as const);
    expect(keys).toEqual([...keys].sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : 1)));
  });

  it('writes the uses still pending in memory before choosing victims, so content served in the last second stays', async () => {
    const fx = await createStoreFixture(kind);
    const served = await fx.addArtifact(1000, 1000);
    const stored = await fx.addArtifact(1000, 2000);
    const usage = createUsageRecorder({ database: fx.database, now: () => 3000 });
    usage.touch(served); // not flushed yet: the timer has not fired
    const cap = sizeCapOf(fx, () => usage.flush());

    const result = await cap.run();
    expect(result.evictedContentIds).toEqual([stored]);
    expect(await fx.contentIdsOnDisk()).toEqual([served]);
  });

  it('a flush while another is writing returns only after that batch is written, so eviction sees its uses', async () => {
    const fx = await createStoreFixture(kind);
    const served = await fx.addArtifact(1000, 1000);
    const stored = await fx.addArtifact(1000, 2000);
    const events: string[] = [];
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    // The timer's flush holds its batch in a transaction that has not committed yet.
    const usage = createUsageRecorder({
      database: {
        ...fx.database,
        transaction: async (fn, options) => {
          await gate;
          const result = await fx.database.transaction(fn, options);
          events.push('batch written');
          return result;
        },
      },
      now: () => 3000,
    });
    usage.touch(served);
    const timerFlush = usage.flush();
    const cap = sizeCapOf(fx, async () => {
      const flushed = usage.flush();
      // Let the batch commit only once the size cap's own flush has started.
      open();
      await flushed;
      events.push('size cap flush returned');
    });

    const result = await cap.run();
    await timerFlush;
    expect(events).toEqual(['batch written', 'size cap flush returned']);
    expect(result.evictedContentIds).toEqual([stored]);
    expect(await fx.contentIdsOnDisk()).toEqual([served]);
  });

  it('keeps the uses of a batch that fails to be written for the next flush', async () => {
    const fx = await createStoreFixture(kind);
    const served = await fx.addArtifact(1000, 1000);
    const stored = await fx.addArtifact(1000, 2000);
    let failures = 1;
    const usage = createUsageRecorder({
      database: {
        ...fx.database,
        transaction: async (fn, options) => {
          if (failures-- > 0) throw new Error('connection lost');
          return fx.database.transaction(fn, options);
        },
      },
      now: () => 3000,
    });
    usage.touch(served);
    await expect(usage.flush()).rejects.toThrow('connection lost');
    expect(await usage.flush()).toBe(1);

    expect((await evict(fx, 1000)).evictedContentIds).toEqual([stored]);
  });

  it('one evictor at a time: a node that finds the lease taken leaves the work to its holder', async () => {
    const fx = await createStoreFixture(kind);
    await fx.addArtifact(1000, 1000);
    await fx.addArtifact(1000, 2000);
    const make = (nodeId: string) => sizeCapOf(fx, async () => {}, nodeId);
    const { takeLease } = await import('../../src/db/leases.js');
    expect(await takeLease(fx.database, 'evictor', 'n1', Date.now(), 60_000)).toBe(true);
    expect((await make('n2').run()).evictedArtifacts).toBe(0);
    expect(await fx.contentIdsOnDisk()).toHaveLength(2);
    // The holder evicts (its lease is its own), and gives the lease back.
    expect((await make('n1').run()).evictedArtifacts).toBe(1);
    expect(await takeLease(fx.database, 'evictor', 'n2', Date.now(), 60_000)).toBe(true);
  });

  it('never evicts content a put holds, looking past batches that are all held, until it is released', async () => {
    const fx = await createStoreFixture(kind);
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
    const result = await evict(fx, 1000, 1);
    expect(result.evictedContentIds).toEqual([ids[2], ids[3]]);
    // The cap is out of reach while both are held: they stay, rows and files.
    expect((await fx.contentIdsOnDisk()).sort()).toEqual([ids[0]!, ids[1]!].sort());
    expect(await readStoreTotals(fx.database)).toEqual({ bytes: 2000, artifacts: 2 });

    for (const stored of held) await stored.release();
    await held[0]!.release(); // a second release changes nothing
    expect((await evict(fx, 1000)).evictedContentIds).toEqual([ids[0]]);
    expect(await fx.contentIdsOnDisk()).toEqual([ids[1]]);
  });

  it('a pin left by a node that died expires, and its content can go', async () => {
    let clock = 10_000;
    const fx = await createStoreFixture(kind, { now: () => clock });
    const id = await fx.addArtifact(1000, 1000);
    const copy = path.join(fx.dir, 'copy');
    await copyFile(fx.store.pathOf(id, 'audio.wav'), copy);
    await fx.store.put(copy, 'audio.wav'); // never released: its node died
    expect(
      (await evictToCap({ database: fx.database, store: fx.store, capBytes: 0, now: () => clock })).evictedArtifacts,
    ).toBe(0);
    clock += 2 * 60 * 60 * 1000;
    expect(
      (await evictToCap({ database: fx.database, store: fx.store, capBytes: 0, now: () => clock })).evictedContentIds,
    ).toEqual([id]);
  });
});
