import type { JobRow } from '../../db/database.js';
import { ServiceError } from '../../errors.js';
import { NO_KEY_IDENTITY } from '../key-identity.js';
import { FINAL_STATUSES, markCanceled, type Ended } from '../queue.js';
import { checkSource, queueChecked, submitBornDone, type CheckedSource, type SubmitDeps } from '../submit.js';
import type { JobRunner } from '../worker-pool.js';
import type { CollectionEntry, ListCollection } from './listing.js';
import { endListing, recordedItems, recordItems, storedProblemOf, type StoredProblem } from './parent.js';

/**
 * Runs a claimed collection (./parent.ts): lists it with the ListCollection it is given and, as
 * entries come (those listed while the last were written come together), makes their items, one
 * transaction for the entries handed on together. An entry goes through the very submission a URL
 * submitted alone goes through (../submit.ts: scheme, address policy, smuggled data, born done,
 * single flight within the key, the queue's admission), under the parent's key and request id,
 * after taking a token of its key's rate limit as that submission's request would; a refusal is
 * the item's. A nested collection is refused (collection_nested); entries of the same normalized URL
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

/** An entry's item: its child (`made`: a job made for it, not shared with an earlier entry), or the problem refusing it. */
type Outcome = { jobId: string; made?: JobRow } | { problem: StoredProblem };

const NESTED: StoredProblem = {
  code: 'collection_nested',
  message: 'This entry is itself a collection; collections are not expanded inside collections.',
  extra: {},
};

/** A policy's or the queue's refusal as the item's problem; anything else is thrown on. */
function refusal(err: unknown): { problem: StoredProblem } {
  if (err instanceof ServiceError) return { problem: storedProblemOf(err) };
  throw err;
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

    /** What the entries listed together come to, in their order: a child each (`made`: a job made for it, not shared), or a problem. */
    async function outcomesOf(entries: CollectionEntry[]): Promise<Outcome[]> {
      // The rate limit's token, then the policy, one entry after the other (name look-ups in flight
      // are bounded per key). Stopped while waiting for a token, it throws: nothing is recorded.
      const checked: Array<{ source: CheckedSource } | { problem: StoredProblem }> = [];
      for (const entry of entries) {
        if (entry.nested) {
          checked.push({ problem: NESTED });
          continue;
        }
        const limited =
          deps.entryTokens && apiKeyId !== NO_KEY_IDENTITY
            ? await deps.entryTokens.take(apiKeyId, tokensUntil, listing.signal)
            : undefined;
        if (limited) checked.push({ problem: storedProblemOf(limited) });
        else checked.push(await checkSource(submit, entry.url, apiKeyId).then((source) => ({ source }), refusal));
      }
      // Born done, together: the child of each URL not seen before whose content is stored.
      const fresh = new Map<string, CheckedSource>();
      for (const c of checked)
        if ('source' in c && !childByUrlKey.has(c.source.urlKey)) fresh.set(c.source.urlKey, c.source);
      const born = new Map<string, JobRow | StoredProblem>();
      await Promise.all(
        [...fresh.values()].map(async (source) => {
          const outcome = await submitBornDone(submit, source, { requestId, apiKeyId }).then(
            (submitted) => submitted && { made: submitted.job },
            refusal,
          );
          if (outcome) born.set(source.urlKey, 'made' in outcome ? outcome.made : outcome.problem);
        }),
      );
      // The others queued one after the other, in order, the queue's admission asked for each;
      // none once the listing is stopped (the entries are then not recorded).
      const outcomes: Outcome[] = [];
      for (const c of checked) {
        if (listing.signal.aborted) break;
        if ('problem' in c) {
          outcomes.push(c);
          continue;
        }
        const { urlKey } = c.source;
        const shared = childByUrlKey.get(urlKey);
        if (shared) {
          outcomes.push({ jobId: shared });
          continue;
        }
        const early = born.get(urlKey);
        const outcome: Outcome =
          early === undefined
            ? await queueChecked(submit, c.source, { requestId, apiKeyId, bornDoneTried: true }).then(
                (submitted) => ({ jobId: submitted.job.id, made: submitted.job }),
                refusal,
              )
            : 'code' in early
              ? { problem: early }
              : { jobId: early.id, made: early };
        if ('jobId' in outcome) childByUrlKey.set(urlKey, outcome.jobId);
        outcomes.push(outcome);
      }
      return outcomes;
    }

    const end = await deps.listCollection(
      { url: job.url, maxItems: job.maxItems ?? 0, signal: listing.signal, jobId: job.id },
      async (listed) => {
        const entries = listed.filter((entry) => !indexes.has(entry.index));
        if (listing.signal.aborted || entries.length === 0) return;
        const outcomes = await outcomesOf(entries).catch((err: unknown) => {
          // Stopped while waiting for a token: nothing to record.
          if (listing.signal.aborted) return undefined;
          throw err;
        });
        if (!outcomes) return;
        const made = outcomes.flatMap((outcome) => ('jobId' in outcome && outcome.made ? [outcome.made] : []));
        const recorded =
          !listing.signal.aborted &&
          (await recordItems(
            submit,
            parent,
            entries.map((entry, i) => {
              const outcome = outcomes[i]!;
              return {
                index: entry.index,
                url: entry.url,
                title: entry.title,
                jobId: 'jobId' in outcome ? outcome.jobId : null,
                problem: 'problem' in outcome ? outcome.problem : null,
              };
            }),
            made.map((child) => child.id),
          ));
        if (!recorded) {
          // Stopped, canceled or taken over meanwhile: the children just made belong to nobody, so they go too.
          for (const child of made)
            if (!FINAL_STATUSES.has(child.status)) await markCanceled(database, child.id, submit.now());
          listing.abort('lost');
          return;
        }
        for (const entry of entries) indexes.add(entry.index);
        for (const child of made) if (child.bornDone) deps.onJobEnded({ job: child, followers: [] });
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
