import type {
  CacheEntryRow,
  CallbackDeliveryRow,
  Database,
  GuardedWrite,
  GuardedWriter,
  JobRow,
  Queryable,
} from '../db/database.js';
import { ServiceError } from '../errors.js';
import { aliasKey, parseSourceUrl } from '../policy/source-url.js';
import { aliasedArtifacts, aliasedArtifactsOfKeys } from '../store/aliases.js';
import { recordUse } from '../store/usage.js';
import { NO_KEY_IDENTITY } from './key-identity.js';
import {
  enqueueJob,
  insertBornDoneJob,
  insertBornDoneJobLocked,
  insertBornDoneJobsOrEachAlone,
  type BornDoneJob,
} from './queue.js';

/**
 * submitJob: URL policy (and the callback URL's, when there is one), then one of three outcomes:
 *  - the URL has an alias to content still stored → a job born done, nothing downloaded, and
 *    the content's use recorded; the job and the use are written only while the alias still
 *    points to that content, under the content's lock (BORN_DONE), so no node's eviction can
 *    remove the content in between;
 *  - a job of the same API key for the same URL is already queued or running, on any node → a
 *    job that follows it (another key's job never follows: ./queue.ts says why);
 *  - otherwise → a queued job, and the workers are told.
 * A callback's delivery row is written in the job's own transaction (src/webhooks/deliveries.ts:
 * it becomes due when the job ends, however it ends).
 *
 * The steps are also offered apart for batches (./job-service.ts): every URL checked first, then
 * the jobs queued one after the other.
 */
export interface SubmitDeps {
  database: Database;
  now: () => number;
  newJobId: () => string;
  /**
   * Writes a callback's delivery row (src/webhooks/deliveries.ts), in the job's own transaction:
   * every query through `q`, no transaction of its own.
   */
  recordCallback: (
    q: Queryable,
    delivery: { jobId: string; url: string; createdAt: number },
  ) => Promise<CallbackDeliveryRow>;
  /**
   * Throws a ServiceError('refused', ...) when the URL's destination is not allowed. `apiKeyId`:
   * whose look-up it is (name look-ups in flight are bounded per key).
   */
  checkDestination: (url: URL, apiKeyId?: string) => Promise<void>;
  /** Synchronous (ContentStore.hasSync): it may run inside the born-done transaction. */
  contentPresent: (contentId: string) => boolean;
  /** Throws a ServiceError when no job may be queued now (queue full, fetching disabled). */
  admitJob: () => Promise<void>;
  /** A job was queued as a leader: a worker somewhere should claim it. */
  onQueued: () => void;
}

/** A job just made, with what its transaction read and wrote for its record, so the record needs no read. */
export interface Submitted {
  job: JobRow;
  /** Born done: its content's artifacts (by name). Undefined for a job that will download. */
  artifacts?: CacheEntryRow[];
  /** Its callback's delivery, when it was submitted with a callback_url. */
  callback?: CallbackDeliveryRow;
}

export interface CheckedSource {
  url: URL;
  urlKey: string;
}

/**
 * A job born done, as a write guarded by a read (Database.guardedWrites): it depends on the
 * artifacts of the URL's alias (none: the alias points to no content still stored), and writes
 * the content's use and the job. Where the read stands until the write (one transaction), the
 * two are written as they are; otherwise born_done_job(), or born_done_jobs() for many, takes the
 * content's lock, reads the alias again and writes (./queue.ts).
 */
const BORN_DONE: GuardedWrite<CacheEntryRow[], BornDoneJob, JobRow> = {
  read: (q, urlKey) => aliasedArtifacts(q, 'url', urlKey),
  readMany: (q, urlKeys) => aliasedArtifactsOfKeys(q, 'url', urlKeys),
  write: async (q, job) => (await Promise.all([recordUse(q, job.contentId, job.at), insertBornDoneJob(q, job)]))[1],
  writeChecked: insertBornDoneJobLocked,
  writeCheckedMany: insertBornDoneJobsOrEachAlone,
};

/**
 * Born-done submissions made at the same time, where the database gathers them: two reads (and
 * two writes) under way at once, each for up to 64 submissions.
 */
const TOGETHER = { concurrency: 2, maxItems: 64 };

const bornDoneByDatabase = new WeakMap<Database, GuardedWriter<CacheEntryRow[], BornDoneJob, JobRow>>();

/** BORN_DONE on `database`: one per database, so that submissions made at the same time go together. */
function bornDoneOn(database: Database): GuardedWriter<CacheEntryRow[], BornDoneJob, JobRow> {
  let bornDone = bornDoneByDatabase.get(database);
  if (!bornDone) {
    bornDone = database.guardedWrites(BORN_DONE, TOGETHER);
    bornDoneByDatabase.set(database, bornDone);
  }
  return bornDone;
}

/** Rounds of "not born done, but the leader it would follow just ended" before giving up. */
const MAX_ROUNDS = 5;

export async function submitJob({
  deps,
  input,
}: {
  deps: SubmitDeps;
  input: { url: string; callbackUrl?: string; requestId?: string; apiKeyId?: string };
}): Promise<Submitted> {
  const source = await checkSource(deps, input.url, input.apiKeyId);
  const callbackUrl =
    input.callbackUrl === undefined ? undefined : await checkCallbackUrl(deps, input.callbackUrl, input.apiKeyId);
  return queueChecked(deps, source, { callbackUrl, requestId: input.requestId, apiKeyId: input.apiKeyId });
}

/** The source URL, parsed and its destination checked; throws the policy's ServiceError. */
export async function checkSource(
  deps: Pick<SubmitDeps, 'checkDestination'>,
  raw: string,
  apiKeyId?: string,
): Promise<CheckedSource> {
  const url = parseSourceUrl(raw);
  await deps.checkDestination(url, apiKeyId);
  return { url, urlKey: aliasKey(url) };
}

/**
 * A callback URL passes the same policy as a source URL (it is checked again at every attempt,
 * src/webhooks/send.ts); its refusals carry the same codes, with the field named in `errors`.
 */
export async function checkCallbackUrl(
  deps: Pick<SubmitDeps, 'checkDestination'>,
  raw: string,
  apiKeyId?: string,
): Promise<URL> {
  try {
    const url = parseSourceUrl(raw);
    await deps.checkDestination(url, apiKeyId);
    return url;
  } catch (err) {
    if (!(err instanceof ServiceError)) throw err;
    throw new ServiceError(err.kind, err.code, `callback_url: ${err.message}`, {
      ...err.extra,
      fieldErrors: [{ path: 'callback_url', message: err.message }],
    });
  }
}

/**
 * Gives a checked source its job: born done, following another, or queued. `apiKeyId` is the
 * submitting key's identity (./key-identity.ts), recorded on the job whichever way it is made.
 * `bornDoneTried`: submitBornDone has just found no stored content for it, so the first round
 * goes straight to the queue (a collection's entries, ./collection/run.ts).
 */
export async function queueChecked(
  deps: SubmitDeps,
  source: CheckedSource,
  options: { callbackUrl?: URL; requestId?: string; apiKeyId?: string; bornDoneTried?: boolean },
): Promise<Submitted> {
  const { url, urlKey } = source;
  const id = deps.newJobId();
  const requestId = options.requestId ?? null;
  const apiKeyId = options.apiKeyId ?? NO_KEY_IDENTITY;
  const { callbackUrl } = options;

  for (let round = 0; round < MAX_ROUNDS; round++) {
    const now = deps.now();
    // The callback's delivery is written in its job's transaction, whichever way the job is made.
    const callbackFor =
      callbackUrl &&
      ((q: Queryable, job: JobRow) => deps.recordCallback(q, { jobId: job.id, url: callbackUrl.href, createdAt: now }));
    if (round > 0 || !options.bornDoneTried) {
      const born = await bornDoneJob(deps, source, { id, now, requestId, apiKeyId }, callbackFor);
      if (born) return born;
    }

    await deps.admitJob();
    const enqueue = () => enqueueJob(deps.database, { id, url: url.href, urlKey, createdAt: now, requestId, apiKeyId });
    // With a callback, enqueueJob's own transactions join this one: the job and its delivery commit together.
    const queued: Submitted | undefined = callbackFor
      ? await deps.database.transaction(async (q) => {
          const job = await enqueue();
          return job && { job, callback: await callbackFor(q, job) };
        })
      : await enqueue().then((job) => job && { job });
    if (queued) {
      if (queued.job.followsJobId === null) deps.onQueued();
      return queued;
    }
  }
  throw new ServiceError('internal', 'internal_error', 'The job could not be queued; try again.');
}

/**
 * The source's job born done when its URL's content is stored, else undefined (nothing written):
 * the first step of queueChecked alone. Calls made at the same time are written together.
 */
export function submitBornDone(
  deps: SubmitDeps,
  source: CheckedSource,
  options: { requestId?: string; apiKeyId?: string },
): Promise<Submitted | undefined> {
  const job = {
    id: deps.newJobId(),
    now: deps.now(),
    requestId: options.requestId ?? null,
    apiKeyId: options.apiKeyId ?? NO_KEY_IDENTITY,
  };
  return bornDoneJob(deps, source, job, undefined);
}

async function bornDoneJob(
  deps: SubmitDeps,
  { url, urlKey }: CheckedSource,
  job: { id: string; now: number; requestId: string | null; apiKeyId: string },
  along: ((q: Queryable, job: JobRow) => Promise<CallbackDeliveryRow>) | undefined,
): Promise<Submitted | undefined> {
  const { id, now, requestId, apiKeyId } = job;
  const born = await bornDoneOn(deps.database)(urlKey, {
    decide: (artifacts) => {
      const aliased = artifacts?.[0]?.contentId;
      if (aliased === undefined || !deps.contentPresent(aliased)) return undefined;
      return { id, url: url.href, urlKey, contentId: aliased, at: now, requestId, apiKeyId };
    },
    along,
  });
  return born && { job: born.written, artifacts: born.value ?? [], callback: born.along };
}
