import { and, asc, eq, gt, gte, inArray, sql } from 'drizzle-orm';
import type { ApiErrorCode } from '../../api-errors.js';
import type { Database, JobRow, Queryable, Tables } from '../../db/database.js';
import { ServiceError } from '../../errors.js';
import type { JobError } from '../../job-errors.js';
import { NO_KEY_IDENTITY } from '../key-identity.js';
import { END_UNANNOUNCED, FINAL_STATUSES, getJobRow, type Ended } from '../queue.js';
import { checkCallbackUrl, checkSource, type SubmitDeps, type Submitted } from '../submit.js';

/**
 * A collection's parent job and its items, on either database, for any number of nodes.
 *
 *   queued ──claim──▶ running (listing) ──▶ listed (waiting for its children) ──▶ done
 *                        │        └──(no entry, listing failed)──▶ failed
 *                        └──(every child already ended)──▶ done
 *   queued, running or listed ──cancel──▶ canceled (its queued and running children with it, ../cancel.ts)
 *
 * A listing cut short other than by a cancel (its attempts spent: ../queue.ts, exhaust) ends the
 * same way as one that failed: failed with no entry, else listed or done; never ended with a child
 * still queued or running. A listed collection's lock_owner is END_UNANNOUNCED until the node that
 * ends its last child announces its end (claimEndedParents).
 *
 * The parent is claimed like any job (the fair turns across keys count it as a running job of
 * its key while it lists) and holds a lease while it lists; once listed it holds none, and no node
 * needs to be watching it: the trigger of drizzle/sqlite/0016_collections.sql (PostgreSQL:
 * 0014_collections.sql) counts each child as it is linked (parent_id) and as it ends, in that
 * transaction, and ends the parent done with its last child. The API shows a collection that is
 * `running` as `expanding` and one that is `listed` as `running` (src/http/job-record.ts).
 *
 * Items: one row per entry listed, in its order; an entry that passed the submission policy
 * names its child job (entries of the same URL share one), a refused one the problem it would
 * have got submitted alone. A listing taken over by another node (the lease ran out) lists again
 * and skips the indexes already recorded.
 */

/** A collection's url_key: its own, so that a collection never leads nor follows (single flight is for sources). */
export const collectionUrlKey = (id: string) => `collection:${id}`;

/** The problem of a refused item, as stored (JSON in collection_items.problem). */
export interface StoredProblem {
  code: ApiErrorCode;
  message: string;
  extra: ServiceError['extra'];
}

export const storedProblemOf = (err: ServiceError): StoredProblem => ({
  code: err.code,
  message: err.message,
  extra: err.extra,
});

export interface CollectionItemRow {
  index: number;
  url: string;
  title: string | null;
  jobId: string | null;
  problem: StoredProblem | null;
}

/**
 * Queues a collection's parent job: its URL and callback_url checked as a source's, the queue's
 * admission asked, the job and its callback's delivery written in one transaction.
 */
export async function queueCollection(
  deps: SubmitDeps,
  input: {
    url: string;
    maxItems: number;
    /** Each child gets a callback of its own, to callbackUrl (recordItem). */
    itemCallbacks?: boolean;
    callbackUrl?: string;
    requestId?: string;
    apiKeyId?: string;
  },
): Promise<Submitted> {
  if (input.itemCallbacks && input.callbackUrl === undefined)
    throw new ServiceError(
      'invalid_input',
      'callback_url_required',
      'playlist.item_callbacks asks for a callback per child job: give the callback_url to send them to.',
    );
  const { url } = await checkSource(deps, input.url, input.apiKeyId);
  const callbackUrl =
    input.callbackUrl === undefined ? undefined : await checkCallbackUrl(deps, input.callbackUrl, input.apiKeyId);
  await deps.admitJob();
  const id = deps.newJobId();
  const now = deps.now();
  const submitted = await deps.database.transaction(async (q): Promise<Submitted> => {
    const [job] = await q.db
      .insert(q.t.jobs)
      .values({
        id,
        url: url.href,
        urlKey: collectionUrlKey(id),
        status: 'queued',
        kind: 'collection',
        maxItems: input.maxItems,
        itemCallbacks: input.itemCallbacks ?? false,
        createdAt: now,
        requestId: input.requestId ?? null,
        apiKeyId: input.apiKeyId ?? NO_KEY_IDENTITY,
      })
      .returning();
    const callback =
      callbackUrl && (await deps.recordCallback(q, { jobId: id, url: callbackUrl.href, createdAt: now }));
    return { job: job!, ...(callback ? { callback } : {}) };
  });
  deps.onQueued();
  return submitted;
}

/** The entries a listing already recorded (an earlier attempt's): their indexes, and the child of each URL. */
export async function recordedItems(
  q: Queryable,
  parentId: string,
): Promise<{ indexes: Set<number>; childByUrlKey: Map<string, string> }> {
  const { collectionItems: items, jobs } = q.t;
  const rows = await q.db
    .select({ idx: items.idx, jobId: items.jobId, urlKey: jobs.urlKey })
    .from(items)
    .leftJoin(jobs, eq(jobs.id, items.jobId))
    .where(eq(items.parentId, parentId));
  const childByUrlKey = new Map<string, string>();
  for (const row of rows) if (row.jobId && row.urlKey) childByUrlKey.set(row.urlKey, row.jobId);
  return { indexes: new Set(rows.map((row) => row.idx)), childByUrlKey };
}

/** Rolls back an items' transaction when its parent is no longer being listed by this node. */
class ListingLost extends Error {}

/**
 * Records entries' items, and links their new children (`linkChildren`, job ids) to the parent,
 * in one transaction that holds only while `owner` still lists the parent. False when it no
 * longer does (canceled, or taken over): nothing is written. A parent submitted with
 * item_callbacks gives each child it links a callback delivery of its own, to the parent's
 * callback URL, in that transaction: only a linked child gets one, once (entries of the same URL
 * share the child and link it once).
 */
export async function recordItems(
  deps: Pick<SubmitDeps, 'database' | 'recordCallback' | 'now'>,
  parent: { id: string; owner: string },
  items: Array<{
    index: number;
    url: string;
    title: string | null;
    jobId: string | null;
    problem: StoredProblem | null;
  }>,
  linkChildren: string[],
): Promise<boolean> {
  if (items.length === 0) return true;
  try {
    await deps.database.transaction(async (q) => {
      const { jobs, collectionItems, callbackDeliveries } = q.t;
      const refused = items.filter((item) => item.problem !== null).length;
      const [counted] = await q.db
        .update(jobs)
        .set({
          entriesFound: sql`${jobs.entriesFound} + ${items.length}`,
          itemsRefused: sql`${jobs.itemsRefused} + ${refused}`,
        })
        .where(and(eq(jobs.id, parent.id), eq(jobs.status, 'running'), eq(jobs.lockOwner, parent.owner)))
        .returning({ itemCallbacks: jobs.itemCallbacks });
      if (!counted) throw new ListingLost();
      await q.db.insert(collectionItems).values(
        items.map((item) => ({
          parentId: parent.id,
          idx: item.index,
          url: item.url,
          title: item.title,
          jobId: item.jobId,
          problem: item.problem && JSON.stringify(item.problem),
        })),
      );
      // The trigger counts each child, and its end if it has ended already (born done).
      if (linkChildren.length === 0) return;
      await q.db.update(jobs).set({ parentId: parent.id }).where(inArray(jobs.id, linkChildren));
      if (!counted.itemCallbacks) return;
      const [callback] = await q.db
        .select({ url: callbackDeliveries.url })
        .from(callbackDeliveries)
        .where(eq(callbackDeliveries.jobId, parent.id));
      if (!callback) return;
      for (const jobId of linkChildren)
        await deps.recordCallback(q, { jobId, url: callback.url, createdAt: deps.now() });
    });
    return true;
  } catch (err) {
    if (err instanceof ListingLost) return false;
    throw err;
  }
}

/**
 * running → listed, or → done when every child has already ended, or → failed when the listing
 * failed before it found any entry. Records the title, whether the list was cut, and the
 * listing's error (shown as the collection's listing_error when entries were found). Undefined
 * when `owner` no longer lists it.
 */
export async function endListing(
  database: Database,
  parent: { id: string; owner: string },
  end: { title: string | null; truncated: boolean; error: JobError | null },
  now: number,
): Promise<JobRow | undefined> {
  const { jobs } = database.t;
  const failed = end.error ? sql`${jobs.entriesFound} = 0` : sql`false`;
  const allEnded = sql`${jobs.childrenDone} + ${jobs.childrenFailed} + ${jobs.childrenCanceled} >= ${jobs.children}`;
  const [row] = await database.db
    .update(jobs)
    .set({
      status: sql`case when ${failed} then 'failed' when ${allEnded} then 'done' else 'listed' end`,
      finishedAt: sql`case when ${failed} or ${allEnded} then cast(${now} as bigint) else null end`,
      collectionTitle: end.title,
      truncated: end.truncated,
      errorCode: end.error?.code ?? null,
      errorMessage: end.error?.message ?? null,
      errorDetail: end.error?.detail ?? null,
      errorHttpStatus: end.error?.httpStatus ?? null,
      lockOwner: sql`case when ${failed} or ${allEnded} then null else ${END_UNANNOUNCED} end`,
      leaseExpiresAt: null,
      progressBytes: null,
      progressTotalBytes: null,
    })
    .where(and(eq(jobs.id, parent.id), eq(jobs.status, 'running'), eq(jobs.lockOwner, parent.owner)))
    .returning();
  return row;
}

/**
 * The collections that ended with these jobs' ends (the trigger ended them with their last child):
 * each returned once, on whichever node asks first, so that its end is announced like any job's
 * (metrics, the job-ended notification, its callback's wake-up).
 */
export async function claimEndedParents(database: Database, ended: Ended): Promise<JobRow[]> {
  const parentIds = [...new Set([ended.job, ...ended.followers].flatMap((job) => job.parentId ?? []))];
  if (parentIds.length === 0) return [];
  const { jobs } = database.t;
  return database.db
    .update(jobs)
    .set({ lockOwner: null })
    .where(and(inArray(jobs.id, parentIds), eq(jobs.status, 'done'), eq(jobs.lockOwner, END_UNANNOUNCED)))
    .returning();
}

/** A page of a collection's items in their order: those after index `after`, at most `limit`. */
export async function readItems(
  q: Queryable,
  parentId: string,
  after: number,
  limit: number,
): Promise<CollectionItemRow[]> {
  const { collectionItems: items } = q.t;
  const rows = await q.db
    .select()
    .from(items)
    .where(and(eq(items.parentId, parentId), gt(items.idx, after)))
    .orderBy(asc(items.idx))
    .limit(limit);
  return rows.map(itemRowOf);
}

/** A collection's items at these indexes, in their order. */
export async function readItemsAt(q: Queryable, parentId: string, indexes: number[]): Promise<CollectionItemRow[]> {
  if (indexes.length === 0) return [];
  const { collectionItems: items } = q.t;
  const rows = await q.db
    .select()
    .from(items)
    .where(and(eq(items.parentId, parentId), inArray(items.idx, indexes)))
    .orderBy(asc(items.idx));
  return rows.map(itemRowOf);
}

/** Where an item stands: its child, and whether that child has ended (a refused item has none). */
export interface ItemState {
  index: number;
  jobId: string | null;
  ended: boolean;
}

/** The states of a collection's items from index `from` on, in their order: one narrow query (the event streams' item events). */
export async function readItemStates(q: Queryable, parentId: string, from: number): Promise<ItemState[]> {
  const { collectionItems: items, jobs } = q.t;
  const rows = await q.db
    .select({ index: items.idx, jobId: items.jobId, status: jobs.status })
    .from(items)
    .leftJoin(jobs, eq(jobs.id, items.jobId))
    .where(and(eq(items.parentId, parentId), gte(items.idx, from)))
    .orderBy(asc(items.idx));
  return rows.map(({ index, jobId, status }) => ({
    index,
    jobId,
    ended: status !== null && FINAL_STATUSES.has(status),
  }));
}

function itemRowOf(row: Tables['collectionItems']['$inferSelect']): CollectionItemRow {
  return {
    index: row.idx,
    url: row.url,
    title: row.title,
    jobId: row.jobId,
    problem: row.problem === null ? null : (JSON.parse(row.problem) as StoredProblem),
  };
}

/** The collection `id`; throws job_not_found when there is no job, job_not_collection when it is a source's. */
export async function getCollectionRow(q: Queryable, id: string): Promise<JobRow> {
  const job = await getJobRow(q, id);
  if (!job) throw new ServiceError('not_found', 'job_not_found', 'No job has this id.');
  if (job.kind !== 'collection')
    throw new ServiceError('not_found', 'job_not_collection', 'This job fetches one source: it has no items.');
  return job;
}
