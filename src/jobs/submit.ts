import type { Database, JobRow } from '../db/database.js';
import { ServiceError } from '../errors.js';
import { aliasKey, parseSourceUrl } from '../policy/source-url.js';
import { resolveAlias } from '../store/aliases.js';
import { lockContent } from '../store/pins.js';
import { recordUse } from '../store/usage.js';
import { enqueueJob, insertJob } from './queue.js';

/**
 * submitSource: URL policy, then one of three outcomes:
 *  - the URL has an alias to content still stored → a job born done, nothing downloaded, and
 *    the content's use recorded; alias, file check, job and use are one transaction under the
 *    content's lock, so no node's eviction can remove the content in between;
 *  - a job for the same URL is already queued or running, on any node → a job that follows it;
 *  - otherwise → a queued job, and the workers are told.
 */
export interface SubmitDeps {
  database: Database;
  now: () => number;
  newJobId: () => string;
  /** Throws a ServiceError('refused', ...) when the URL's destination is not allowed. */
  checkDestination: (url: URL) => Promise<void>;
  /** Synchronous (ContentStore.hasSync): it runs inside the born-done transaction. */
  contentPresent: (contentId: string) => boolean;
  /** Throws a ServiceError when no job may be queued now (queue full, fetching disabled). */
  admitJob: () => Promise<void>;
  /** A job was queued as a leader: a worker somewhere should claim it. */
  onQueued: () => void;
}

/** Rounds of "not born done, but the leader it would follow just ended" before giving up. */
const MAX_ROUNDS = 5;

export async function submitSource({ deps, input }: { deps: SubmitDeps; input: { url: string; requestId?: string } }): Promise<JobRow> {
  const url = parseSourceUrl(input.url);
  await deps.checkDestination(url);
  const urlKey = aliasKey(url);
  const id = deps.newJobId();
  const requestId = input.requestId ?? null;

  for (let round = 0; round < MAX_ROUNDS; round++) {
    const now = deps.now();
    const bornDone = await deps.database.transaction(async (q) => {
      const aliased = await resolveAlias(q, 'url', urlKey);
      if (aliased === undefined) return undefined;
      await lockContent(q, [aliased]);
      if ((await resolveAlias(q, 'url', urlKey)) !== aliased || !deps.contentPresent(aliased)) return undefined;
      await recordUse(q, aliased, now);
      return insertJob(q, {
        id,
        url: url.href,
        urlKey,
        status: 'done',
        bornDone: true,
        contentId: aliased,
        createdAt: now,
        startedAt: now,
        finishedAt: now,
        requestId,
      });
    });
    if (bornDone) return bornDone;

    await deps.admitJob();
    const job = await enqueueJob(deps.database, { id, url: url.href, urlKey, createdAt: now, requestId });
    if (job) {
      if (job.followsJobId === null) deps.onQueued();
      return job;
    }
  }
  throw new ServiceError('internal', 'internal_error', 'The job could not be queued; try again.');
}
