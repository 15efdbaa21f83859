import { cleanDisplayText } from './display-text.js';
import type { FileTags } from './ffmpeg-tags.js';
import type { MediaInfo } from './ytdlp-output.js';

/**
 * What the job record says about the source (its `media`): what the downloader knows, and for
 * media yt-dlp's generic extraction found (a direct link to a file, or a page's one <audio>), what
 * the file's own tags add. Every text is made fit to show (./display-text.ts: no control or
 * bidirectional override characters, no markup) and bounded; the page's URL is http(s) only,
 * without user or password. Kept on the job and on its URL's alias as this JSON, so that a job
 * born done shows what the job that stored its URL's content knew.
 */
export interface SourceMedia {
  extractor: string;
  id: string;
  title: string | null;
  artist: string | null;
  album: string | null;
  track: string | null;
  /** Seconds. */
  duration: number | null;
  /** YYYY-MM-DD. */
  upload_date: string | null;
  webpage_url: string | null;
}

/** Each text's bound, in characters (code points). */
export const MEDIA_TEXT_BOUNDS = {
  extractor: 64,
  id: 256,
  title: 300,
  artist: 200,
  album: 200,
  track: 200,
  webpage_url: 2048,
} as const;

/** The longest duration believed (a year, in seconds): anything longer is no duration. */
const MAX_DURATION_S = 366 * 24 * 3600;

/**
 * The extractors of yt-dlp's generic extraction, which find the media file itself rather than a
 * site's record of it: its tags are the best there is.
 */
const FILE_IS_THE_MEDIA = new Set(['generic', 'html5mediaembed']);

/**
 * The record's `media` from what yt-dlp extracted and, when given, the downloaded file's tags:
 * for the generic extraction, the tags' title replaces one that is only the file's name (a direct
 * link) and their artist and album fill in what yt-dlp had not.
 */
export function sourceMediaOf(info: MediaInfo, tags: FileTags | null = null): SourceMedia {
  const fromFile = tags !== null && FILE_IS_THE_MEDIA.has(info.extractorKey.toLowerCase()) ? tags : {};
  const title = info.direct === true || info.title === undefined ? (fromFile.title ?? info.title) : info.title;
  return {
    extractor: cleanDisplayText(info.extractorKey, MEDIA_TEXT_BOUNDS.extractor) ?? 'unknown',
    id: cleanDisplayText(info.mediaId, MEDIA_TEXT_BOUNDS.id) ?? 'unknown',
    title: cleanDisplayText(withoutEmbedNumber(info, title), MEDIA_TEXT_BOUNDS.title),
    artist: cleanDisplayText(info.artist ?? fromFile.artist, MEDIA_TEXT_BOUNDS.artist),
    album: cleanDisplayText(info.album ?? fromFile.album, MEDIA_TEXT_BOUNDS.album),
    track: cleanDisplayText(info.track, MEDIA_TEXT_BOUNDS.track),
    duration:
      info.durationS !== undefined && info.durationS >= 0 && info.durationS <= MAX_DURATION_S ? info.durationS : null,
    upload_date: isoDate(info.uploadDate),
    webpage_url: pageUrl(info.webpageUrl),
  };
}

/**
 * yt-dlp names a page's one embedded media "<page title> (1)" (its id "<page>-1"): the number
 * counts embeds, and says nothing of the media.
 */
function withoutEmbedNumber(info: MediaInfo, title: string | undefined): string | undefined {
  if (title === undefined || info.extractorKey.toLowerCase() !== 'html5mediaembed' || title !== info.title)
    return title;
  const number = /-(\d+)$/.exec(info.mediaId)?.[1];
  return number !== undefined && title.endsWith(` (${number})`) ? title.slice(0, -` (${number})`.length) : title;
}

/** yt-dlp's `YYYYMMDD` as `YYYY-MM-DD`, when it is a real day. */
function isoDate(value: string | undefined): string | null {
  const match = value === undefined ? null : /^(\d{4})(\d{2})(\d{2})$/.exec(value);
  if (!match) return null;
  const [, year, month, day] = match;
  const iso = `${year}-${month}-${day}`;
  const parsed = new Date(`${iso}T00:00:00Z`);
  return !Number.isNaN(parsed.getTime()) && parsed.toISOString().startsWith(iso) ? iso : null;
}

/** An http(s) URL without user or password, as its normalised href, within its bound; else null. */
function pageUrl(value: string | undefined): string | null {
  if (value === undefined) return null;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return null;
  url.username = '';
  url.password = '';
  // The href is ASCII (percent-encoded), so no character of it can spoof a display.
  return url.href.length <= MEDIA_TEXT_BOUNDS.webpage_url ? url.href : null;
}

/** The JSON kept in the database's `media` columns. */
export function storedMedia(media: SourceMedia): string {
  return JSON.stringify(media);
}

/**
 * A `media` column read back; null when absent or not what storedMedia writes (a row changed by
 * hand, say). Read as it was stored: cleaned when it was made.
 */
export function readStoredMedia(stored: string | null): SourceMedia | null {
  if (stored === null) return null;
  let value: unknown;
  try {
    value = JSON.parse(stored);
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null) return null;
  const row = value as Record<string, unknown>;
  const text = (key: keyof SourceMedia) => (typeof row[key] === 'string' ? row[key] : null);
  const extractor = text('extractor');
  const id = text('id');
  if (extractor === null || id === null) return null;
  return {
    extractor,
    id,
    title: text('title'),
    artist: text('artist'),
    album: text('album'),
    track: text('track'),
    duration: typeof row.duration === 'number' && Number.isFinite(row.duration) ? row.duration : null,
    upload_date: text('upload_date'),
    webpage_url: text('webpage_url'),
  };
}
