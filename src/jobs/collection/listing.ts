import type { JobError } from '../../job-errors.js';

/**
 * What listing a collection (a playlist, album, channel page or podcast feed) yields, between
 * the run that lists it (yt-dlp in the sandbox, through the egress guard) and the parent job
 * that turns each entry into a child job.
 */

/** One entry of the collection, in its order (index from 1), as the extractor listed it. */
export interface CollectionEntry {
  index: number;
  /** The entry's URL as listed, yt-dlp's smuggled-data fragment already stripped. Not yet policy-checked. */
  url: string;
  /** Display text (src/tools/display-text.ts rules), or null. */
  title: string | null;
  /** A collection inside the collection: never expanded, a refused item. */
  nested: boolean;
}

export interface ListingEnd {
  /** The collection's own title, or null. */
  title: string | null;
  /** True when the listing stopped at maxItems while more entries may exist. */
  truncated: boolean;
  /** Why listing failed (time, bytes, memory, the guard, not a collection, ...), or null. Entries already handed on stay handed on. */
  error: JobError | null;
}

export interface ListingRequest {
  url: string;
  /** At most this many entries are handed to onEntries. */
  maxItems: number;
  /** Aborted: the listing run is stopped at once (cancel, shutdown); the promise then resolves with the reason as its error. */
  signal: AbortSignal;
  /** For the run's logs and the guard's refusals. */
  jobId: string;
}

/** The most entries one call of onEntries is handed: what the parent writes in one transaction. */
export const ENTRIES_PER_HANDING = 64;

/**
 * Lists a collection, handing its entries to onEntries as they are listed (so the first child can
 * start before the listing ends), in order, and awaiting each call before the next
 * (back-pressure): a call gets every entry listed while the one before was busy, at most
 * ENTRIES_PER_HANDING, so that the parent writes them together. Resolves once the run has ended
 * and every entry listed has been handed on; never rejects for what the URL or the tool did. An
 * onEntries that rejects stops the run, and the listing rejects with its error.
 * Implemented by ./list-entries.ts (createListCollection).
 */
export type ListCollection = (
  request: ListingRequest,
  onEntries: (entries: CollectionEntry[]) => Promise<void>,
) => Promise<ListingEnd>;
