import { describe, expect, it } from 'vitest';
import { createJobRenderer } from '../../src/http/job-record.js';
import { createAdmission } from '../../src/jobs/admission.js';
import { createJobService, type JobService } from '../../src/jobs/job-service.js';
import { recordCacheEntry } from '../../src/store/cache-entries.js';
import { evictToCap } from '../../src/store/eviction.js';
import { AUDIO_ARTIFACT_NAME } from '../../src/store/layout.js';
import { reconcileStore } from '../../src/store/reconcile.js';
import { callbackRecorder } from '../../src/webhooks/deliveries.js';
import { createStoreFixture, type StoreFixture } from '../support/store-fixture.js';
import { BACKENDS, wavEntry } from '../support/test-database.js';

/**
 * A job whose content the store evicted says so in its record (result.evicted: when, and that a
 * new submission fetches it again), on a real database of each kind and a real artifact root,
 * through both ways a record is read (view of a row, find by id). A job whose content is still
 * stored says nothing; content stored again brings the artifacts back and the note goes.
 */
const URL_X = 'https://media.example/x';
const URL_Y = 'https://media.example/y';
const EVICTED_AT = 7_000;

function serviceOn(fx: StoreFixture, now: () => number): JobService {
  let ids = 0;
  return createJobService({
    database: fx.database,
    now,
    newJobId: () => `job-${++ids}`,
    recordCallback: callbackRecorder(() => `delivery-${ids}`),
    checkDestination: async () => {},
    contentPresent: (cid) => fx.store.hasSync(cid, AUDIO_ARTIFACT_NAME),
    admitJob: createAdmission({ database: fx.database, maxQueuedJobs: 10, confinementOk: () => true }),
    playlistMaxItems: 500,
    onEnded: () => {},
  });
}

const render = createJobRenderer(
  () => ({ query: 'sig', expiresAt: 0 }),
  () => 0,
);

describe.each(BACKENDS)("an evicted job's record on %s", (kind) => {
  it('says when its content was evicted and that a new submission fetches it again; a job whose content stays says nothing', async () => {
    const fx = await createStoreFixture(kind);
    let clock = 3_000;
    const service = serviceOn(fx, () => clock);
    const x = await fx.addArtifact(1000, 1000, URL_X);
    const y = await fx.addArtifact(1000, 2000, URL_Y);
    const { job: jobX } = await service.submit({ url: URL_X }, 'req-x');
    clock = 4_000;
    const { job: jobY } = await service.submit({ url: URL_Y }, 'req-y');
    expect([jobX.contentId, jobY.contentId]).toEqual([x, y]);
    expect(render((await service.find(jobX.id))!).result).toMatchObject({ content_id: x, evicted: null });

    // Room for one: x, used before y, goes.
    const evicted = await evictToCap({ database: fx.database, store: fx.store, capBytes: 1000, now: () => EVICTED_AT });
    expect(evicted.evictedContentIds).toEqual([x]);

    for (const view of [await service.find(jobX.id), await service.view(await service.get(jobX.id))]) {
      const record = render(view!);
      expect(record.status).toBe('done');
      expect(record.result).toEqual({
        content_id: x,
        artifacts: [],
        loudness: null,
        evicted: {
          at: new Date(EVICTED_AT).toISOString(),
          message: expect.stringContaining('Submitting the URL again fetches it again.'),
        },
      });
    }
    // The control: the other job's content is still stored, and its record says nothing of eviction.
    const other = render((await service.find(jobY.id))!);
    expect(other.result).toMatchObject({ content_id: y, evicted: null });
    expect(other.result!.artifacts).toHaveLength(1);

    // Stored again (as a new submission's job would): the artifacts are back and the note goes.
    await recordCacheEntry(fx.database, wavEntry(x, { name: AUDIO_ARTIFACT_NAME, bytes: 1000 }), 8_000);
    const again = render((await service.find(jobX.id))!);
    expect(again.result).toMatchObject({ content_id: x, evicted: null });
    expect(again.result!.artifacts).toHaveLength(1);
    expect(await fx.database.db.select().from(fx.database.t.evictedContent)).toEqual([]);
  });

  it("start-up reconciliation marks content whose file is gone as evicted, for its jobs' records", async () => {
    const fx = await createStoreFixture(kind);
    const service = serviceOn(fx, () => 3_000);
    const x = await fx.addArtifact(1000, 1000, URL_X);
    const { job } = await service.submit({ url: URL_X }, 'req-x');
    fx.store.removeSync(x);
    expect((await reconcileStore({ database: fx.database, store: fx.store, now: () => EVICTED_AT })).rowsDropped).toBe(
      1,
    );
    expect(render((await service.find(job.id))!).result).toMatchObject({
      artifacts: [],
      evicted: { at: new Date(EVICTED_AT).toISOString() },
    });
  });
});
