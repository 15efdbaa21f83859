import { cleanDisplayText } from './display-text.js';
import { MEDIA_TEXT_BOUNDS } from './media-metadata.js';
import { LISTING_PREFIX } from './ytdlp-args.js';

/**
 * What a listing run (./ytdlp-args.ts buildListingArgs) prints of each entry of a collection,
 * read. Nothing here runs a process.
 *
 * As Debian's yt-dlp 2023.03.04 and 2026.10.26 print them alike (test/unit/tools-ytdlp-listing.test.ts,
 * test/e2e/collection-listing.test.ts), with the generic extractor:
 * - an RSS feed's item: `_type` url_transparent, `url` its enclosure (else its link) followed by
 *   `#__youtubedl_smuggle=...` (the extractor hands the item's guid on that way), its title;
 *   playlist_title the channel's title, playlist_id the feed's URL;
 * - an XSPF track: no `_type` (resolved in place), `url` its location, its title; no
 *   playlist_title (the playlist's <title> is not read), playlist_id the file's name;
 * - a page's `<audio>` or `<video>` elements: no `_type`, `url` the element's source, title the
 *   page's title followed by ` (n)`, playlist_title the page's title;
 * - a URL that is one item (a media file, say): a line without playlist_index.
 */

export interface ListedLine {
  /** The entry's URL, yt-dlp's smuggled-data fragment stripped (stripSmuggledData); null when it printed none. */
  url: string | null;
  /** Display text (./display-text.ts), or null. */
  title: string | null;
  /** Its place in the collection that holds it, from 1; null: the URL was one item, not a collection. */
  playlistIndex: number | null;
  /** The collection that holds it, as the extractor names it (a feed's URL, a site's id), or null. */
  playlistId: string | null;
  /** That collection's title, display text, or null. */
  playlistTitle: string | null;
  /** That collection's own URL, or null. */
  playlistUrl: string | null;
  /** The entry is a collection itself (`_type` playlist or multi_video). */
  collection: boolean;
}

/**
 * What yt-dlp's smuggle_url appends to a URL: its unsmuggle_url takes everything from here on as
 * options for the extractor, so an entry URL keeps nothing of it.
 */
const SMUGGLE_MARK = '#__youtubedl_smuggle';

/** `url` without yt-dlp's smuggled-data fragment. */
export function stripSmuggledData(url: string): string {
  const at = url.indexOf(SMUGGLE_MARK);
  return at < 0 ? url : url.slice(0, at);
}

/** A listing run's stdout line read; null for a line that is not an entry's; throws on an entry line that is not a JSON object. */
export function parseListingLine(line: string): ListedLine | null {
  if (!line.startsWith(LISTING_PREFIX)) return null;
  let data: unknown;
  try {
    data = JSON.parse(line.slice(LISTING_PREFIX.length));
  } catch {
    throw new Error("a listing line of yt-dlp's is not valid JSON");
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    throw new Error("a listing line of yt-dlp's is not a JSON object");
  }
  const entry = data as Record<string, unknown>;
  const text = (key: string): string | null => {
    const value = entry[key];
    if (typeof value === 'string' && value !== '') return value;
    return typeof value === 'number' ? String(value) : null;
  };
  const url = text('url');
  const index = entry.playlist_index;
  return {
    url: url === null ? null : stripSmuggledData(url),
    title: cleanDisplayText(entry.title, MEDIA_TEXT_BOUNDS.title),
    playlistIndex: typeof index === 'number' && Number.isInteger(index) && index > 0 ? index : null,
    playlistId: text('playlist_id'),
    playlistTitle: cleanDisplayText(entry.playlist_title, MEDIA_TEXT_BOUNDS.title),
    playlistUrl: text('playlist_webpage_url'),
    collection: entry._type === 'playlist' || entry._type === 'multi_video',
  };
}
