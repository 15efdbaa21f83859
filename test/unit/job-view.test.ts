import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import BetterSqlite3 from 'better-sqlite3';
import type { Database } from '../../src/db/database.js';
import { createAdmission } from '../../src/jobs/admission.js';
import { createJobService, type JobService, type JobView } from '../../src/jobs/job-service.js';
import { claimNextJob, getJobRow, markDone, renewLeases } from '../../src/jobs/queue.js';
import { setAlias } from '../../src/store/aliases.js';
import { recordCacheEntry } from '../../src/store/cache-entries.js';
import { callbackRecorder } from '../../src/webhooks/deliveries.js';
import { BACKENDS, openTestDatabase, wavEntry, type TestDatabase } from '../support/test-database.js';

/**
 * A poll reads a follower's row, then its leader's. When the leader ends between the two reads,
 * the view must not show the leader's end over the follower's stale queued row (a "done" job
 * with no result).
 */
function serviceOn(database: Database): JobService {
  let ids = 0;
  return createJobService({
    database,
    now: () => 1000,
    newJobId: () => `job-${++ids}`,
    recordCallback: callbackRecorder(() => `delivery-${ids}`),
    checkDestination: async () => {},
    contentPresent: () => true,
    admitJob: createAdmission({ database, maxQueuedJobs: 10, confinementOk: () => true }),
    playlistMaxItems: 500,
    onEnded: () => {},
  });
}

describe.each(BACKENDS)('the job view on %s', (kind) => {
  let database: TestDatabase;
  let service: JobService;

  beforeEach(async () => {
    database = await openTestDatabase(kind);
    service = serviceOn(database);
  });
  afterEach(async () => {
    await database.close();
  });

  it('shows a follower whose leader ended after its row was read as ended itself, with the result', async () => {
    const { job: leader } = await service.submit({ url: 'https://m.example/a' }, 'req-1');
    const { job: follower } = await service.submit({ url: 'https://m.example/a' }, 'req-2');
    expect(follower.followsJobId).toBe(leader.id);

    const queuedView = await service.view((await getJobRow(database, follower.id))!);
    expect(queuedView.job.status).toBe('queued');
    expect(queuedView.leader?.id).toBe(leader.id);

    const stale = (await getJobRow(database, follower.id))!;
    const lease = { owner: 'node-a', now: 2000, leaseMs: 30_000 };
    await claimNextJob(database, lease);
    await database.transaction(async (q) => {
      await markDone(q, leader.id, 'node-a', 'cid-a', 3000);
      await recordCacheEntry(q, wavEntry('cid-a'), 3000);
    });
    // The torn read the view has to mend: the row says queued, its leader is done.
    expect(stale.status).toBe('queued');

    const view = await service.view(stale);
    expect(view.job).toMatchObject({ id: follower.id, status: 'done', contentId: 'cid-a' });
    expect(view.leader).toBeUndefined();
    expect(view.artifacts.map((a) => a.name)).toEqual(['audio.wav']);
  });

  it('find(id) reads by id what view() makes of the row: queued, followed, done with artifacts and a callback, or nothing', async () => {
    const same = async (id: string) =>
      expect(await service.find(id)).toEqual(await service.view((await getJobRow(database, id))!));
    const { job: leader } = await service.submit(
      { url: 'https://m.example/a', callbackUrl: 'https://hooks.example/done' },
      'req-1',
    );
    const { job: follower } = await service.submit({ url: 'https://m.example/a' }, 'req-2');
    await same(leader.id);
    await same(follower.id);
    expect((await service.find(follower.id))!.leader?.id).toBe(leader.id);
    expect((await service.find(leader.id))!.callback).toMatchObject({
      jobId: leader.id,
      url: 'https://hooks.example/done',
    });

    const lease = { owner: 'node-a', now: 2000, leaseMs: 30_000 };
    await claimNextJob(database, lease);
    await database.transaction(async (q) => {
      await markDone(q, leader.id, 'node-a', 'cid-a', 3000);
      // Two artifacts of one content, written out of order: one joined row each, in name order.
      for (const name of ['stems.wav', 'audio.wav']) {
        await recordCacheEntry(q, wavEntry('cid-a', { name }), 3000);
      }
    });
    await same(leader.id);
    await same(follower.id);
    const done = (await service.find(leader.id))!;
    expect(done.job.status).toBe('done');
    expect(done.artifacts.map((a) => a.name)).toEqual(['audio.wav', 'stems.wav']);
    expect(done.callback?.jobId).toBe(leader.id);
    expect(await service.find('no-such-job')).toBeUndefined();
  });

  it('find(id) of many jobs at once answers each its own view (on PostgreSQL read together), and nothing for no such job', async () => {
    const { job: leader } = await service.submit(
      { url: 'https://m.example/a', callbackUrl: 'https://hooks.example/done' },
      'req-1',
    );
    const { job: follower } = await service.submit({ url: 'https://m.example/a' }, 'req-2');
    await database.transaction(async (q) => {
      for (const name of ['stems.wav', 'audio.wav']) {
        await recordCacheEntry(q, wavEntry('cid-s', { name }), 500);
      }
      await setAlias(q, 'url', 'https://m.example/stored', 'cid-s', 500);
    });
    const { job: stored } = await service.submit({ url: 'https://m.example/stored' }, 'req-3');
    const ids = [leader.id, follower.id, stored.id, 'no-such-job', leader.id, stored.id];
    const found = await Promise.all(ids.map((id) => service.find(id)));
    const expected = await Promise.all(
      ids.map(async (id) => {
        const row = await getJobRow(database, id);
        return row && service.view(row);
      }),
    );
    expect(found).toEqual(expected);
    expect(found.map((view) => view?.job.status)).toEqual(['queued', 'queued', 'done', undefined, 'queued', 'done']);
    expect(found[1]!.leader?.id).toBe(leader.id);
    expect(found[2]!.artifacts.map((a) => a.name)).toEqual(['audio.wav', 'stems.wav']);
    expect(found[0]!.callback?.url).toBe('https://hooks.example/done');
  });

  it('find(id) asked for after a write sees it, even while a read of the same job from before the write is under way', async () => {
    const { job } = await service.submit({ url: 'https://m.example/a' }, 'req-1');
    const { job: other } = await service.submit({ url: 'https://m.example/b' }, 'req-2');
    // Under way before the write (on PostgreSQL, two reads: every later one waits for its turn).
    const before = [service.find(job.id), service.find(other.id)];
    const lease = { owner: 'node-a', now: 2000, leaseMs: 30_000 };
    await claimNextJob(database, lease);
    const running = await claimNextJob(database, { owner: 'node-a', now: 2000, leaseMs: 30_000 });
    expect(running).toBeDefined();
    const after = await service.find(job.id);
    expect(after!.job.status).toBe('running');
    await Promise.all(before);
  });

  it("submit() of a stored URL answers the born-done view its transaction read: find()'s but for the use it recorded", async () => {
    await database.transaction(async (q) => {
      for (const name of ['stems.wav', 'audio.wav']) {
        await recordCacheEntry(q, wavEntry('cid-s', { name }), 500);
      }
      await setAlias(q, 'url', 'https://m.example/stored', 'cid-s', 500);
    });
    const withoutUse = (view: JobView | undefined) =>
      view && { ...view, artifacts: view.artifacts.map(({ lastUsedAt: _, ...artifact }) => artifact) };
    for (const callbackUrl of [undefined, 'https://hooks.example/done']) {
      const submitted = await service.submit({ url: 'https://m.example/stored', callbackUrl }, 'req-1');
      expect(submitted.job).toMatchObject({ status: 'done', bornDone: true, contentId: 'cid-s' });
      expect(submitted.artifacts.map((a) => a.name)).toEqual(['audio.wav', 'stems.wav']);
      expect(submitted.callback?.url).toBe(callbackUrl);
      expect(withoutUse(submitted)).toEqual(withoutUse(await service.find(submitted.job.id)));
    }
  });

  it('find(id) keeps a view while nothing is written (SQLite only) and reads again after any write, a rolled-back one included', async () => {
    const { job } = await service.submit({ url: 'https://m.example/a' }, 'req-1');
    const first = (await service.find(job.id))!;
    const again = (await service.find(job.id))!;
    expect(again).toEqual(first);
    if (kind === 'sqlite') {
      // Kept: the same object, frozen since every caller shares it.
      expect(again).toBe(first);
      expect(Object.isFrozen(first) && Object.isFrozen(first.job) && Object.isFrozen(first.artifacts)).toBe(true);
    } else {
      // PostgreSQL's other nodes write unseen: every find reads.
      expect(again).not.toBe(first);
    }

    // An autocommit write.
    const lease = { owner: 'node-a', now: 2000, leaseMs: 30_000 };
    await claimNextJob(database, lease);
    expect((await service.find(job.id))!.job.status).toBe('running');
    await renewLeases(database, [job.id], lease, new Map([[job.id, { bytes: 10, totalBytes: 100 }]]));
    expect((await service.find(job.id))!.job.progressBytes).toBe(10);

    // A transaction that wrote, read from inside it, then rolled back.
    await expect(
      database.transaction(async (q) => {
        await renewLeases(q, [job.id], lease, new Map([[job.id, { bytes: 50, totalBytes: 100 }]]));
        if (kind === 'sqlite') expect((await service.find(job.id))!.job.progressBytes).toBe(50);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect((await service.find(job.id))!.job.progressBytes).toBe(10);

    // A committed transaction, writing to the job and to the artifacts joined to it.
    await database.transaction(async (q) => {
      await markDone(q, job.id, 'node-a', 'cid-a', 3000);
      await recordCacheEntry(q, wavEntry('cid-a'), 3000);
    });
    const done = (await service.find(job.id))!;
    expect(done.job.status).toBe('done');
    expect(done.artifacts.map((a) => a.name)).toEqual(['audio.wav']);
    // Kept again once nothing more is written.
    if (kind === 'sqlite') expect(await service.find(job.id)).toBe(done);
  });
});

describe('the job view on sqlite, written by another connection', () => {
  let database: TestDatabase;
  afterEach(async () => {
    await database.close();
  });

  it('find(id) sees a write made to the file by another connection (an operator) within a second or so', async () => {
    database = await openTestDatabase('sqlite');
    const service = serviceOn(database);
    const { job } = await service.submit({ url: 'https://m.example/a' }, 'req-1');
    const first = (await service.find(job.id))!;
    expect(await service.find(job.id)).toBe(first);
    const operator = new BetterSqlite3(database.location);
    try {
      operator.prepare('update jobs set attempts = 7 where id = ?').run(job.id);
    } finally {
      operator.close();
    }
    await expect.poll(async () => (await service.find(job.id))!.job.attempts, { timeout: 5000, interval: 100 }).toBe(7);
  });
});
