import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { readLease, takeLease } from '../../src/db/leases.js';
import { ServiceError } from '../../src/errors.js';
import { createLogger } from '../../src/logger.js';
import { createContentStore } from '../../src/store/content-store.js';
import { createDatabasePins } from '../../src/store/pins.js';
import { createScrubber, SCRUB_DUE_LEASE, SCRUB_LEASE, type ScrubReport } from '../../src/store/scrubber.js';
import { createStoreFixture, type StoreFixture } from '../support/store-fixture.js';
import { BACKENDS } from '../support/test-database.js';

/**
 * The scrubber (src/store/scrubber.ts): one pass at a time on a node (a request joins it), one
 * node at a time over a shared store (the 'store-scrub' lease), and the background schedule kept
 * in the database so that many nodes scrub once per interval between them.
 */
const KiB = 1024;

/** A pacer that waits on `gate` once the first 64 KiB (its burst) are read: the clock never moves. */
function gated() {
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  return { clock: () => 0, sleep: () => gate, open };
}

function scrubberOf(fx: StoreFixture, nodeId: string, extra: Partial<Parameters<typeof createScrubber>[0]> = {}) {
  const completed: ScrubReport[] = [];
  const scrubber = createScrubber({
    database: fx.database,
    store: fx.store,
    nodeId,
    log: createLogger('silent'),
    now: Date.now,
    intervalMs: 0,
    bytesPerSecond: 1024 * KiB,
    quarantineDir: path.join(fx.dir, `quarantine-${nodeId}`),
    metrics: {
      addScrubReadBytes: () => {},
      observeScrubChecked: () => {},
      observeScrubFinding: () => {},
      observeScrubCompleted: () => completed.push(scrubber.latest()!.report()),
    },
    ...extra,
  });
  return { scrubber, completed };
}

describe.each(BACKENDS)('store scrubber on %s', (kind) => {
  it('a request during a pass joins it; the pass ends done, and stays the latest', async () => {
    const fx = await createStoreFixture(kind);
    for (let i = 0; i < 10; i++) await fx.addArtifact(10 * KiB, i);
    const pacing = gated();
    const { scrubber } = scrubberOf(fx, 'node-a', { clock: pacing.clock, sleep: pacing.sleep });
    expect(scrubber.latest()).toBeUndefined();

    const first = await scrubber.request();
    const again = await scrubber.request();
    expect(again.id).toBe(first.id);
    expect(first.report()).toMatchObject({ status: 'running', trigger: 'request', nodeId: 'node-a', finishedAt: null });
    expect((await readLease(fx.database, SCRUB_LEASE))?.holder).toBe('node-a');

    pacing.open();
    const report = await first.ended;
    expect(report).toMatchObject({ status: 'done', checked: 10, bytesRead: 100 * KiB, corrupt: 0, error: null });
    expect(report.finishedAt).toBeGreaterThanOrEqual(report.startedAt);
    expect(scrubber.latest()?.id).toBe(first.id);
    // The lease is given back; a pass asked for now is a new one.
    expect(await readLease(fx.database, SCRUB_LEASE)).toBeUndefined();
    const next = await scrubber.request();
    expect(next.id).not.toBe(first.id);
    await next.ended;
  });

  it('while another node scrubs the store, a request is refused with that node named', async () => {
    const fx = await createStoreFixture(kind);
    await fx.addArtifact(10 * KiB, 1);
    expect(await takeLease(fx.database, SCRUB_LEASE, 'node-b', Date.now(), 60_000)).toBe(true);
    const { scrubber } = scrubberOf(fx, 'node-a');
    const refusal = await scrubber.request().catch((err: unknown) => err);
    expect(refusal).toBeInstanceOf(ServiceError);
    expect(refusal).toMatchObject({
      kind: 'conflict',
      code: 'scrub_running_elsewhere',
      extra: { fields: { node_id: 'node-b' } },
    });
    expect(scrubber.latest()).toBeUndefined();
  });

  it('two nodes asked at once over one store: one scrubs, the other is refused', async () => {
    const fx = await createStoreFixture(kind);
    for (let i = 0; i < 10; i++) await fx.addArtifact(10 * KiB, i);
    const pacing = gated();
    const a = scrubberOf(fx, 'node-a', { clock: pacing.clock, sleep: pacing.sleep }).scrubber;
    // The second node's own store handle on the same root, as another process would have.
    const storeB = createContentStore(
      fx.store.root,
      createDatabasePins({ database: fx.database, holder: () => 'b', now: Date.now }),
      'node-b',
    );
    const b = scrubberOf(fx, 'node-b', { store: storeB }).scrubber;
    const outcomes = await Promise.allSettled([a.request(), b.request()]);
    const started = outcomes.filter((o) => o.status === 'fulfilled');
    const refused = outcomes.filter((o) => o.status === 'rejected');
    expect(started).toHaveLength(1);
    expect(refused).toHaveLength(1);
    expect((refused[0] as PromiseRejectedResult).reason).toMatchObject({ code: 'scrub_running_elsewhere' });
    pacing.open();
    await (started[0] as PromiseFulfilledResult<Awaited<ReturnType<typeof a.request>>>).value.ended;
  });

  it('stop() ends the pass under way as stopped, and gives the lease back', async () => {
    const fx = await createStoreFixture(kind);
    for (let i = 0; i < 10; i++) await fx.addArtifact(10 * KiB, i);
    // A sleep that only an abort ends.
    const { scrubber } = scrubberOf(fx, 'node-a', {
      clock: () => 0,
      sleep: (_ms, signal) =>
        new Promise((_resolve, reject) => signal?.addEventListener('abort', () => reject(signal.reason as Error))),
    });
    const pass = await scrubber.request();
    await sleep(50);
    await scrubber.stop();
    const report = await pass.ended;
    expect(report.status).toBe('stopped');
    expect(report.checked).toBeLessThan(10);
    expect(await readLease(fx.database, SCRUB_LEASE)).toBeUndefined();
  });

  it('in the background: a store seen for the first time is due one interval later, and then scrubbed once per interval', async () => {
    const fx = await createStoreFixture(kind);
    await fx.addArtifact(10 * KiB, 1);
    const { scrubber, completed } = scrubberOf(fx, 'node-a', { intervalMs: 400 });
    const startedAt = Date.now();
    scrubber.start();
    try {
      await sleep(100);
      expect(completed).toEqual([]);
      const due = await readLease(fx.database, SCRUB_DUE_LEASE);
      expect(due?.expiresAt).toBeGreaterThanOrEqual(startedAt + 400);
      expect(due?.expiresAt).toBeLessThanOrEqual(Date.now() + 400);

      while (completed.length < 2) await sleep(20);
      expect(completed.map((report) => [report.trigger, report.status, report.checked])).toEqual([
        ['schedule', 'done', 1],
        ['schedule', 'done', 1],
      ]);
      expect(completed[0]!.startedAt).toBeGreaterThanOrEqual(due!.expiresAt);
      // The next one is due an interval after the last one ended.
      expect((await readLease(fx.database, SCRUB_DUE_LEASE))?.expiresAt).toBe(completed[1]!.finishedAt! + 400);
      expect(completed[1]!.startedAt).toBeGreaterThanOrEqual(completed[0]!.finishedAt! + 400);
    } finally {
      await scrubber.stop();
    }
  });

  it('in the background, two nodes over one store scrub it once per interval between them, never at once', async () => {
    const fx = await createStoreFixture(kind);
    for (let i = 0; i < 5; i++) await fx.addArtifact(40 * KiB, i);
    // A pass reads 200 KiB at 1 MiB/s: about 140 ms beyond its first 64 KiB.
    const a = scrubberOf(fx, 'node-a', { intervalMs: 300 });
    const b = scrubberOf(fx, 'node-b', { intervalMs: 300 });
    const begun = Date.now();
    a.scrubber.start();
    b.scrubber.start();
    try {
      await sleep(2500);
    } finally {
      await Promise.all([a.scrubber.stop(), b.scrubber.stop()]);
    }
    const elapsed = Date.now() - begun;
    const passes = [...a.completed, ...b.completed].sort((x, y) => x.startedAt - y.startedAt);
    expect(passes.length).toBeGreaterThanOrEqual(2);
    // One per interval at most (each begins an interval after the last ended), not one per node.
    expect(passes.length).toBeLessThanOrEqual(Math.ceil(elapsed / 300));
    for (let i = 1; i < passes.length; i++)
      expect(passes[i]!.startedAt).toBeGreaterThanOrEqual(passes[i - 1]!.finishedAt! + 300);
    for (const pass of passes) expect(pass).toMatchObject({ status: 'done', checked: 5, bytesRead: 200 * KiB });
  });
});
