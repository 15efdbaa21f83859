import { asc, eq, sql } from 'drizzle-orm';
import type { CacheEntryRow, CallbackDeliveryRow, Database, JobRow, Queryable } from '../db/database.js';
import { prepared } from '../db/prepared.js';
import { ServiceError } from '../errors.js';
import { cancelJob } from './cancel.js';
import {
  getCollectionRow,
  queueCollection,
  readItems,
  readItemsAt,
  readItemStates,
  type CollectionItemRow,
  type ItemState,
  type StoredProblem,
} from './collection/parent.js';
import { FINAL_STATUSES, getJobRow, type Ended } from './queue.js';
import { checkCallbackUrl, checkSource, queueChecked, submitJob, type SubmitDeps } from './submit.js';
import { JOB_CANCELED_CHANNEL, JOBS_QUEUED_CHANNEL } from './worker-pool.js';

/**
 * The job operations the API offers, on any node: submit (one URL or a batch), read, cancel. They
 * know nothing of HTTP. Whichever node a job reaches, its record reads the same: everything comes
 * from the database. Jobs that end here (born done, canceled) are reported to `onEnded` once.
 */
export interface JobServiceDeps extends Omit<SubmitDeps, 'onQueued'> {
  /** PLAYLIST_MAX_ITEMS: a collection lists at most this many entries, or the submission's own lower number. */
  playlistMaxItems: number;
  /** `mayHaveCallback` is false when none of these jobs was submitted with a callback_url. */
  onEnded: (ended: Ended, mayHaveCallback: boolean) => void;
}

export interface JobView {
  job: JobRow;
  /** The job it waits for, whose state it shows while it waits. */
  leader: JobRow | undefined;
  artifacts: CacheEntryRow[];
  /** Its callback's delivery, when it was submitted with a callback_url. */
  callback: CallbackDeliveryRow | undefined;
  /** When the store removed its content (src/store/evicted.ts), if it did and has not stored it again. */
  evictedAt?: number;
}

/** Opts a submission in to a collection (playlist, album, feed): a parent job with a child job per entry. */
export interface PlaylistOption {
  /** At most this many entries (PLAYLIST_MAX_ITEMS, if lower, wins). */
  maxItems?: number;
  /** Each child gets a callback of its own, to the submission's callback_url (required with it). */
  itemCallbacks?: boolean;
}

export interface Submission {
  url: string;
  playlist?: PlaylistOption;
  callbackUrl?: string;
  /** The submitting key's identity (./key-identity.ts), never the key. */
  apiKeyId?: string;
}

/** One URL of a batch: its job, or why it got none (the error a single submission would have answered). */
export type BatchItem = { url: string; job: JobRow } | { url: string; refusal: ServiceError };

/** One entry of a collection: its child job's view, or the problem that refused it. */
export type ItemView = { index: number; title: string | null; url: string } & (
  { job: JobView } | { problem: StoredProblem }
);

export interface JobService {
  /** The new job's view: a born-done one's as its transaction read it, any other's read anew. */
  submit(input: Submission, requestId: string): Promise<JobView>;
  /**
   * One job per URL, under the same rules as submit, in the order given (a URL given twice gets
   * one job that the other follows). A refused callback_url refuses the whole batch (it throws);
   * a refused URL refuses only its own item.
   */
  submitBatch(
    input: {
      urls: Array<string | { url: string; playlist?: PlaylistOption }>;
      callbackUrl?: string;
      apiKeyId?: string;
    },
    requestId: string,
  ): Promise<BatchItem[]>;
  get(id: string): Promise<JobRow>;
  cancel(id: string): Promise<JobRow>;
  /** The view of a job row already read. */
  view(job: JobRow): Promise<JobView>;
  /**
   * The view of a job by id, read in one statement (every poll of getJob reads it), as the
   * database serves such reads (Database.hotReads: kept while nothing changes, or read together
   * with the polls of other jobs made at the same time); undefined if there is no such job. May
   * be shared and frozen: not to be modified.
   */
  find(id: string): Promise<JobView | undefined>;
  /** find(), throwing job_not_found as get() does. */
  read(id: string): Promise<JobView>;
  /**
   * A page of a collection's items in playlist order, those after index `after`; `nextAfter`
   * when the page is full. Throws job_not_found, or job_not_collection for a source's job.
   */
  items(id: string, page: { after: number; limit: number }): Promise<{ items: ItemView[]; nextAfter: number | null }>;
  /** A collection's items at these indexes, as items() shows them (the event streams' item events). */
  itemsAt(id: string, indexes: number[]): Promise<ItemView[]>;
  /** Where a collection's items stand, from index `from` on (./collection/parent.ts, readItemStates). */
  itemStates(id: string, from: number): Promise<ItemState[]>;
}

/** An item whose child job is gone (never, unless an operator deleted rows). */
const missingChild: StoredProblem = { code: 'job_not_found', message: "This item's job no longer exists.", extra: {} };

const jobNotFound = () => new ServiceError('not_found', 'job_not_found', 'No job has this id.');

/**
 * How job views are read by Database.hotReads: at most 1000 kept between polls where they are
 * kept; where polls made at the same time are read together, two reads under way at once (one
 * round trip's wait overlaps the other's; see bench/api.ts), each for up to 100 jobs.
 */
const HOT_VIEWS = { kept: 1000, together: { concurrency: 2, maxKeys: 100 } };

/** URLs of a batch whose destinations are checked at once (each check may wait on DNS). */
const BATCH_CHECK_CONCURRENCY = 8;

export function createJobService(deps: JobServiceDeps): JobService {
  const database: Database = deps.database;
  const notifyQuietly = (channel: string, payload: string) => database.notify(channel, payload).catch(() => {});
  const notifyQueued = () => void notifyQuietly(JOBS_QUEUED_CHANNEL, '');
  const maxItemsOf = (playlist: PlaylistOption) => Math.min(playlist.maxItems ?? Infinity, deps.playlistMaxItems);
  const reportBornDone = (job: JobRow, withCallback: boolean) => {
    if (job.bornDone) deps.onEnded({ job, followers: [] }, withCallback);
  };
  async function view(row: JobRow): Promise<JobView> {
    let job = row;
    let leader = job.followsJobId && job.status === 'queued' ? await getJobRow(database, job.followsJobId) : undefined;
    if (leader && FINAL_STATUSES.has(leader.status)) {
      // The leader's end and its followers' commit together, so the row read before it was stale.
      job = (await getJobRow(database, job.id)) ?? job;
      leader = undefined;
    }
    // The row as read, with what the database holds of its artifacts, callback and eviction now.
    const current = await readJobView(database, job.id);
    return {
      job,
      leader,
      artifacts: current?.artifacts ?? [],
      callback: current?.callback,
      evictedAt: current?.evictedAt,
    };
  }
  // A follower shows its leader while it waits: the rare case, left to view().
  const withLeader = (found: JobView) =>
    found.job.followsJobId && found.job.status === 'queued' ? view(found.job) : found;
  const find = database.hotReads(
    {
      one: async (id) => {
        const found = await readJobView(database, id);
        return found && withLeader(found);
      },
      many: async (ids) => {
        const views = await Promise.all([...(await readJobViews(database, ids)).values()].map(withLeader));
        return new Map(views.map((found) => [found.job.id, found]));
      },
    },
    HOT_VIEWS,
  );
  /** An item with its child's view, or the problem that refused it. */
  async function itemView({ index, title, url, jobId, problem }: CollectionItemRow): Promise<ItemView> {
    const child = jobId === null ? undefined : await find(jobId);
    if (child) return { index, title, url, job: child };
    return { index, title, url, problem: problem ?? missingChild };
  }
  return {
    async submit({ url, playlist, callbackUrl, apiKeyId }, requestId) {
      if (playlist) {
        const { job } = await queueCollection(
          { ...deps, onQueued: notifyQueued },
          {
            url,
            maxItems: maxItemsOf(playlist),
            itemCallbacks: playlist.itemCallbacks,
            callbackUrl,
            requestId,
            apiKeyId,
          },
        );
        return view(job);
      }
      const { job, artifacts, callback } = await submitJob({
        deps: { ...deps, onQueued: notifyQueued },
        input: { url, callbackUrl, requestId, apiKeyId },
      });
      reportBornDone(job, callbackUrl !== undefined);
      // A born-done job's record is what its transaction read; one that waits may show its leader.
      return artifacts ? { job, leader: undefined, artifacts, callback } : view(job);
    },
    async submitBatch({ urls: given, callbackUrl, apiKeyId }, requestId) {
      const callback = callbackUrl === undefined ? undefined : await checkCallbackUrl(deps, callbackUrl, apiKeyId);
      const entries = given.map((entry) => (typeof entry === 'string' ? { url: entry } : entry));
      const urls = entries.map((entry) => entry.url);
      const checked = await mapLimit(urls, BATCH_CHECK_CONCURRENCY, (url) =>
        refusalOr(checkSource(deps, url, apiKeyId)),
      );
      // The workers are told once, after the whole batch is queued.
      let queued = false;
      const submitDeps: SubmitDeps = { ...deps, onQueued: () => (queued = true) };
      const items: BatchItem[] = [];
      try {
        for (const [index, source] of checked.entries()) {
          const url = urls[index]!;
          if (source instanceof ServiceError) {
            items.push({ url, refusal: source });
            continue;
          }
          const { playlist } = entries[index]!;
          const submitted = await refusalOr(
            playlist
              ? queueCollection(submitDeps, {
                  url,
                  maxItems: maxItemsOf(playlist),
                  itemCallbacks: playlist.itemCallbacks,
                  callbackUrl: callback?.href,
                  requestId,
                  apiKeyId,
                })
              : queueChecked(submitDeps, source, { callbackUrl: callback, requestId, apiKeyId }),
          );
          if (submitted instanceof ServiceError) {
            items.push({ url, refusal: submitted });
            continue;
          }
          const { job } = submitted;
          reportBornDone(job, callback !== undefined);
          items.push({ url, job });
        }
      } finally {
        if (queued) notifyQueued();
      }
      return items;
    },
    async get(id) {
      const job = await getJobRow(database, id);
      if (!job) throw jobNotFound();
      return job;
    },
    async cancel(id) {
      const { job, changed, children } = await cancelJob({
        deps: { database, now: deps.now, stopRunningJob: (jobId) => database.notify(JOB_CANCELED_CHANNEL, jobId) },
        input: { jobId: id },
      });
      // Counted here, by the node that canceled it; the node running it records nothing more.
      if (changed) deps.onEnded({ job, followers: [] }, true);
      // A child's own callback (item_callbacks) is found by the wake of its parent's end above.
      for (const child of children) deps.onEnded({ job: child, followers: [] }, false);
      return job;
    },
    view,
    find,
    async read(id) {
      const found = await find(id);
      if (!found) throw jobNotFound();
      return found;
    },
    async items(id, { after, limit }) {
      await getCollectionRow(database, id);
      const rows = await readItems(database, id, after, limit);
      const items = await Promise.all(rows.map(itemView));
      return { items, nextAfter: rows.length === limit ? rows[rows.length - 1]!.index : null };
    },
    async itemsAt(id, indexes) {
      return Promise.all((await readItemsAt(database, id, indexes)).map(itemView));
    },
    itemStates: (id, from) => readItemStates(database, id, from),
  };
}

/**
 * A job, its artifacts, its callback's delivery and its content's eviction: the job row joined to
 * all three, one row per artifact.
 */
async function readJobView(q: Queryable, id: string): Promise<JobView | undefined> {
  const query = prepared(q, 'job_view_by_id', (home) =>
    selectJobViews(home)
      .where(eq(home.t.jobs.id, sql.placeholder('id')))
      .orderBy(asc(home.t.cacheEntries.name))
      .prepare('job_view_by_id'),
  );
  return viewsOf(await query.execute({ id })).get(id);
}

/** readJobView for many jobs in one statement, for a database that reads polls together: PostgreSQL (`= any` of an array). */
async function readJobViews(q: Queryable, ids: string[]): Promise<Map<string, JobView>> {
  const query = prepared(q, 'job_views_by_ids', (home) =>
    selectJobViews(home)
      .where(sql`${home.t.jobs.id} = any(${sql.placeholder('ids')})`)
      .orderBy(asc(home.t.cacheEntries.name))
      .prepare('job_views_by_ids'),
  );
  return viewsOf(await query.execute({ ids }));
}

function selectJobViews({ db, t }: Queryable) {
  return db
    .select({
      job: t.jobs,
      artifact: t.cacheEntries,
      callback: t.callbackDeliveries,
      evictedAt: t.evictedContent.evictedAt,
    })
    .from(t.jobs)
    .leftJoin(t.cacheEntries, eq(t.cacheEntries.contentId, t.jobs.contentId))
    .leftJoin(t.callbackDeliveries, eq(t.callbackDeliveries.jobId, t.jobs.id))
    .leftJoin(t.evictedContent, eq(t.evictedContent.contentId, t.jobs.contentId));
}

type JobViewRow = {
  job: JobRow;
  artifact: CacheEntryRow | null;
  callback: CallbackDeliveryRow | null;
  evictedAt: number | null;
};

/** Views from joined rows, by job id; each job's artifacts in the rows' order. */
function viewsOf(rows: JobViewRow[]): Map<string, JobView> {
  const views = new Map<string, JobView>();
  for (const row of rows) {
    let view = views.get(row.job.id);
    if (!view) {
      view = {
        job: row.job,
        leader: undefined,
        artifacts: [],
        callback: row.callback ?? undefined,
        evictedAt: row.evictedAt ?? undefined,
      };
      views.set(row.job.id, view);
    }
    if (row.artifact) view.artifacts.push(row.artifact);
  }
  return views;
}

/** The value, or the ServiceError that refused it; anything else is thrown on. */
async function refusalOr<T>(work: Promise<T>): Promise<T | ServiceError> {
  try {
    return await work;
  } catch (err) {
    if (err instanceof ServiceError) return err;
    throw err;
  }
}

/** `fn` over every item, at most `limit` at once; results in the items' order. */
async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await fn(items[index]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return results;
}
