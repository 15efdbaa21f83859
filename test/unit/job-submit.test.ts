import { describe, expect, it } from 'vitest';
import { BACKENDS } from '../support/test-database.js';
import { insertBornDoneJobsLocked, insertBornDoneJobsOrEachAlone } from '../../src/jobs/queue.js';
import { submitJob, type SubmitDeps } from '../../src/jobs/submit.js';
import { setAlias } from '../../src/store/aliases.js';
import { cacheEntryFor } from '../../src/store/cache-entries.js';
import { evictToCap } from '../../src/store/eviction.js';
import { AUDIO_ARTIFACT_NAME } from '../../src/store/layout.js';
import { callbackRecorder } from '../../src/webhooks/deliveries.js';
import { createStoreFixture, type StoreFixture } from '../support/store-fixture.js';

/** submitJob on a real database (each kind) and artifact root, racing real eviction. */
const URL_A = 'https://media.example/a';

function submitDeps(fx: StoreFixture, now: number): SubmitDeps {
  let n = 0;
  return {
    database: fx.database,
    now: () => now,
    newJobId: () => `job-${++n}`,
    recordCallback: callbackRecorder(() => `delivery-${n}`),
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

describe.each(BACKENDS)('submitJob on %s', (kind) => {
  it('a job born done records the use of its content, so the next eviction keeps it', async () => {
    const fx = await createStoreFixture(kind);
    const aliased = await fx.addArtifact(1000, 1000, URL_A);
    const other = await fx.addArtifact(1000, 2000);

    const { job, artifacts } = await submitJob({ deps: submitDeps(fx, 5000), input: { url: URL_A } });
    expect(job).toMatchObject({ status: 'done', bornDone: true, contentId: aliased });
    expect(artifacts?.map((a) => [a.contentId, a.name])).toEqual([[aliased, AUDIO_ARTIFACT_NAME]]);
    expect((await cacheEntryFor(fx.database, aliased, AUDIO_ARTIFACT_NAME))?.lastUsedAt).toBe(5000);

    await evictToCap({ database: fx.database, store: fx.store, capBytes: 1000, now: Date.now });
    expect(await fx.contentIdsOnDisk()).toEqual([aliased]);
    expect(fx.store.hasSync(other, AUDIO_ARTIFACT_NAME)).toBe(false);
  });

  it("records the submitting key's identity on every job it makes: born done (alone and at once), queued, following", async () => {
    const fx = await createStoreFixture(kind);
    await fx.addArtifact(1000, 1000, URL_A);
    const deps = submitDeps(fx, 5000);
    const submit = (url: string, apiKeyId?: string) =>
      submitJob({ deps, input: { url, apiKeyId } }).then(({ job }) => job);
    expect(await submit(URL_A, 'key-1')).toMatchObject({ bornDone: true, apiKeyId: 'key-1' });
    const together = await Promise.all(['key-2', 'key-3', 'key-4'].map((key) => submit(URL_A, key)));
    expect(together.map((job) => [job.bornDone, job.apiKeyId])).toEqual([
      [true, 'key-2'],
      [true, 'key-3'],
      [true, 'key-4'],
    ]);
    expect(await submit('https://media.example/new', 'key-5')).toMatchObject({
      status: 'queued',
      followsJobId: null,
      apiKeyId: 'key-5',
    });
    // The same key's second job follows the first; another key's leads its own download.
    expect(await submit('https://media.example/new', 'key-5')).toMatchObject({
      status: 'queued',
      followsJobId: expect.any(String),
      apiKeyId: 'key-5',
    });
    expect(await submit('https://media.example/new', 'key-6')).toMatchObject({
      status: 'queued',
      followsJobId: null,
      apiKeyId: 'key-6',
    });
    // As the database has them, not only as returned; and without a key, the empty identity.
    const rows = await fx.database.db
      .select({ id: fx.database.t.jobs.id, apiKeyId: fx.database.t.jobs.apiKeyId })
      .from(fx.database.t.jobs);
    expect(rows.map((row) => row.apiKeyId).sort()).toEqual([
      'key-1',
      'key-2',
      'key-3',
      'key-4',
      'key-5',
      'key-5',
      'key-6',
    ]);
    expect(await submit(URL_A)).toMatchObject({ bornDone: true, apiKeyId: '' });
  });

  it("a job born done shows what its URL's alias says of the source: alone and at once; none for an alias without it", async () => {
    const fx = await createStoreFixture(kind);
    const content = await fx.addArtifact(1000, 1000, URL_A);
    const media = JSON.stringify({ extractor: 'Generic', id: 'a', title: 'Ein Lied — שיר 🎵' });
    // Another URL of the same content, stored by a job that knew nothing of the source.
    const plain = 'https://media.example/plain';
    await setAlias(fx.database, 'url', URL_A, content, 1000, media);
    await setAlias(fx.database, 'url', plain, content, 1000);
    const deps = submitDeps(fx, 5000);
    const submit = (url: string) => submitJob({ deps, input: { url } }).then(({ job }) => job);
    expect(await submit(URL_A)).toMatchObject({ bornDone: true, media });
    const together = await Promise.all([submit(URL_A), submit(plain), submit(URL_A)]);
    expect(together.map((job) => [job.bornDone, job.media])).toEqual([
      [true, media],
      [true, null],
      [true, media],
    ]);
    // As the database has them, not only as returned.
    const { jobs } = fx.database.t;
    const stored = await fx.database.db.select({ id: jobs.id, media: jobs.media }).from(jobs);
    expect(stored.map((row) => row.media).sort()).toEqual([media, media, media, null].sort());
  });

  it('writes a reuse only when other content was used since (the rank changes), and never back in time', async () => {
    const fx = await createStoreFixture(kind);
    const aliased = await fx.addArtifact(1000, 1000, URL_A);
    const lastUse = async (cid: string) => (await cacheEntryFor(fx.database, cid, AUDIO_ARTIFACT_NAME))?.lastUsedAt;
    let clock = 0;
    const deps = { ...submitDeps(fx, 0), now: () => clock };
    const reuseAt = async (now: number) => {
      clock = now;
      const { job } = await submitJob({ deps, input: { url: URL_A } });
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

  // A sweep over every point of a submission, each on a fresh store: it takes its own time on a loaded machine.
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
        afterRounds(kind, Math.max(0, -ticks), () => submitJob({ deps: submitDeps(fx, 5000), input: { url: URL_A } })),
        afterRounds(kind, Math.max(0, ticks), () =>
          evictToCap({ database: fx.database, store: fx.store, capBytes: 1000, now: Date.now }),
        ),
      ]);
      const stored =
        fx.store.hasSync(aliased, AUDIO_ARTIFACT_NAME) &&
        (await cacheEntryFor(fx.database, aliased, AUDIO_ARTIFACT_NAME)) !== undefined;
      if (job.bornDone)
        expect({ ticks, contentId: job.contentId, stored }).toEqual({ ticks, contentId: aliased, stored: true });
      else expect({ ticks, status: job.status }).toEqual({ ticks, status: 'queued' });
      outcomes.add(job.status);
    }
    // Both orders happened: eviction first (a queued job), submission first (born done).
    expect([...outcomes].sort()).toEqual(['done', 'queued']);
  }, 120_000);

  it('submissions made at once are each born done on their own content, or queued (PostgreSQL: made together), and every content used is written', async () => {
    const fx = await createStoreFixture(kind);
    const url = (name: string) => `https://media.example/${name}`;
    const a = await fx.addArtifact(1000, 1000, url('a'));
    const b = await fx.addArtifact(1000, 2000, url('b'));
    // The hottest: used together with others, it is written all the same.
    const c = await fx.addArtifact(1000, 3000, url('c'));
    // Its file is gone: not born done.
    const gone = await fx.addArtifact(1000, 500, url('gone'));
    fx.store.removeSync(gone);
    const names = ['a', 'b', 'a', 'c', 'gone', 'b', 'c', 'a', 'never-stored', 'a'];
    const deps = submitDeps(fx, 5000);
    const submitted = await Promise.all(names.map((name) => submitJob({ deps, input: { url: url(name) } })));
    const expected: Record<string, string> = { a, b, c };
    submitted.forEach(({ job, artifacts }, i) => {
      const content = expected[names[i]!];
      if (content) {
        expect({ name: names[i], job, artifacts: artifacts?.map((x) => x.contentId) }).toMatchObject({
          name: names[i],
          job: { status: 'done', bornDone: true, contentId: content, url: url(names[i]!) },
          artifacts: [content],
        });
      } else {
        expect({ name: names[i], status: job.status, bornDone: job.bornDone }).toEqual({
          name: names[i],
          status: 'queued',
          bornDone: false,
        });
      }
    });
    expect(new Set(submitted.map(({ job }) => job.id)).size).toBe(names.length);
    const lastUse = async (cid: string) => (await cacheEntryFor(fx.database, cid, AUDIO_ARTIFACT_NAME))?.lastUsedAt;
    expect([await lastUse(a), await lastUse(b), await lastUse(c)]).toEqual([5000, 5000, 5000]);
  });
});

describe('born_done_jobs() on postgres', () => {
  it('makes the jobs whose alias still points to their content, and writes each content used once', async () => {
    const fx = await createStoreFixture('postgres');
    const url = (name: string) => `https://media.example/${name}`;
    const a = await fx.addArtifact(1000, 1000, url('a'));
    const b = await fx.addArtifact(1000, 2000, url('b'));
    // The alias of "moved" now points to b: a job asked for on a is not made.
    await setAlias(fx.database, 'url', url('moved'), b, 2500);
    const job = (id: string, name: string, contentId: string, at: number) => ({
      id,
      url: url(name),
      urlKey: url(name),
      contentId,
      at,
      requestId: `req-${id}`,
      apiKeyId: `key-${id}`,
    });
    const made = await insertBornDoneJobsLocked(fx.database, [
      job('j1', 'b', b, 5000),
      job('j2', 'a', a, 5000),
      job('j3', 'moved', a, 5000),
      job('j4', 'a', a, 6000),
    ]);
    expect([...made.keys()].sort()).toEqual(['j1', 'j2', 'j4']);
    expect(made.get('j4')).toMatchObject({
      id: 'j4',
      url: url('a'),
      urlKey: url('a'),
      status: 'done',
      bornDone: true,
      contentId: a,
      createdAt: 6000,
      startedAt: 6000,
      finishedAt: 6000,
      requestId: 'req-j4',
      apiKeyId: 'key-j4',
      followsJobId: null,
    });
    const lastUse = async (cid: string) => (await cacheEntryFor(fx.database, cid, AUDIO_ARTIFACT_NAME))?.lastUsedAt;
    // Two contents used together: each written, at its latest use.
    expect([await lastUse(a), await lastUse(b)]).toEqual([6000, 5000]);

    // One content alone, the hottest already: its rank cannot change, nothing is written.
    expect((await insertBornDoneJobsLocked(fx.database, [job('j5', 'a', a, 7000)])).size).toBe(1);
    expect(await lastUse(a)).toBe(6000);
    // Control: alone but not the hottest, it is written.
    expect((await insertBornDoneJobsLocked(fx.database, [job('j6', 'b', b, 8000)])).size).toBe(1);
    expect(await lastUse(b)).toBe(8000);
    expect(await insertBornDoneJobsLocked(fx.database, [])).toEqual(new Map());
  });

  it('when the jobs made together fail, each is made alone, and only the one at fault fails', async () => {
    const fx = await createStoreFixture('postgres');
    const url = (name: string) => `https://media.example/${name}`;
    const a = await fx.addArtifact(1000, 1000, url('a'));
    const job = (id: string) => ({
      id,
      url: url('a'),
      urlKey: url('a'),
      contentId: a,
      at: 5000,
      requestId: null,
      apiKeyId: 'key',
    });
    // The second 'j2' breaks the primary key: the statement fails for all four.
    await expect(insertBornDoneJobsLocked(fx.database, [job('j1'), job('j2'), job('j2'), job('j3')])).rejects.toThrow();
    const outcomes = await Promise.allSettled(
      await insertBornDoneJobsOrEachAlone(fx.database, [job('j1'), job('j2'), job('j2'), job('j3')]),
    );
    // The two j2 go at once: either may be the one made.
    const ids = outcomes.map((outcome) => (outcome.status === 'fulfilled' ? outcome.value?.id : 'failed'));
    expect([ids[0], [ids[1], ids[2]].sort(), ids[3]]).toEqual(['j1', ['failed', 'j2'], 'j3']);
  });
});
