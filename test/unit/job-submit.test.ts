import { describe, expect, it } from 'vitest';
import { submitSource, type SubmitDeps } from '../../src/jobs/submit.js';
import { cacheEntryFor } from '../../src/store/cache-entries.js';
import { evictToCap } from '../../src/store/eviction.js';
import { AUDIO_ARTIFACT_NAME } from '../../src/store/layout.js';
import { createStoreFixture, type StoreFixture } from '../support/store-fixture.js';

/** submitSource on a real SQLite file and artifact root, racing real eviction. */
const URL_A = 'https://media.example/a';

function submitDeps(fx: StoreFixture, now: number): SubmitDeps {
  let n = 0;
  return {
    db: fx.db,
    now: () => now,
    newJobId: () => `job-${++n}`,
    checkDestination: async () => {},
    contentPresent: (cid) => fx.store.hasSync(cid, AUDIO_ARTIFACT_NAME),
    admitJob: () => {},
    wakeWorkers: () => {},
  };
}

async function afterTicks<T>(ticks: number, run: () => Promise<T>): Promise<T> {
  for (let i = 0; i < ticks; i++) await Promise.resolve();
  return run();
}

describe('submitSource', () => {
  it('a job born done records the use of its content, so the next eviction keeps it', async () => {
    const fx = await createStoreFixture();
    const aliased = await fx.addArtifact(1000, 1000, URL_A);
    const other = await fx.addArtifact(1000, 2000);

    const job = await submitSource({ deps: submitDeps(fx, 5000), input: { url: URL_A } });
    expect(job).toMatchObject({ status: 'done', bornDone: true, contentId: aliased });
    expect(cacheEntryFor(fx.db, aliased, AUDIO_ARTIFACT_NAME)?.lastUsedAt).toBe(5000);

    await evictToCap({ db: fx.db, store: fx.store, capBytes: 1000 });
    expect(await fx.contentIdsOnDisk()).toEqual([aliased]);
    expect(fx.store.hasSync(other, AUDIO_ARTIFACT_NAME)).toBe(false);
  });

  it('never makes a job born done on content that eviction removes meanwhile', async () => {
    const outcomes = new Set<string>();
    // Eviction starts at every point of the submission, from before the alias look-up to after the insert.
    for (let ticks = 0; ticks <= 12; ticks++) {
      const fx = await createStoreFixture();
      // The aliased content is the coldest: the cap keeps one artifact, so eviction takes it unless it is used first.
      const aliased = await fx.addArtifact(1000, 1000, URL_A);
      await fx.addArtifact(1000, 2000);

      const [job] = await Promise.all([
        submitSource({ deps: submitDeps(fx, 5000), input: { url: URL_A } }),
        afterTicks(ticks, () => evictToCap({ db: fx.db, store: fx.store, capBytes: 1000 })),
      ]);
      const stored = fx.store.hasSync(aliased, AUDIO_ARTIFACT_NAME) && cacheEntryFor(fx.db, aliased, AUDIO_ARTIFACT_NAME) !== undefined;
      if (job.bornDone) expect({ ticks, contentId: job.contentId, stored }).toEqual({ ticks, contentId: aliased, stored: true });
      else expect({ ticks, status: job.status }).toEqual({ ticks, status: 'queued' });
      outcomes.add(job.status);
    }
    // Both orders happened: eviction first (a queued job), submission first (born done).
    expect([...outcomes].sort()).toEqual(['done', 'queued']);
  });
});
