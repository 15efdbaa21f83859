import { eq, inArray } from 'drizzle-orm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../../src/db/database.js';
import { httpStatusError, jobError } from '../../src/job-errors.js';
import { openPostgres } from '../../src/db/postgres.js';
import {
  activeLeaderFor,
  claimMediaDownload,
  claimNextJob,
  enqueueJob,
  followMediaDownload,
  getJobRow,
  insertJob,
  markCanceled,
  markDone,
  markFailed,
  reclaimExpiredLeases,
  releaseJob,
  renewLeases,
  requeueInterrupted,
} from '../../src/jobs/queue.js';
import { freshDatabaseUrl } from '../support/postgres.js';
import { BACKENDS, openTestDatabase } from '../support/test-database.js';

/** The job state machine on a real database of each kind. */
const LEASE_MS = 10_000;
/** Two API keys' identities (jobs.api_key_id, src/jobs/key-identity.ts). */
const KEY_A = 'key-a-identity';
const KEY_B = 'key-b-identity';

describe.each(BACKENDS)('job queue on %s', (kind) => {
  let database: Database;
  let clock: number;
  const lease = (owner: string, now = clock) => ({ owner, now, leaseMs: LEASE_MS });

  beforeEach(async () => {
    database = await openTestDatabase(kind);
    clock = 1000;
  });
  afterEach(async () => {
    await database.close();
  });

  async function queued(id: string, urlKey = `https://m.example/${id}`, apiKeyId = KEY_A) {
    return (await enqueueJob(database, { id, url: urlKey, urlKey, createdAt: clock++, apiKeyId }))!;
  }
  const get = async (id: string) => (await getJobRow(database, id))!;

  it('queues the first job of a URL as its leader and the next ones as its followers', async () => {
    expect(await queued('a')).toMatchObject({ status: 'queued', followsJobId: null });
    expect(await queued('f1', 'https://m.example/a')).toMatchObject({ status: 'queued', followsJobId: 'a' });
    expect((await activeLeaderFor(database, 'https://m.example/a', KEY_A))?.id).toBe('a');
  });

  it('claims the oldest queued job once, with a lease, never a follower', async () => {
    await queued('a');
    await queued('b');
    await queued('c', 'https://m.example/a');
    const first = await claimNextJob(database, lease('n1'));
    expect(first).toMatchObject({
      id: 'a',
      status: 'running',
      attempts: 1,
      lockOwner: 'n1',
      leaseExpiresAt: clock + LEASE_MS,
    });
    expect((await claimNextJob(database, lease('n2')))?.id).toBe('b');
    expect(await claimNextJob(database, lease('n3'))).toBeUndefined();
  });

  it('renews only the leases its node holds, and reports the ones it lost', async () => {
    await queued('a');
    await queued('b');
    await claimNextJob(database, lease('n1'));
    await claimNextJob(database, lease('n1'));
    await markCanceled(database, 'b', 1500);
    clock = 5000;
    expect(await renewLeases(database, ['a', 'b'], lease('n1'))).toEqual(new Set(['a']));
    expect((await get('a')).leaseExpiresAt).toBe(5000 + LEASE_MS);
    expect(await renewLeases(database, ['a'], lease('someone-else'))).toEqual(new Set());
  });

  it('running → done carries every follower to done with the same content; only the lease holder can end it', async () => {
    await queued('a');
    await queued('f1', 'https://m.example/a');
    await queued('f2', 'https://m.example/a');
    await claimNextJob(database, lease('n1'));
    expect(await markDone(database, 'a', 'n2', 'cid', 2000)).toBeUndefined();
    const ended = await markDone(database, 'a', 'n1', 'cid', 2000);
    expect(ended?.job).toMatchObject({ id: 'a', status: 'done', contentId: 'cid' });
    expect(ended?.followers.map((row) => row.id).sort()).toEqual(['f1', 'f2']);
    for (const id of ['a', 'f1', 'f2'])
      expect(await get(id)).toMatchObject({ status: 'done', contentId: 'cid', finishedAt: 2000 });
    // A finished job does not change again.
    expect(await markFailed(database, 'a', 'n1', jobError('internal_error'), 3000)).toBeUndefined();
    expect(await markDone(database, 'a', 'n1', 'other', 3000)).toBeUndefined();
  });

  it('running → failed carries followers to failed with the same error', async () => {
    await queued('a');
    await queued('f', 'https://m.example/a');
    await claimNextJob(database, lease('n1'));
    const error = httpStatusError(404, 'ERROR: HTTP Error 404: Not Found');
    const ended = await markFailed(database, 'a', 'n1', error, 2000);
    expect(ended?.followers.map((row) => row.id)).toEqual(['f']);
    for (const id of ['a', 'f']) {
      expect(await get(id)).toMatchObject({
        status: 'failed',
        errorCode: 'http_not_found',
        errorMessage: 'Nothing was found at the source (HTTP 404).',
        errorDetail: 'ERROR: HTTP Error 404: Not Found',
        errorHttpStatus: 404,
      });
    }
  });

  it('a follower canceled while queued does not end again with its leader', async () => {
    await queued('a');
    await queued('f1', 'https://m.example/a');
    await queued('f2', 'https://m.example/a');
    await claimNextJob(database, lease('n1'));
    await markCanceled(database, 'f1', 1500);
    const ended = await markDone(database, 'a', 'n1', 'cid', 2000);
    expect(ended?.followers.map((row) => row.id)).toEqual(['f2']);
    expect(await get('f1')).toMatchObject({ status: 'canceled' });
  });

  it('cancel of a leader hands its followers to the oldest of them', async () => {
    await queued('a');
    await queued('f1', 'https://m.example/a');
    await queued('f2', 'https://m.example/a');
    await claimNextJob(database, lease('n1'));
    const change = await markCanceled(database, 'a', 2000);
    expect(change?.before.status).toBe('running');
    expect(change?.after).toMatchObject({ status: 'canceled', finishedAt: 2000, lockOwner: null });
    expect(await get('f1')).toMatchObject({ status: 'queued', followsJobId: null });
    expect(await get('f2')).toMatchObject({ status: 'queued', followsJobId: 'f1' });
    expect((await activeLeaderFor(database, 'https://m.example/a', KEY_A))?.id).toBe('f1');
    expect((await claimNextJob(database, lease('n1')))?.id).toBe('f1');
    // A canceled job whose worker still reports done changes nothing.
    expect(await markDone(database, 'a', 'n1', 'cid', 3000)).toBeUndefined();
    expect((await get('a')).status).toBe('canceled');
  });

  it('a done job cannot be canceled', async () => {
    await queued('a');
    await claimNextJob(database, lease('n1'));
    await markDone(database, 'a', 'n1', 'cid', 2000);
    expect((await markCanceled(database, 'a', 3000))?.after.status).toBe('done');
  });

  it('an interrupted job goes back to the queue without spending an attempt', async () => {
    await queued('a');
    await claimNextJob(database, lease('n1'));
    await requeueInterrupted(database, 'a', 'n1');
    expect(await get('a')).toMatchObject({
      status: 'queued',
      attempts: 0,
      lockOwner: null,
      leaseExpiresAt: null,
      startedAt: null,
    });
  });

  it('a job whose runner threw goes back to the queue, its attempt spent, and fails once they are all spent', async () => {
    await queued('a');
    await queued('fa', 'https://m.example/a');
    for (let attempt = 1; attempt <= 3; attempt++) {
      expect(await claimNextJob(database, lease('n1'))).toMatchObject({ id: 'a', attempts: attempt });
      const ended = await releaseJob(database, 'a', 'n1', 3, clock);
      expect(ended === undefined, `attempt ${attempt}`).toBe(attempt < 3);
    }
    const exhausted = {
      errorCode: 'attempts_exhausted',
      errorMessage: 'The fetch was interrupted 3 times and is not tried again.',
    };
    expect(await get('a')).toMatchObject({ status: 'failed', ...exhausted, lockOwner: null });
    expect(await get('fa')).toMatchObject({ status: 'failed', ...exhausted });
  });

  it('takes back running jobs whose lease ran out, and only those; fails those out of attempts', async () => {
    await queued('live');
    await queued('dead');
    await queued('spent');
    await queued('fspent', 'https://m.example/spent');
    await claimNextJob(database, lease('n1'));
    await claimNextJob(database, lease('n2'));
    await claimNextJob(database, lease('n2'));
    await database.db.update(database.t.jobs).set({ attempts: 3 }).where(eq(database.t.jobs.id, 'spent'));
    // n1 keeps renewing; n2 is dead.
    const claimedAt = clock;
    clock = claimedAt + LEASE_MS - 1;
    await renewLeases(database, ['live'], lease('n1'));
    clock = claimedAt + LEASE_MS + 1;
    const { requeued, failed } = await reclaimExpiredLeases(database, 3, clock);
    expect(requeued).toBe(1);
    expect(failed.map((ended) => [ended.job.id, ended.followers.map((row) => row.id)])).toEqual([
      ['spent', ['fspent']],
    ]);
    expect(await get('live')).toMatchObject({ status: 'running', lockOwner: 'n1' });
    expect(await get('dead')).toMatchObject({ status: 'queued', lockOwner: null, attempts: 1 });
    expect(await get('spent')).toMatchObject({ status: 'failed', errorCode: 'attempts_exhausted' });
    // The dead node cannot end the job it lost; the next claim counts a second attempt.
    expect(await markDone(database, 'dead', 'n2', 'cid', clock)).toBeUndefined();
    expect(await claimNextJob(database, lease('n1'))).toMatchObject({ id: 'dead', attempts: 2, lockOwner: 'n1' });
  });

  it('one download per media: a second running job of the same media follows the first, with its own followers', async () => {
    await queued('a', 'https://youtu.be/x');
    await queued('b', 'https://www.youtube.com/watch?v=x');
    await queued('fb', 'https://www.youtube.com/watch?v=x');
    await claimNextJob(database, lease('n1'));
    await claimNextJob(database, lease('n2'));
    expect(await claimMediaDownload(database, { id: 'a', apiKeyId: KEY_A }, 'n1', 'youtube:www.youtube.com:x')).toBe(
      'claimed',
    );
    const second = await claimMediaDownload(database, { id: 'b', apiKeyId: KEY_A }, 'n2', 'youtube:www.youtube.com:x');
    expect(second).toEqual({ followId: 'a' });
    expect(await followMediaDownload(database, 'b', 'n2', 'a')).toBe(true);
    expect(await get('b')).toMatchObject({ status: 'queued', followsJobId: 'a', lockOwner: null });
    expect(await get('fb')).toMatchObject({ status: 'queued', followsJobId: 'a' });
    const ended = await markDone(database, 'a', 'n1', 'cid', 2000);
    expect(ended?.followers.map((row) => row.id).sort()).toEqual(['b', 'fb']);
    // Once it ended, the media is free again.
    await queued('c', 'https://m.youtube.com/watch?v=x');
    await claimNextJob(database, lease('n1'));
    expect(await claimMediaDownload(database, { id: 'c', apiKeyId: KEY_A }, 'n1', 'youtube:www.youtube.com:x')).toBe(
      'claimed',
    );
  });

  it("single flight stays within a key: another key's job of the same URL leads its own, and is claimed on its key's turn", async () => {
    await queued('a');
    await queued('a2');
    await queued('a3');
    await queued('fa', 'https://m.example/a3');
    await queued('b', 'https://m.example/a3', KEY_B);
    // The control: the same key's second job of the URL follows; the other key's leads.
    expect(await get('fa')).toMatchObject({ followsJobId: 'a3' });
    expect(await get('b')).toMatchObject({ followsJobId: null });
    expect((await activeLeaderFor(database, 'https://m.example/a3', KEY_A))?.id).toBe('a3');
    expect((await activeLeaderFor(database, 'https://m.example/a3', KEY_B))?.id).toBe('b');
    // Key A's oldest, then key B's turn, though key A queued three before it.
    expect((await claimNextJob(database, lease('n1')))?.id).toBe('a');
    expect((await claimNextJob(database, lease('n1')))?.id).toBe('b');
    // Key B's job ends with its own outcome; key A's follower waits for its own leader.
    const error = jobError('key_storage_quota_exceeded', { values: { limit: 1, hours: 24 } });
    expect((await markFailed(database, 'b', 'n1', error, 2000))?.followers).toEqual([]);
    expect(await get('fa')).toMatchObject({ status: 'queued', followsJobId: 'a3' });
    // A third key's submission while both lead: it leads too.
    expect(await queued('c', 'https://m.example/a3', 'key-c-identity')).toMatchObject({ followsJobId: null });
  });

  it("one download per media within a key: another key's running job of the same media downloads it too", async () => {
    const media = 'youtube:www.youtube.com:x';
    await queued('a', 'https://youtu.be/x');
    await queued('b', 'https://www.youtube.com/watch?v=x', KEY_B);
    await queued('a2', 'https://m.youtube.com/watch?v=x');
    for (const owner of ['n1', 'n2', 'n3']) await claimNextJob(database, lease(owner));
    expect(await claimMediaDownload(database, { id: 'a', apiKeyId: KEY_A }, 'n1', media)).toBe('claimed');
    expect(await claimMediaDownload(database, { id: 'b', apiKeyId: KEY_B }, 'n2', media)).toBe('claimed');
    // The control: the same key's second job of the media is told to follow the first.
    expect(await claimMediaDownload(database, { id: 'a2', apiKeyId: KEY_A }, 'n3', media)).toEqual({ followId: 'a' });
    // Told to follow another key's job anyway, a job does not.
    expect(await followMediaDownload(database, 'b', 'n2', 'a')).toBe(false);
    expect(await get('b')).toMatchObject({ status: 'running', followsJobId: null, mediaKey: media });
    expect(await followMediaDownload(database, 'a2', 'n3', 'a')).toBe(true);
    const ended = await markDone(database, 'a', 'n1', 'cid', 2000);
    expect(ended?.followers.map((row) => row.id)).toEqual(['a2']);
    expect(await get('b')).toMatchObject({ status: 'running' });
  });

  it("cancel hands followers on key by key, and to a job of the key that already leads the heir's URL", async () => {
    await queued('a');
    await queued('f1', 'https://m.example/a');
    // Followers of another key than their leader's, as queued before single flight kept within a key.
    for (const id of ['b1', 'b2'])
      await insertJob(database, {
        id,
        url: 'https://m.example/a',
        urlKey: 'https://m.example/a',
        createdAt: clock++,
        status: 'queued',
        followsJobId: 'a',
        apiKeyId: KEY_B,
      });
    await queued('f2', 'https://m.example/a');
    await markCanceled(database, 'a', 2000);
    expect(await get('f1')).toMatchObject({ status: 'queued', followsJobId: null });
    expect(await get('f2')).toMatchObject({ followsJobId: 'f1' });
    expect(await get('b1')).toMatchObject({ status: 'queued', followsJobId: null });
    expect(await get('b2')).toMatchObject({ followsJobId: 'b1' });

    // A job that followed through another URL of the same media, whose URL has since got a leader of its key.
    await queued('m', 'https://youtu.be/x');
    await queued('x', 'https://www.youtube.com/watch?v=x');
    await queued('fx', 'https://www.youtube.com/watch?v=x');
    await database.db
      .update(database.t.jobs)
      .set({ followsJobId: 'm' })
      .where(inArray(database.t.jobs.id, ['x', 'fx']));
    await queued('y', 'https://www.youtube.com/watch?v=x');
    expect(await get('y')).toMatchObject({ followsJobId: null });
    await markCanceled(database, 'm', 3000);
    expect(await get('x')).toMatchObject({ status: 'queued', followsJobId: 'y' });
    expect(await get('fx')).toMatchObject({ status: 'queued', followsJobId: 'y' });
  });
});

describe('job queue on postgres, many nodes at once', () => {
  it('nodes claiming at once on their own connections take each job exactly once', async () => {
    const url = await freshDatabaseUrl();
    const nodes = await Promise.all(
      [1, 2, 3].map((n) => openPostgres(url, { poolSize: 3, applicationName: `node${n}` })),
    );
    try {
      // Queued through every node, so that each has a connection open before they race: a claim
      // takes a single round trip, and a node still connecting could find all 30 already taken.
      for (let i = 0; i < 30; i++)
        await enqueueJob(nodes[i % 3]!, {
          id: `j${i}`,
          url: `https://m.example/${i}`,
          urlKey: `https://m.example/${i}`,
          createdAt: i,
        });
      const claimed = await Promise.all(
        nodes.map(async (node, n) => {
          const mine: string[] = [];
          for (;;) {
            const job = await claimNextJob(node, { owner: `n${n}`, now: 100, leaseMs: LEASE_MS });
            if (!job) return mine;
            mine.push(job.id);
          }
        }),
      );
      const all = claimed.flat();
      expect(all.length).toBe(30);
      expect(new Set(all).size).toBe(30);
      // Each node got some: they really claimed side by side.
      expect(claimed.filter((ids) => ids.length > 0).length).toBeGreaterThan(1);
    } finally {
      await Promise.all(nodes.map((node) => node.close()));
    }
  });

  it('the same URL submitted through several nodes at once gets one leader', async () => {
    const url = await freshDatabaseUrl();
    const nodes = await Promise.all([1, 2, 3].map(() => openPostgres(url, { poolSize: 3 })));
    try {
      const jobs = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          enqueueJob(nodes[i % 3]!, {
            id: `s${i}`,
            url: 'https://m.example/same',
            urlKey: 'https://m.example/same',
            createdAt: i,
          }),
        ),
      );
      const leaders = jobs.filter((job) => job?.followsJobId === null);
      expect(leaders).toHaveLength(1);
      expect(jobs.every((job) => job && (job.followsJobId === null || job.followsJobId === leaders[0]!.id))).toBe(true);
    } finally {
      await Promise.all(nodes.map((node) => node.close()));
    }
  });
});
