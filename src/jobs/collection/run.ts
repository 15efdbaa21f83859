import type { JobRow } from '../../db/database.js';
import { ServiceError } from '../../errors.js';
import { NO_KEY_IDENTITY } from '../key-identity.js';
import { FINAL_STATUSES, markCanceled, type Ended } from '../queue.js';
import { checkSource, queueChecked, type SubmitDeps } from '../submit.js';
import type { JobRunner } from '../worker-pool.js';
import type { CollectionEntry, ListCollection } from './listing.js';
import { endListing, recordedItems, recordItem, storedProblemOf, type StoredProblem } from './parent.js';

/**
 * Runs a claimed collection (./parent.ts): lists it with the ListCollection it is given and, as
 * each entry comes, makes its item. An entry goes through the very submission a URL submitted
 * alone goes through (../submit.ts: scheme, address policy, smuggled data, born done, single flight
 * within the key, the queue's admission), under the parent's key and request id, after taking a
 * token of its key's rate limit as that submission's request would; a refusal is the item's. A
 * nested collection is refused (collection_nested); entries of the same normalized URL
 * share one child. When the listing ends the parent waits for its children (listed), or ends.
 * Aborted (canceled, lease lost, shutdown), the listing stops and nothing more is recorded.
 */
export interface CollectionRunnerDeps {
  listCollection: ListCollection;
  /** How a child is submitted: the same dependencies as the API's submissions. */
  submit: SubmitDeps;
  /** Each job this runner ends: a born-done child, the parent when its listing ends it. */
  onJobEnded: (ended: Ended) => void;
  /** The key's request rate limit, on this node; absent when there is none. */
  entryTokens?: EntryTokens;
}

/**
 * Each entry takes a token of its key's rate limit (src/http/key-admission.ts, entryTokenTaker),
 * waiting for it (the listing's back-pressure) for at most `maxWaitMs` from the listing's start;
 * an entry that gets none by then is refused as its request would be (rate_limited).
 */
export interface EntryTokens {
  /** Resolves once the token is taken (undefined), or with the refusal once none can come before `until`. */
  take: (apiKeyId: string, until: number, signal: AbortSignal) => Promise<ServiceError | undefined>;
  maxWaitMs: number;
}

export function createCollectionRunner(deps: CollectionRunnerDeps): JobRunner {
  const { submit } = deps;
  const { database } = submit;
  return async (job, ctx) => {
    const parent = { id: job.id, owner: ctx.owner };
    const apiKeyId = job.apiKeyId;
    const requestId = job.requestId ?? undefined;
    // An earlier attempt's items stay; their entries are not submitted again.
    const { indexes, childByUrlKey } = await recordedItems(database, job.id);
    const tokensUntil = submit.now() + (deps.entryTokens?.maxWaitMs ?? 0);
    const listing = new AbortController();
    const stop = () => listing.abort(ctx.signal.reason);
    if (ctx.signal.aborted) stop();
    else ctx.signal.addEventListener('abort', stop, { once: true });

    /** The item of an entry: its child (`made`: a job made for it, not shared), or the problem refusing it. */
    async function outcomeOf(
      entry: CollectionEntry,
    ): Promise<{ jobId: string; made?: JobRow } | { problem: StoredProblem }> {
      if (entry.nested)
        return {
          problem: {
            code: 'collection_nested',
            message: 'This entry is itself a collection; collections are not expanded inside collections.',
            extra: {},
          },
        };
      const limited =
        deps.entryTokens && apiKeyId !== NO_KEY_IDENTITY
          ? await deps.entryTokens.take(apiKeyId, tokensUntil, listing.signal)
          : undefined;
      if (limited) return { problem: storedProblemOf(limited) };
      try {
        const source = await checkSource(submit, entry.url, apiKeyId);
        const shared = childByUrlKey.get(source.urlKey);
        if (shared) return { jobId: shared };
        const { job: child } = await queueChecked(submit, source, { requestId, apiKeyId });
        childByUrlKey.set(source.urlKey, child.id);
        return { jobId: child.id, made: child };
      } catch (err) {
        if (err instanceof ServiceError) return { problem: storedProblemOf(err) };
        throw err;
      }
    }

    const end = await deps.listCollection(
      { url: job.url, maxItems: job.maxItems ?? 0, signal: listing.signal, jobId: job.id },
      async (entry) => {
        if (listing.signal.aborted || indexes.has(entry.index)) return;
        const outcome = await outcomeOf(entry).catch((err: unknown) => {
          // Stopped while waiting for a token: nothing to record.
          if (listing.signal.aborted) return undefined;
          throw err;
        });
        if (!outcome) return;
        const made = 'made' in outcome ? outcome.made : undefined;
        const recorded = await recordItem(
          submit,
          parent,
          {
            index: entry.index,
            url: entry.url,
            title: entry.title,
            jobId: 'jobId' in outcome ? outcome.jobId : null,
            problem: 'problem' in outcome ? outcome.problem : null,
          },
          made !== undefined,
        );
        if (!recorded) {
          // Canceled or taken over meanwhile: the child just made belongs to nobody, so it goes too.
          if (made && !FINAL_STATUSES.has(made.status)) await markCanceled(database, made.id, submit.now());
          listing.abort('lost');
          return;
        }
        indexes.add(entry.index);
        if (made?.bornDone) deps.onJobEnded({ job: made, followers: [] });
      },
    );
    ctx.signal.removeEventListener('abort', stop);
    if (listing.signal.aborted) return undefined;
    const row = await endListing(database, parent, end, submit.now());
    if (!row) return undefined;
    ctx.log.info(
      { status: row.status, entries: row.entriesFound, children: row.children, truncated: row.truncated },
      'collection listed',
    );
    return FINAL_STATUSES.has(row.status) ? { job: row, followers: [] } : undefined;
  };
}
