import { describe, expect, it } from 'vitest';
import { BACKENDS } from '../support/test-database.js';
import { submitSource, type SubmitDeps } from '../../src/jobs/submit.js';
import { cacheEntryFor } from '../../src/store/cache-entries.js';
import { evictToCap } from '../../src/store/eviction.js';
import { AUDIO_ARTIFACT_NAME } from '../../src/store/layout.js';
import { createStoreFixture, type StoreFixture } from '../support/store-fixture.js';

/** submitSource on a real database (each kind) and artifact root, racing real eviction. */
const URL_A = 'https://media.example/a';

function submitDeps(fx: StoreFixture, now: number): SubmitDeps {
  let n = 0;
  return {
    database: fx.database,
    now: () => now,
    newJobId: () => `job-${++n}`,
    newDeliveryId: () => `delivery-${n}`,
    checkDestination: async () => {},
    contentPresent: (cid) => fx.store.hasSync(cid, AUDIO_ARTIFACT_NAME),
    admitJob: async () => {},
    onQueued: () => {},
  };
}

/**
 * Starts `run` a little later each round: SQLite answers within microtasks, so a round is one
 * microtask tick; PostgreSQL answers over a socket, so a round is a millisecond.
 */
async function afterRounds<T>(kind: string, rounds: number, run: () => Promise<T>): Promise<T> {
  for (let i = 0; i < rounds; i++) {
    if (kind === 'sqlite') await Promise.resolve();
    else await new Promise((resolve) => setTimeout(resolve, 1));
  }
  return run();
}

describe.each(BACKENDS)('submitSource on %s', (kind) => {
  it('a job born done records the use of its content, so the next eviction keeps it', async () => {
    const fx = await createStoreFixture(kind);
    const aliased = await fx.addArtifact(1000, 1000, URL_A);
    const other = await fx.addArtifact(1000, 2000);

    const { job, artifacts } = await submitSource({ deps: submitDeps(fx, 5000), input: { url: URL_A } });
    expect(job).toMatchObject({ status: 'done', bornDone: true, contentId: aliased });
    expect(artifacts?.map((a) => [a.contentId, a.name])).toEqual([[aliased, AUDIO_ARTIFACT_NAME]]);
    expect((await cacheEntryFor(fx.database, aliased, AUDIO_ARTIFACT_NAME))?.lastUsedAt).toBe(5000);

    await evictToCap({ database: fx.database, store: fx.store, capBytes: 1000, now: Date.now });
    expect(await fx.contentIdsOnDisk()).toEqual([aliased]);
    expect(fx.store.hasSync(other, AUDIO_ARTIFACT_NAME)).toBe(false);
  });

  it('writes a reuse only when other content was used since (the rank changes), and never back in time', async () => {
    const fx = await createStoreFixture(kind);
    const aliased = await fx.addArtifact(1000, 1000, URL_A);
    const lastUse = async (cid: string) => (await cacheEntryFor(fx.database, cid, AUDIO_ARTIFACT_NAME))?.lastUsedAt;
    let clock = 0;
    const deps = { ...submitDeps(fx, 0), now: () => clock };
    const reuseAt = async (now: number) => {
      clock = now;
      const { job } = await submitSource({ deps, input: { url: URL_A } });
      expect(job).toMatchObject({ status: 'done', bornDone: true, contentId: aliased });
    };
    // The hottest already: its rank cannot change, nothing is written.
    await reuseAt(5000);
    expect(await lastUse(aliased)).toBe(1000);
    // Other content used later: the reuse is written, and makes it the hottest again.
    const other = await fx.addArtifact(1000, 6000);
    await reuseAt(7000);
    expect(await lastUse(aliased)).toBe(7000);
    await reuseAt(8000);
    expect(await lastUse(aliased)).toBe(7000);
    // Never back in time, even when not the hottest.
    await fx.addArtifact(1000, 9000);
    await reuseAt(3000);
    expect(await lastUse(aliased)).toBe(7000);
    expect(await lastUse(other)).toBe(6000);
  });

  it('never makes a job born done on content that eviction removes meanwhile', async () => {
    const outcomes = new Set<string>();
    // Eviction starts at every point of the submission, from well before the alias look-up
    // (negative: the submission waits) to after the insert.
    const span = kind === 'sqlite' ? 40 : 16;
    for (let ticks = -span; ticks <= span; ticks += kind === 'sqlite' ? 2 : 1) {
      const fx = await createStoreFixture(kind);
      // The aliased content is the coldest: the cap keeps one artifact, so eviction takes it unless it is used first.
      const aliased = await fx.addArtifact(1000, 1000, URL_A);
      await fx.addArtifact(1000, 2000);

      const [{ job }] = await Promise.all([
        afterRounds(kind, Math.max(0, -ticks), () => submitSource({ deps: submitDeps(fx, 5000), input: { url: URL_A } })),
        afterRounds(kind, Math.max(0, ticks), () => evictToCap({ database: fx.database, store: fx.store, capBytes: 1000, now: Date.now })),
      ]);
      const stored = fx.store.hasSync(aliased, AUDIO_ARTIFACT_NAME) && (await cacheEntryFor(fx.database, aliased, AUDIO_ARTIFACT_NAME)) !== undefined;
      if (job.bornDone) expect({ ticks, contentId: job.contentId, stored }).toEqual({ ticks, contentId: aliased, stored: true });
      else expect({ ticks, status: job.status }).toEqual({ ticks, status: 'queued' });
      outcomes.add(job.status);
    }
    // Both orders happened: eviction first (a queued job), submission first (born done).
    expect([...outcomes].sort()).toEqual(['done', 'queued']);
  });
});
