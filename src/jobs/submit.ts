import type { CacheEntryRow, Database, JobRow, Queryable } from '../db/database.js';
import { gathered, gatheredReads } from '../db/gathered.js';
import { ServiceError } from '../errors.js';
import { aliasKey, parseSourceUrl } from '../policy/source-url.js';
import { aliasedArtifacts, aliasedArtifactsOfKeys } from '../store/aliases.js';
import { recordUse } from '../store/usage.js';
import { insertDelivery, type CallbackDeliveryRow } from '../webhooks/deliveries.js';
import { NO_KEY_IDENTITY } from './key-identity.js';
import { enqueueJob, insertBornDoneJob, insertBornDoneJobLocked, insertBornDoneJobsOrEachAlone, type BornDoneJob } from './queue.js';

/**
 * submitSource: URL policy (and the callback URL's, when there is one), then one of three outcomes:
 *  - the URL has an alias to content still stored → a job born done, nothing downloaded, and
 *    the content's use recorded; alias, job and use are one transaction under the content's
 *    lock (on PostgreSQL, one call of born_done_job(), or of born_done_jobs() for the
 *    submissions made at the same time), so no node's eviction can remove the content in between;
 *  - a job for the same URL is already queued or running, on any node → a job that follows it;
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
  /** The id of a callback's delivery: the receiver's idempotency key. */
  newDeliveryId: () => string;
  /**
   * Throws a ServiceError('refused', ...) when the URL's destination is not allowed. `apiKeyId`:
   * whose look-up it is (name look-ups in flight are bounded per key).
   */
  checkDestination: (url: URL, apiKeyId?: string) => Promise<void>;
  /** Synchronous (ContentStore.hasSync): it runs inside the born-done transaction. */
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
 * SQLite's born-done transaction: every step takes its handle, so the hottest transaction of all
 * needs no async context and commits together with those that wait beside it.
 */
const BORN_DONE_TRANSACTION = { handleOnly: true };

/**
 * PostgreSQL: born-done submissions made while others are under way wait and go together: one
 * read of their URLs' artifacts, one call of born_done_jobs() (one commit). Two of each at once.
 */
const TOGETHER = { concurrency: 2, maxItems: 64 };

interface BornDoneTogether {
  /** aliasedArtifacts(url), read with those asked for at the same time; shared, frozen when asked twice. */
  artifacts: (urlKey: string) => Promise<CacheEntryRow[] | undefined>;
  /** insertBornDoneJobLocked, with those asked for at the same time. */
  insert: (job: BornDoneJob) => Promise<JobRow | undefined>;
}

const togetherByDatabase = new WeakMap<Database, BornDoneTogether>();

function bornDoneTogether(database: Database): BornDoneTogether {
  let together = togetherByDatabase.get(database);
  if (!together) {
    together = {
      artifacts: gatheredReads((keys) => aliasedArtifactsOfKeys(database, 'url', keys), { concurrency: TOGETHER.concurrency, maxKeys: TOGETHER.maxItems }),
      insert: gathered((jobs: BornDoneJob[]) => insertBornDoneJobsOrEachAlone(database, jobs), TOGETHER),
    };
    togetherByDatabase.set(database, together);
  }
  return together;
}

/** Rounds of "not born done, but the leader it would follow just ended" before giving up. */
const MAX_ROUNDS = 5;

export async function submitSource({
  deps,
  input,
}: {
  deps: SubmitDeps;
  input: { url: string; callbackUrl?: string; requestId?: string; apiKeyId?: string };
}): Promise<Submitted> {
  const source = await checkSource(deps, input.url, input.apiKeyId);
  const callbackUrl = input.callbackUrl === undefined ? undefined : await checkCallbackUrl(deps, input.callbackUrl, input.apiKeyId);
  return queueChecked(deps, source, { callbackUrl, requestId: input.requestId, apiKeyId: input.apiKeyId });
}

/** The source URL, parsed and its destination checked; throws the policy's ServiceError. */
export async function checkSource(deps: Pick<SubmitDeps, 'checkDestination'>, raw: string, apiKeyId?: string): Promise<CheckedSource> {
  const url = parseSourceUrl(raw);
  await deps.checkDestination(url, apiKeyId);
  return { url, urlKey: aliasKey(url) };
}

/**
 * A callback URL passes the same policy as a source URL (it is checked again at every attempt,
 * src/webhooks/send.ts); its refusals carry the same codes, with the field named in `errors`.
 */
export async function checkCallbackUrl(deps: Pick<SubmitDeps, 'checkDestination'>, raw: string, apiKeyId?: string): Promise<URL> {
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
 */
export async function queueChecked(deps: SubmitDeps, source: CheckedSource, options: { callbackUrl?: URL; requestId?: string; apiKeyId?: string }): Promise<Submitted> {
  const { url, urlKey } = source;
  const id = deps.newJobId();
  const requestId = options.requestId ?? null;
  const apiKeyId = options.apiKeyId ?? NO_KEY_IDENTITY;
  const withCallback = async (q: Queryable, submitted: Submitted, now: number): Promise<Submitted> => {
    if (!options.callbackUrl) return submitted;
    const callback = await insertDelivery(q, { id: deps.newDeliveryId(), jobId: submitted.job.id, url: options.callbackUrl.href, createdAt: now });
    return { ...submitted, callback };
  };

  const born = { id, url: url.href, urlKey, requestId, apiKeyId };
  // SQLite: one handle-only transaction, committed with those waiting beside it (BORN_DONE_TRANSACTION).
  // A SQLite transaction is the only writer from its start, so its first read stands.
  const bornDoneOnSqlite = (now: number) =>
    deps.database.transaction(async (q) => {
      const artifacts = await aliasedArtifacts(q, 'url', urlKey);
      const aliased = artifacts[0]?.contentId;
      if (aliased === undefined || !deps.contentPresent(aliased)) return undefined;
      const [, job] = await Promise.all([recordUse(q, aliased, now), insertBornDoneJob(q, { ...born, contentId: aliased, at: now })]);
      return withCallback(q, { job, artifacts }, now);
    }, BORN_DONE_TRANSACTION);
  // PostgreSQL: the artifacts read and the file checked, then one round trip takes the content's
  // lock, reads the alias again and writes (insertBornDoneJobLocked). The file may be checked
  // before the lock: an eviction that removed it had removed its rows, under the lock, first.
  // Both round trips are shared with the submissions made at the same time (bornDoneTogether);
  // a callback's delivery joins its own job in a transaction.
  const bornDoneOnPostgres = async (now: number) => {
    const together = bornDoneTogether(deps.database);
    const artifacts = (await together.artifacts(urlKey)) ?? [];
    const aliased = artifacts[0]?.contentId;
    if (aliased === undefined || !deps.contentPresent(aliased)) return undefined;
    const job: BornDoneJob = { ...born, contentId: aliased, at: now };
    if (!options.callbackUrl) return together.insert(job).then((made) => made && { job: made, artifacts });
    return deps.database.transaction(async (q) => {
      const made = await insertBornDoneJobLocked(q, job);
      return made && withCallback(q, { job: made, artifacts }, now);
    });
  };

  for (let round = 0; round < MAX_ROUNDS; round++) {
    const now = deps.now();
    const bornDone = await (deps.database.kind === 'postgres' ? bornDoneOnPostgres(now) : bornDoneOnSqlite(now));
    if (bornDone) return bornDone;

    await deps.admitJob();
    const enqueue = () => enqueueJob(deps.database, { id, url: url.href, urlKey, createdAt: now, requestId, apiKeyId });
    // With a callback, enqueueJob's own transactions join this one: the job and its delivery commit together.
    const queued = options.callbackUrl
      ? await deps.database.transaction(async (q) => {
          const job = await enqueue();
          return job && withCallback(q, { job }, now);
        })
      : await enqueue().then((job) => job && { job });
    if (queued) {
      if (queued.job.followsJobId === null) deps.onQueued();
      return queued;
    }
  }
  throw new ServiceError('internal', 'internal_error', 'The job could not be queued; try again.');
}

