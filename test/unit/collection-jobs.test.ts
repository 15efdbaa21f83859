import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database, JobRow } from '../../src/db/database.js';
import { createLogger } from '../../src/logger.js';
import { jobError } from '../../src/job-errors.js';
import { toJobRecord } from '../../src/http/job-record.js';
import { createAdmission } from '../../src/jobs/admission.js';
import type { CollectionEntry, ListCollection, ListingEnd } from '../../src/jobs/collection/listing.js';
import { createCollectionRunner } from '../../src/jobs/collection/run.js';
import { createJobService, type JobService } from '../../src/jobs/job-service.js';
import { claimNextJob, getJobRow, markDone, markFailed, type Ended } from '../../src/jobs/queue.js';
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

/** Lists `entries` (at most maxItems), each handed on and awaited; `hold` keeps the listing open until aborted. */
function listerOf(entries: CollectionEntry[], options: { end?: Partial<ListingEnd>; hold?: boolean } = {}) {
  let held: () => void = () => {};
  const holding = new Promise<void>((resolve) => (held = resolve));
  const list: ListCollection = async (request, onEntry) => {
    for (const item of entries.slice(0, request.maxItems)) {
      if (request.signal.aborted) break;
      await onEntry(item);
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

  it('makes one item per entry: born done, shared by duplicates, refused by the policy, nested refused', async () => {
    const { list } = listerOf([
      entry(1, STORED),
      entry(2, 'https://m.example/a.m4a'),
      entry(3, 'https://M.EXAMPLE/a.m4a'),
      entry(4, 'http://169.254.169.254/x'),
      entry(5, 'file:///etc/passwd'),
      entry(6, 'https://m.example/nested.xml', true),
      entry(7, 'https://refused.example/b.m4a'),
    ]);
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
  });

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
});
