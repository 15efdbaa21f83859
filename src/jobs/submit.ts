import type { Db } from '../db/client.js';
import type { JobRow } from '../db/schema.js';
import { aliasKey, parseSourceUrl } from '../policy/source-url.js';
import { resolveAlias } from '../store/aliases.js';
import { recordUse } from '../store/usage.js';
import { activeLeaderFor, insertJob } from './queue.js';

/**
 * submitSource: URL policy, then one of three outcomes:
 *  - the URL has an alias to content still stored → a job born done, nothing downloaded, and
 *    the content's use recorded; alias, file check, job and use are one synchronous
 *    transaction, so eviction cannot remove the content in between;
 *  - a job for the same URL is already queued or running → a job that follows it;
 *  - otherwise → a queued job, and the workers are woken.
 */
export interface SubmitDeps {
  db: Db;
  now: () => number;
  newJobId: () => string;
  /** Throws a ServiceError('refused', ...) when the URL's destination is not allowed. */
  checkDestination: (url: URL) => Promise<void>;
  /** Synchronous (ContentStore.hasSync): it runs inside the born-done transaction. */
  contentPresent: (contentId: string) => boolean;
  admitJob: () => void;
  wakeWorkers: () => void;
}

export async function submitSource({ deps, input }: { deps: SubmitDeps; input: { url: string; requestId?: string } }): Promise<JobRow> {
  const url = parseSourceUrl(input.url);
  await deps.checkDestination(url);
  const urlKey = aliasKey(url);
  const id = deps.newJobId();
  const now = deps.now();

  const bornDone = deps.db.transaction(() => {
    const aliased = resolveAlias(deps.db, 'url', urlKey);
    if (aliased === undefined || !deps.contentPresent(aliased)) return undefined;
    recordUse(deps.db, aliased, now);
    return insertJob(deps.db, {
      id,
      url: url.href,
      urlKey,
      status: 'done',
      bornDone: true,
      contentId: aliased,
      createdAt: now,
      startedAt: now,
      finishedAt: now,
      requestId: input.requestId ?? null,
    });
  });
  if (bornDone) return bornDone;

  deps.admitJob();
  // better-sqlite3 is synchronous: nothing can interleave between the look-up and the insert.
  const leader = activeLeaderFor(deps.db, urlKey);
  const job = insertJob(deps.db, {
    id,
    url: url.href,
    urlKey,
    status: 'queued',
    followsJobId: leader?.id ?? null,
    createdAt: now,
    requestId: input.requestId ?? null,
  });
  if (!leader) deps.wakeWorkers();
  return job;
}
