import { jobError, type JobError } from '../../job-errors.js';
import type { Logger } from '../../logger.js';
import type { SandboxedResult } from '../../sandbox/sandbox.js';
import { toolOutputForLog } from '../../tools/tool-message.js';
import { buildListingArgs } from '../../tools/ytdlp-args.js';
import { describeYtDlpFailure } from '../../tools/ytdlp-failure.js';
import { parseListingLine, type ListedLine } from '../../tools/ytdlp-listing.js';
import {
  closeAttempt,
  explainFailure,
  hiddenInMessages,
  prepareFolder,
  runTool,
  thrownError,
  ytdlpOptions,
  type AttemptDeps,
  type ToolAttempt,
} from '../fetch/attempt.js';
import { JobFailure } from '../fetch/step.js';
import { listingFolder } from '../fetch/work-folder.js';
import {
  ENTRIES_PER_HANDING,
  type CollectionEntry,
  type ListCollection,
  type ListingEnd,
  type ListingRequest,
} from './listing.js';

/**
 * The listing of a collection (./listing.ts's ListCollection): one yt-dlp run, made, confined and
 * checked as a fetch's runs are (../fetch/attempt.ts: its own folder with yt-dlp's configuration
 * and the job's cookies, the sandbox, the egress guard, the tools' ceilings), that prints each
 * entry as it lists it without resolving any (../../tools/ytdlp-args.ts buildListingArgs).
 *
 * Its bounds: maxItems + 1 entries are asked for, so that one past maxItems says more exist (the
 * run is stopped there: truncated); the guard cuts the run once the sources sent more than
 * PLAYLIST_LISTING_MAX_BYTES (listing_too_large), which bounds its memory too where the
 * extractor reads a whole feed before its first entry; PLAYLIST_LISTING_TIMEOUT_S stops it
 * (listing_timeout); TOOL_MEMORY_BYTES, TOOL_CPU_S and TOOL_MAX_PROCESSES hold as for any tool run.
 *
 * Entries go to onEntries in order as the run prints them: those printed while it is busy wait
 * in a queue (at most maxItems of them) and go together in its next call, at most
 * ENTRIES_PER_HANDING a call. An entry that is a collection
 * itself is handed on as nested, never listed: one whose `_type` says so, and one whose entries
 * the extractor lists in place (lines naming another playlist_id than the first line's).
 */
export interface ListCollectionDeps extends AttemptDeps {
  listing: ListingLimits;
  log: Logger;
}

/** PLAYLIST_LISTING_MAX_BYTES and PLAYLIST_LISTING_TIMEOUT_S. */
export interface ListingLimits {
  maxBytes: number;
  timeoutMs: number;
}

/** What a listing run may write: nothing but yt-dlp's cookie jar, back into the job's copy of the cookies. */
const LISTING_FILE_BYTES = 16 * 1024 * 1024;

/** The run's reason for stopping once maxItems entries and one more were listed: never the listing's error. */
const ENOUGH: JobError = jobError('internal_error', { detail: 'Enough entries were listed.' });
const NOT_A_COLLECTION: JobError = jobError('not_a_collection');

export function createListCollection(deps: ListCollectionDeps): ListCollection {
  return async (request, onEntries) => {
    const log = deps.log.child({ job_id: request.jobId });
    const egress = deps.openEgressSession?.(request.jobId, { maxBytes: deps.listing.maxBytes });
    const workDir = listingFolder(deps.workDir, request.jobId);
    const attempt: ToolAttempt = {
      log,
      workDir,
      jobSignal: request.signal,
      // The listing's time limit stops its run with listing_timeout (Listing.stopRun), not as a fetch's.
      deadline: new AbortController().signal,
      egress,
      proxyUrl: egress?.proxyUrlAt(deps.sandbox.guardAuthority),
      directAttempt: null,
      otherFolders: [],
    };
    const listing = new Listing(request, onEntries);
    const timer = setTimeout(
      () => listing.stop(jobError('listing_timeout', { values: { limit: deps.listing.timeoutMs / 1000 } })),
      deps.listing.timeoutMs,
    );
    let error: JobError | null;
    try {
      await prepareFolder(deps, attempt);
      const args = buildListingArgs({ url: request.url, items: request.maxItems + 1, ...ytdlpOptions(deps, attempt) });
      const result = await runTool(deps, attempt, request.signal, 'ytdlp', args, {
        maxFileBytes: LISTING_FILE_BYTES,
        stop: listing.stopRun.signal,
        onStdoutLine: (line) => listing.onLine(line),
      });
      error = result.exitCode === 0 ? null : listerFailure(deps, attempt, request, result);
    } catch (err) {
      error = thrownError(attempt, err);
    } finally {
      clearTimeout(timer);
      await closeAttempt(attempt);
    }
    if (error === ENOUGH) error = null;
    // What the listing ended with, in order: its stop from outside, the guard's byte limit, what
    // the guard and the sandbox saw, the run's own end.
    if (request.signal.aborted) error = abortReason(request.signal);
    else if (egress?.overByteLimit())
      error = jobError('listing_too_large', { values: { limit: deps.listing.maxBytes } });
    else if (error !== null) error = explainFailure(deps, attempt, error);
    // Entries already printed are handed on, unless the listing was stopped from outside.
    await listing.drained();
    return { title: listing.title, truncated: listing.truncated, error } satisfies ListingEnd;
  };
}

/** The run's output as it comes: the entries handed on in order, and when to stop it. */
class Listing {
  readonly stopRun = new AbortController();
  title: string | null = null;
  truncated = false;
  /** Top-level entries printed so far. */
  private count = 0;
  /** The collection listed, as its first line names it; lines naming another are a nested collection's. */
  private first: ListedLine | undefined;
  private readonly nestedSeen = new Set<string>();
  /** Entries printed and not yet handed on, in order. */
  private waiting: CollectionEntry[] = [];
  /** The handing on under way, while there is one. */
  private handing: Promise<void> | null = null;
  private failure: { thrown: unknown } | null = null;

  constructor(
    private readonly request: ListingRequest,
    private readonly onEntries: (entries: CollectionEntry[]) => Promise<void>,
  ) {}

  stop(reason: JobError): void {
    if (!this.stopRun.signal.aborted) this.stopRun.abort(reason);
  }

  /** Throws JobFailure (metadata_invalid) for a malformed line: the run is then stopped. */
  onLine(line: string): void {
    let listed: ListedLine | null;
    try {
      listed = parseListingLine(line);
    } catch (err) {
      throw new JobFailure(jobError('metadata_invalid', { detail: (err as Error).message }));
    }
    if (listed === null || this.stopRun.signal.aborted) return;
    if (this.first === undefined) {
      if (listed.playlistIndex === null) return this.stop(NOT_A_COLLECTION);
      this.first = listed;
      this.title = listed.playlistTitle;
    }
    const entry = this.entryOf(listed);
    if (entry === null) return;
    if (this.count === this.request.maxItems) {
      this.truncated = true;
      return this.stop(ENOUGH);
    }
    this.count++;
    this.hand({ ...entry, index: this.count });
  }

  /** The entry a line stands for, null when it stands for none (more of a nested collection, or no URL). */
  private entryOf(listed: ListedLine): Omit<CollectionEntry, 'index'> | null {
    const nestedId = listed.playlistId;
    if (nestedId !== null && nestedId !== this.first!.playlistId) {
      if (this.nestedSeen.has(nestedId)) return null;
      this.nestedSeen.add(nestedId);
      const url = listed.playlistUrl ?? listed.url;
      return url === null ? null : { url, title: listed.playlistTitle, nested: true };
    }
    if (listed.url === null) return null;
    return { url: listed.url, title: listed.title, nested: listed.collection };
  }

  /** Queues the entry for onEntries; a failure of onEntries stops the run, and the listing rejects with it. */
  private hand(entry: CollectionEntry): void {
    this.waiting.push(entry);
    // From the next microtask: the lines of one read of the run's output go together.
    this.handing ??= Promise.resolve().then(() => this.handOn());
  }

  private async handOn(): Promise<void> {
    while (this.waiting.length > 0) {
      const entries = this.waiting.splice(0, ENTRIES_PER_HANDING);
      if (this.failure !== null || this.request.signal.aborted) continue;
      try {
        await this.onEntries(entries);
      } catch (err) {
        this.failure = { thrown: err };
        this.stop(ENOUGH);
      }
    }
    this.handing = null;
  }

  /** Once every entry printed has been handed on (or the listing was stopped from outside). */
  async drained(): Promise<void> {
    while (this.handing !== null) await this.handing;
    if (this.failure !== null) throw this.failure.thrown;
  }
}

/** A run that exited non-zero: its words go to the log, and its error says why. */
function listerFailure(
  deps: ListCollectionDeps,
  attempt: ToolAttempt,
  request: ListingRequest,
  result: SandboxedResult,
): JobError {
  const hide = hiddenInMessages(deps, attempt);
  const error = describeYtDlpFailure(result.stderrTail, { hide, url: request.url, maxBytes: deps.listing.maxBytes });
  attempt.log.warn(
    { tool: 'ytdlp', exit_code: result.exitCode, output: toolOutputForLog(result.stderrTail, hide), code: error.code },
    'listing a collection failed',
  );
  return error;
}

/** ListingRequest.signal's reason as the listing's error: a JobError as given, anything else an internal one. */
function abortReason(signal: AbortSignal): JobError {
  const reason = signal.reason as Partial<JobError> | undefined;
  return typeof reason?.code === 'string' && typeof reason.message === 'string'
    ? (reason as JobError)
    : jobError('internal_error', { detail: 'The listing was stopped.' });
}
