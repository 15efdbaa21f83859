import { eq, inArray, like, sql } from 'drizzle-orm';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database, JobRow, NewJobRow } from '../../src/db/database.js';
import { createLogger } from '../../src/logger.js';
import { jobError } from '../../src/job-errors.js';
import { toJobRecord } from '../../src/http/job-record.js';
import { createAdmission } from '../../src/jobs/admission.js';
import {
  ENTRIES_PER_HANDING,
  type CollectionEntry,
  type ListCollection,
  type ListingEnd,
} from '../../src/jobs/collection/listing.js';
import { createCollectionRunner, type EntryTokens } from '../../src/jobs/collection/run.js';
import { entryTokenTaker } from '../../src/http/key-admission.js';
import { createTokenBucketLimiter } from '../../src/http/rate-limit.js';
import { createJobService, type JobService } from '../../src/jobs/job-service.js';
import { claimEndedParents, endListing } from '../../src/jobs/collection/parent.js';
import {
  CHILDREN_PER_CANCEL,
  claimNextJob,
  getJobRow,
  markDone,
  markFailed,
  reclaimExpiredLeases,
  releaseJob,
  type Ended,
} from '../../src/jobs/queue.js';
import type { SubmitDeps } from '../../src/jobs/submit.js';
import { JOB_CANCELED_CHANNEL } from '../../src/jobs/worker-pool.js';
import { sourceDestinationCheck } from '../../src/policy/source-url.js';
import { setAlias } from '../../src/store/aliases.js';
import { recordCacheEntry } from '../../src/store/cache-entries.js';
import { callbackRecorder, deliveryForJob } from '../../src/webhooks/deliveries.js';
import { BACKENDS, openTestDatabase, wavEntry } from '../support/test-database.js';
import { until } from '../support/until.js';

/**
 * A collection's parent job on a real database of each kind, listed by a stand-in ListCollection
 * (the real one runs yt-dlp): its entries go through the real submission policy (names resolve
 * through a table here, nothing connects), its items and counts are exact, the trigger ends the
 * parent with its last child, and a cancel takes its active children with it.
 */
const STORED = 'https://m.example/stored';
const OWNER = 'node-a';
const log = createLogger('silent');
const ADDRESSES: Record<string, string> = { 'm.example': '93.184.215.14', 'refused.example': '10.0.0.1' };

const entry = (index: number, url: string, nested = false): CollectionEntry => ({
  index,
  url,
  title: `Entry ${index}`,
  nested,
});

/**
 * Lists `entries` (at most maxItems), handed on `perCall` at a time (default: as many as one call
 * takes, as when a feed's lines come at once) and each call awaited; `hold` keeps the listing
 * open until aborted.
 */
function listerOf(
  entries: CollectionEntry[],
  options: { end?: Partial<ListingEnd>; hold?: boolean; perCall?: number } = {},
) {
  let held: () => void = () => {};
  const holding = new Promise<void>((resolve) => (held = resolve));
  const perCall = options.perCall ?? ENTRIES_PER_HANDING;
  const list: ListCollection = async (request, onEntries) => {
    const listed = entries.slice(0, request.maxItems);
    for (let at = 0; at < listed.length; at += perCall) {
      if (request.signal.aborted) break;
      await onEntries(listed.slice(at, at + perCall));
    }
    if (options.hold && !request.signal.aborted) {
      const aborted = new Promise((resolve) => request.signal.addEventListener('abort', resolve, { once: true }));
      held();
      await aborted;
    }
    return {
      title: 'A Feed',
      truncated: entries.length > request.maxItems,
      error: request.signal.aborted ? jobError('internal_error') : null,
      ...options.end,
    };
  };
  return { list, holding };
}

describe.each(BACKENDS)('collections on %s', (kind) => {
  let database: Database;
  let ids: number;
  let ended: Ended[];
  let submit: SubmitDeps;
  let service: JobService;
  let resolved: string[];

  beforeEach(async () => {
    database = await openTestDatabase(kind);
    ids = 0;
    ended = [];
    resolved = [];
    await recordCacheEntry(database, wavEntry('cid-stored'), 1);
    await setAlias(database, 'url', STORED, 'cid-stored', 1);
    submit = {
      database,
      now: () => 1000 + ids,
      newJobId: () => `job-${++ids}`,
      recordCallback: callbackRecorder(() => `delivery-${ids}`),
      checkDestination: sourceDestinationCheck({
        resolve: (host) => {
          resolved.push(host);
          const address = ADDRESSES[host];
          if (!address) return Promise.reject(new Error(`no such name in the test: ${host}`));
          return Promise.resolve([address]);
        },
        allowHosts: [],
      }),
      contentPresent: (cid) => cid === 'cid-stored',
      admitJob: createAdmission({ database, maxQueuedJobs: 100, confinementOk: () => true }),
      onQueued: () => {},
    };
    service = createJobService({ ...submit, playlistMaxItems: 5, onEnded: (e) => ended.push(e) });
  });
  afterEach(async () => {
    await database.close();
  });

  const lease = () => ({ owner: OWNER, now: 2000, leaseMs: 60_000 });
  const row = async (id: string) => (await getJobRow(database, id))!;
  const statusShown = (job: JobRow) =>
    toJobRecord(job, { artifacts: [], sign: () => ({ query: '', expiresAt: 0 }) }).status;

  /** Submits a collection, claims it, and runs its listing to its end with `list`. */
  async function listed(list: ListCollection, maxItems?: number, signal = new AbortController().signal) {
    const { job } = await service.submit(
      { url: 'https://m.example/feed.xml', playlist: { maxItems }, callbackUrl: 'https://m.example/hook' },
      'req-1',
    );
    const claimed = await claimNextJob(database, lease());
    expect(claimed?.id).toBe(job.id);
    expect(statusShown(claimed!)).toBe('expanding');
    const run = createCollectionRunner({ listCollection: list, submit, onJobEnded: (e) => ended.push(e) });
    const result = await run(claimed!, { signal, log, owner: OWNER });
    return { parent: await row(job.id), result };
  }

  it.each([1, ENTRIES_PER_HANDING])(
    'makes one item per entry: born done, shared by duplicates, refused by the policy, nested refused (%i a call)',
    async (perCall) => {
      const { list } = listerOf(
        [
          entry(1, STORED),
          entry(2, 'https://m.example/a.m4a'),
          entry(3, 'https://M.EXAMPLE/a.m4a'),
          entry(4, 'http://169.254.169.254/x'),
          entry(5, 'file:///etc/passwd'),
          entry(6, 'https://m.example/nested.xml', true),
          entry(7, 'https://refused.example/b.m4a'),
        ],
        { perCall },
      );
      const { parent, result } = await listed(list, 10);
      expect(parent.kind).toBe('collection');
      expect(parent.maxItems).toBe(5); // PLAYLIST_MAX_ITEMS wins over the request's higher one
      expect(parent.status).toBe('listed');
      expect(statusShown(parent)).toBe('running');
      expect(result).toBeUndefined();
      expect(parent).toMatchObject({
        collectionTitle: 'A Feed',
        truncated: true,
        entriesFound: 5,
        children: 2,
        childrenDone: 1,
        itemsRefused: 2,
      });
      // 169.254.169.254 refused at policy without a look-up; only m.example was resolved.
      expect(new Set(resolved)).toEqual(new Set(['m.example']));

      const { items, nextAfter } = await service.items(parent.id, { after: 0, limit: 100 });
      expect(nextAfter).toBeNull();
      const outcomes = items.map((item) =>
        'job' in item ? [item.index, item.job.job.id, item.job.job.status] : [item.index, item.problem.code],
      );
      const [bornDone, child] = [items[0]!, items[1]!].map((item) => ('job' in item ? item.job.job : undefined));
      expect(bornDone).toMatchObject({ bornDone: true, parentId: parent.id, apiKeyId: '' });
      expect(child).toMatchObject({ status: 'queued', parentId: parent.id, requestId: 'req-1' });
      expect(outcomes).toEqual([
        [1, bornDone!.id, 'done'],
        [2, child!.id, 'queued'],
        [3, child!.id, 'queued'],
        [4, 'address_link_local'],
        [5, 'url_scheme_not_allowed'],
      ]);
      // The born-done child's end was reported, as a submission's is.
      expect(ended.map((e) => e.job.id)).toEqual([bornDone!.id]);

      // Paging: two at a time, after the last index seen.
      const first = await service.items(parent.id, { after: 0, limit: 2 });
      expect(first.items.map((item) => item.index)).toEqual([1, 2]);
      expect(first.nextAfter).toBe(2);
      const second = await service.items(parent.id, { after: 2, limit: 2 });
      expect(second.items.map((item) => item.index)).toEqual([3, 4]);

      // The last child's end ends the parent, in its own transaction; the parent's callback is then due.
      expect((await deliveryForJob(database, parent.id))?.status).toBe('pending');
      const claimedChild = await claimNextJob(database, lease());
      expect(claimedChild?.id).toBe(child!.id);
      await database.transaction((q) => markDone(q, child!.id, OWNER, 'cid-a', 5000));
      expect(await row(parent.id)).toMatchObject({ status: 'done', finishedAt: 5000, childrenDone: 2, children: 2 });
    },
  );

  it('nests no collection and refuses entries past the queue limit as items', async () => {
    submit.admitJob = createAdmission({ database, maxQueuedJobs: 1, confinementOk: () => true });
    service = createJobService({ ...submit, playlistMaxItems: 5, onEnded: () => {} });
    // The parent itself is the one queued job until it is claimed; then one child fits.
    const { list } = listerOf([
      entry(1, 'https://m.example/nested.xml', true),
      entry(2, 'https://m.example/a.m4a'),
      entry(3, 'https://m.example/b.m4a'),
    ]);
    const { parent } = await listed(list);
    const { items } = await service.items(parent.id, { after: 0, limit: 10 });
    expect(items.map((item) => ('problem' in item ? item.problem.code : 'accepted'))).toEqual([
      'collection_nested',
      'accepted',
      'queue_full',
    ]);
    expect(parent).toMatchObject({ entriesFound: 3, children: 1, itemsRefused: 2, truncated: false });
  });

  it("takes a token of its key's rate for each entry: waits for it within the listing's time, refused past it", async () => {
    let t = 1_000_000;
    submit.now = () => t;
    const limiter = createTokenBucketLimiter({ perMinute: 60, burst: 3, now: () => t });
    const slept: number[] = [];
    const entryTokens: EntryTokens = {
      take: entryTokenTaker(limiter, {
        now: () => t,
        sleep: (ms) => {
          slept.push(ms);
          t += ms;
          return Promise.resolve();
        },
      }),
      maxWaitMs: 1500,
    };
    const { job } = await service.submit({ url: 'https://m.example/feed.xml', playlist: {}, apiKeyId: 'key-a' }, 'r');
    const claimed = (await claimNextJob(database, lease()))!;
    expect(claimed.id).toBe(job.id);
    const entries = [1, 2, 3, 4, 5].map((n) => entry(n, `https://m.example/${n}.m4a`));
    const run = createCollectionRunner({
      listCollection: listerOf(entries).list,
      submit,
      onJobEnded: () => {},
      entryTokens,
    });
    await run(claimed, { signal: new AbortController().signal, log, owner: OWNER });
    const { items } = await service.items(job.id, { after: 0, limit: 10 });
    // Three from the bucket, the fourth a second later, the fifth would pass the 1.5 s wait.
    expect(items.map((item) => ('problem' in item ? item.problem.code : 'accepted'))).toEqual([
      'accepted',
      'accepted',
      'accepted',
      'accepted',
      'rate_limited',
    ]);
    expect(slept).toEqual([1000]);
    expect(await row(job.id)).toMatchObject({ entriesFound: 5, children: 4, itemsRefused: 1 });
    // The key's requests find the bucket spent by its entries.
    expect(limiter.take('key-a').allowed).toBe(false);
    expect(limiter.take('key-b').allowed).toBe(true);
  });

  it('a cancel while an entry waits for its token records nothing more', async () => {
    const limiter = createTokenBucketLimiter({ perMinute: 1, burst: 1, now: () => 0 });
    let waited: () => void = () => {};
    const waiting = new Promise<void>((resolve) => (waited = resolve));
    const entryTokens: EntryTokens = {
      take: entryTokenTaker(limiter, {
        now: () => 0,
        sleep: (_ms, signal) => {
          waited();
          return new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
        },
      }),
      maxWaitMs: 600_000,
    };
    const { job } = await service.submit({ url: 'https://m.example/feed.xml', playlist: {}, apiKeyId: 'key-a' }, 'r');
    const claimed = (await claimNextJob(database, lease()))!;
    const entries = [1, 2].map((n) => entry(n, `https://m.example/${n}.m4a`));
    const run = createCollectionRunner({
      // Handed on one by one, as a listing hands its first entry: the first is recorded, the second waits.
      listCollection: listerOf(entries, { perCall: 1 }).list,
      submit,
      onJobEnded: () => {},
      entryTokens,
    });
    const controller = new AbortController();
    const running = run(claimed, { signal: controller.signal, log, owner: OWNER });
    await waiting;
    controller.abort('canceled');
    expect(await running).toBeUndefined();
    const { items } = await service.items(job.id, { after: 0, limit: 10 });
    expect(items.map((item) => item.index)).toEqual([1]);
  });

  it('ends done at once when every child has ended by the listing end, and failed when nothing was listed', async () => {
    const { parent } = await listed(listerOf([entry(1, STORED)]).list);
    expect(parent).toMatchObject({ status: 'done', children: 1, childrenDone: 1 });
    expect(parent.finishedAt).not.toBeNull();

    const failedListing = listerOf([], { end: { error: jobError('fetch_timeout', { values: { limit: 1 } }) } });
    const { parent: failed, result } = await listed(failedListing.list);
    expect(failed).toMatchObject({ status: 'failed', errorCode: 'fetch_timeout', entriesFound: 0 });
    expect(result?.job.id).toBe(failed.id);
    // Control: a listing that fails after an entry keeps it and ends done, the error shown beside.
    const late = listerOf([entry(1, STORED)], {
      end: { error: jobError('fetch_timeout', { values: { limit: 1 } }) },
    });
    const { parent: partial } = await listed(late.list);
    expect(partial).toMatchObject({ status: 'done', errorCode: 'fetch_timeout', entriesFound: 1 });
    const record = toJobRecord(partial, { artifacts: [], sign: () => ({ query: '', expiresAt: 0 }) });
    expect(record.error).toBeNull();
    expect(record.collection?.listing_error?.code).toBe('fetch_timeout');
  });

  it('counts children that end at the same moment once each, and ends the parent once', async () => {
    const entries = [1, 2, 3, 4].map((n) => entry(n, `https://m.example/${n}.m4a`));
    const { parent } = await listed(listerOf(entries).list);
    expect(parent).toMatchObject({ status: 'listed', children: 4 });
    const children = [];
    for (let n = 0; n < 4; n++) children.push((await claimNextJob(database, lease()))!);
    await Promise.all(
      children.map((child, n) =>
        database.transaction((q) =>
          n % 2 === 0
            ? markDone(q, child.id, OWNER, `cid-${n}`, 6000 + n)
            : markFailed(q, child.id, OWNER, jobError('http_not_found', { values: { status: 404 } }), 6000 + n),
        ),
      ),
    );
    expect(await row(parent.id)).toMatchObject({
      status: 'done',
      children: 4,
      childrenDone: 2,
      childrenFailed: 2,
      childrenCanceled: 0,
    });
  });

  it("takes turns with another key's job: a collection's children do not go first because they are older", async () => {
    const entries = [1, 2, 3].map((n) => entry(n, `https://m.example/${n}.m4a`));
    const { parent } = await listed(listerOf(entries).list);
    expect(parent.children).toBe(3);
    const other = await service.submit({ url: 'https://m.example/other.m4a', apiKeyId: 'key-b' }, 'req-b');
    const claims = [];
    for (let n = 0; n < 2; n++) claims.push((await claimNextJob(database, lease()))!);
    // Key B's job first (the collection's key had the last turn), then one of the collection's children.
    expect(claims.map((job) => job.id)).toEqual([other.job.id, expect.any(String)]);
    expect(claims[1]!.parentId).toBe(parent.id);
    // The child is older than key B's job: age alone would have taken it first.
    expect(claims[1]!.createdAt).toBeLessThan(other.job.createdAt);
  });

  it('cancel stops the listing and cancels queued and running children; done children stay done', async () => {
    const stopped: string[] = [];
    const unlisten = await database.listen(JOB_CANCELED_CHANNEL, (id) => stopped.push(id));
    const entries = [entry(1, STORED), entry(2, 'https://m.example/a.m4a'), entry(3, 'https://m.example/b.m4a')];
    const { list, holding } = listerOf(entries, { hold: true });
    const { job } = await service.submit({ url: 'https://m.example/feed.xml', playlist: {} }, 'req-2');
    const claimed = (await claimNextJob(database, lease()))!;
    const controller = new AbortController();
    const run = createCollectionRunner({ listCollection: list, submit, onJobEnded: () => {} });
    const listing = run(claimed, { signal: controller.signal, log, owner: OWNER });
    await holding;
    const running = (await claimNextJob(database, lease()))!;
    expect(running.parentId).toBe(job.id);
    const canceled = await service.cancel(job.id);
    // The node listing it is told to stop, and so is the node running its running child.
    await until('both told to stop', () => (stopped.length === 2 ? true : undefined));
    expect(stopped).toEqual([job.id, running.id]);
    controller.abort('canceled');
    expect(await listing).toBeUndefined();
    await unlisten();
    expect(canceled).toMatchObject({ status: 'canceled', children: 3, childrenDone: 1, childrenCanceled: 2 });
    expect(await row(job.id)).toMatchObject({ status: 'canceled', finishedAt: canceled.finishedAt });
    const { items } = await service.items(job.id, { after: 0, limit: 10 });
    expect(items.map((item) => ('job' in item ? item.job.job.status : 'refused'))).toEqual([
      'done',
      'canceled',
      'canceled',
    ]);
  });
  /** A listing that hands on `entries` and then throws, as a crashing listing run does. */
  const crashingLister =
    (entries: CollectionEntry[]): ListCollection =>
    async (_request, onEntries) => {
      for (const item of entries) await onEntries([item]);
      throw new Error('the listing crashed');
    };

  /** Submits a collection, claims it as `owner`, and runs `list` to its end or its throw. */
  async function runAs(list: ListCollection, owner: string, now = 2000) {
    const { job } = await service.submit({ url: 'https://m.example/feed.xml', playlist: {} }, 'req-3');
    const claimed = (await claimNextJob(database, { owner, now, leaseMs: 60_000 }))!;
    expect(claimed.id).toBe(job.id);
    const run = createCollectionRunner({ listCollection: list, submit, onJobEnded: () => {} });
    const outcome = await run(claimed, { signal: new AbortController().signal, log, owner }).catch((err: Error) => err);
    return { parentId: job.id, outcome };
  }

  const activeChildrenOf = async (parentId: string) => {
    const { jobs } = database.t;
    const rows = await database.db.select().from(jobs).where(eq(jobs.parentId, parentId));
    return rows.filter((job) => job.status === 'queued' || job.status === 'running');
  };

  it('a listing cut short by attempts_exhausted keeps its queued children and ends with them, announced once', async () => {
    const entries = [entry(1, 'https://m.example/1.m4a'), entry(2, 'https://m.example/2.m4a')];
    const { parentId, outcome } = await runAs(crashingLister(entries), OWNER);
    expect(outcome).toBeInstanceOf(Error);
    // The worker pool gives the job back; its last attempt is spent.
    const ended = await releaseJob(database, parentId, OWNER, 1, 3000);
    // Not ended: a parent never ends while a child of it is queued or running.
    expect(ended).toBeUndefined();
    const parent = await row(parentId);
    expect(parent).toMatchObject({ status: 'listed', errorCode: 'attempts_exhausted', children: 2, finishedAt: null });
    expect(toJobRecord(parent, { artifacts: [], sign: () => ({ query: '', expiresAt: 0 }) })).toMatchObject({
      status: 'running',
      error: null,
      collection: { listing_error: { code: 'attempts_exhausted' } },
    });
    const children = await activeChildrenOf(parentId);
    expect(children).toHaveLength(2);

    // The first child's end does not end it: nothing to announce.
    const [first, second] = [(await claimNextJob(database, lease()))!, (await claimNextJob(database, lease()))!];
    const firstEnd = (await database.transaction((q) => markDone(q, first.id, OWNER, 'cid-1', 4000)))!;
    expect(await claimEndedParents(database, firstEnd)).toEqual([]);
    // The last child's end does: the parent is announced by the first node that asks, and only then.
    const lastEnd = (await database.transaction((q) =>
      markFailed(q, second.id, OWNER, jobError('http_not_found', { values: { status: 404 } }), 4001),
    ))!;
    const announced = await claimEndedParents(database, lastEnd);
    expect(announced.map((job) => [job.id, job.status])).toEqual([[parentId, 'done']]);
    expect(await claimEndedParents(database, lastEnd)).toEqual([]);
    expect(await row(parentId)).toMatchObject({ status: 'done', childrenDone: 1, childrenFailed: 1, finishedAt: 4001 });
  });

  it('a listing whose lease ran out for the last time keeps its children; with no entry it fails', async () => {
    const { parentId: emptyId } = await runAs(crashingLister([]), OWNER);
    const { parentId } = await runAs(crashingLister([entry(1, 'https://m.example/1.m4a')]), OWNER);
    // Both still running under OWNER (the runner threw, nobody released them): the node died.
    const { failed } = await reclaimExpiredLeases(database, 1, 100_000);
    expect(failed.map((e) => e.job.id)).toEqual([emptyId]);
    expect(await row(emptyId)).toMatchObject({ status: 'failed', errorCode: 'attempts_exhausted', children: 0 });
    expect(await row(parentId)).toMatchObject({ status: 'listed', errorCode: 'attempts_exhausted', children: 1 });
    expect(await activeChildrenOf(parentId)).toHaveLength(1);
    // A listed parent is no one's to take back: a later sweep leaves it alone.
    expect((await reclaimExpiredLeases(database, 1, 200_000)).failed).toEqual([]);
    expect((await row(parentId)).status).toBe('listed');
  });

  it('a parent whose children all ended before its last attempt ran out is done and announced at once', async () => {
    const { parentId } = await runAs(crashingLister([entry(1, STORED)]), OWNER);
    const ended = await releaseJob(database, parentId, OWNER, 1, 3000);
    expect(ended?.job).toMatchObject({
      id: parentId,
      status: 'done',
      errorCode: 'attempts_exhausted',
      lockOwner: null,
    });
    expect(await activeChildrenOf(parentId)).toEqual([]);
  });

  it('a listing taken over by another node queues no entry twice and keeps its counts exact', async () => {
    const urls = [1, 2, 3].map((n) => `https://m.example/${n}.m4a`);
    // Node A lists two entries (one born done) and dies holding the lease.
    const { list: partial, holding } = listerOf([entry(1, urls[0]!), entry(2, STORED)], { hold: true });
    const { job } = await service.submit({ url: 'https://m.example/feed.xml', playlist: {} }, 'req-4');
    const claimedA = (await claimNextJob(database, { owner: 'node-a', now: 2000, leaseMs: 1000 }))!;
    const runA = createCollectionRunner({ listCollection: partial, submit, onJobEnded: () => {} });
    const aborted = new AbortController();
    const listingA = runA(claimedA, { signal: aborted.signal, log, owner: 'node-a' });
    await holding;
    expect((await reclaimExpiredLeases(database, 3, 10_000)).requeued).toBe(1);
    // Node B claims it and lists it all again: 1 and 2 are recorded, 3 repeats 1's URL, 4 and 5 are new.
    const claimedB = (await claimNextJob(database, { owner: 'node-b', now: 10_001, leaseMs: 60_000 }))!;
    expect(claimedB).toMatchObject({ id: job.id, attempts: 2 });
    const all = [entry(1, urls[0]!), entry(2, STORED), entry(3, urls[0]!), entry(4, urls[1]!), entry(5, urls[2]!)];
    const runB = createCollectionRunner({ listCollection: listerOf(all).list, submit, onJobEnded: () => {} });
    expect(await runB(claimedB, { signal: new AbortController().signal, log, owner: 'node-b' })).toBeUndefined();
    // Node A, still alive after all, records nothing more: the listing is no longer its own.
    aborted.abort('lost');
    expect(await listingA).toBeUndefined();

    const parent = await row(job.id);
    expect(parent).toMatchObject({
      status: 'listed',
      entriesFound: 5,
      children: 4,
      childrenDone: 1,
      itemsRefused: 0,
      lockOwner: 'collection:end-unannounced',
    });
    const { jobs } = database.t;
    const made = await database.db.select().from(jobs).where(eq(jobs.parentId, job.id));
    expect(made.map((child) => child.url).sort()).toEqual([STORED, ...urls].sort());
    const { items } = await service.items(job.id, { after: 0, limit: 10 });
    const childOf = (n: number) => {
      const item = items[n - 1]!;
      return 'job' in item ? item.job.job.id : undefined;
    };
    expect(items.map((item) => item.index)).toEqual([1, 2, 3, 4, 5]);
    expect(childOf(3)).toBe(childOf(1));
    // Every queued child ends: the parent ends with the last, its counts exact.
    for (let n = 0; n < 3; n++) {
      const child = (await claimNextJob(database, lease()))!;
      await database.transaction((q) => markDone(q, child.id, OWNER, `cid-${n}`, 20_000 + n));
    }
    expect(await claimNextJob(database, lease())).toBeUndefined();
    expect(await row(job.id)).toMatchObject({ status: 'done', children: 4, childrenDone: 4 });
  });

  it(`cancels a 500-child collection ${CHILDREN_PER_CANCEL} children to a transaction`, async () => {
    const { job } = await service.submit({ url: 'https://m.example/feed.xml', playlist: {} }, 'req-5');
    await claimNextJob(database, lease());
    const { jobs } = database.t;
    const children = Array.from({ length: 500 }, (_, n) => ({
      id: `child-${String(n).padStart(3, '0')}`,
      url: `https://m.example/${n}.m4a`,
      urlKey: `https://m.example/${n}.m4a`,
      status: 'queued' as const,
      createdAt: 3000 + n,
      apiKeyId: '',
    }));
    await database.db.insert(jobs).values(children);
    // Linked as the listing links them: the trigger counts each.
    await database.db.update(jobs).set({ parentId: job.id }).where(like(jobs.id, 'child-%'));
    await endListing(database, { id: job.id, owner: OWNER }, { title: null, truncated: false, error: null }, 3500);
    const running = [];
    for (let n = 0; n < 3; n++) running.push((await claimNextJob(database, lease()))!);
    const stopped: string[] = [];
    const unlisten = await database.listen(JOB_CANCELED_CHANNEL, (id) => stopped.push(id));

    let transactions = 0;
    const transaction = database.transaction.bind(database);
    database.transaction = (fn, options) => {
      transactions++;
      return transaction(fn, options);
    };
    const canceled = await service.cancel(job.id);
    database.transaction = transaction;

    expect(canceled).toMatchObject({ status: 'canceled', children: 500, childrenCanceled: 500 });
    expect(await activeChildrenOf(job.id)).toEqual([]);
    // The parent's own, then 500 children in three batches and the empty one that ends the loop.
    expect(transactions).toBeLessThanOrEqual(1 + Math.ceil(500 / CHILDREN_PER_CANCEL) + 1);
    // Control: each running child's node is told to stop it.
    await until('the running children told to stop', () => (stopped.length === 3 ? true : undefined));
    await unlisten();
    expect(stopped.sort()).toEqual(running.map((child) => child.id).sort());
  });
  // PostgreSQL only: SQLite runs one transaction at a time, so two ends cannot hold locks at once.
  it.runIf(kind === 'postgres')(
    'two leaders whose followers are children of each other’s collection end at once without a deadlock',
    async () => {
      const { jobs } = database.t;
      const base = { apiKeyId: '', createdAt: 1, url: 'https://m.example/x' };
      const collection = (id: string) => ({
        ...base,
        id,
        urlKey: `collection:${id}`,
        kind: 'collection' as const,
        status: 'listed' as const,
      });
      const rows: NewJobRow[] = [
        collection('p1'),
        collection('p2'),
        { ...base, id: 'l1', urlKey: 'a', status: 'running', lockOwner: OWNER, parentId: 'p1' },
        { ...base, id: 'f1', urlKey: 'a', status: 'queued', followsJobId: 'l1', parentId: 'p2' },
        { ...base, id: 'l2', urlKey: 'b', status: 'running', lockOwner: OWNER, parentId: 'p2' },
        { ...base, id: 'f2', urlKey: 'b', status: 'queued', followsJobId: 'l2', parentId: 'p1' },
      ];
      await database.db.insert(jobs).values(rows);
      const lockWaits = async () => {
        const rows = (await database.db.execute(
          sql`select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()`,
        )) as unknown as Array<{ n: number }>;
        return rows[0]!.n;
      };
      const outcome = (end: Promise<unknown>) =>
        end.then(
          () => 'ok',
          (err: Error) => String((err.cause as { code?: string } | undefined)?.code ?? err.message),
        );
      // Another transaction holds p2, so that both ends are under way before either can finish:
      // l2's end waits for p2 first, then l1's end takes p1 and waits for p2 through its follower f1.
      let release!: () => void;
      let held!: () => void;
      const holding = new Promise<void>((resolve) => (held = resolve));
      const holder = database.transaction(async (q) => {
        await q.db.select({ id: q.t.jobs.id }).from(q.t.jobs).where(eq(q.t.jobs.id, 'p2')).for('update');
        held();
        await new Promise<void>((resolve) => (release = resolve));
      });
      await holding;
      const second = outcome(database.transaction((q) => markDone(q, 'l2', OWNER, 'cid-b', 5000)));
      await until('the second end waits', async () => ((await lockWaits()) >= 1 ? true : undefined));
      const first = outcome(database.transaction((q) => markDone(q, 'l1', OWNER, 'cid-a', 5000)));
      await until('both ends wait', async () => ((await lockWaits()) >= 2 ? true : undefined));
      release();
      await holder;
      // Without one lock order, one of them fails 40P01 (deadlock detected).
      expect(await Promise.all([first, second])).toEqual(['ok', 'ok']);
      const ended = await database.db
        .select()
        .from(jobs)
        .where(inArray(jobs.id, ['l1', 'f1', 'l2', 'f2']));
      expect(ended.map((job) => job.status)).toEqual(['done', 'done', 'done', 'done']);
    },
  );
});
