/**
 * What yt-dlp prints, read: the download's progress lines (as ./ytdlp-args.ts's progress
 * template writes them) and the media's info JSON (printed once extracted), with the fields the
 * service needs. Nothing here runs a process.
 *
 * As Debian's yt-dlp 2023.03.04 prints them (test/unit/tools-integration.test.ts):
 * - For a direct media link the 'generic' extractor answers: extractor 'generic', extractor_key
 *   'Generic', id and title = the file name without extension, `direct: true`, no duration, one
 *   format whose protocol is 'http'. The id is not a stable media identity across sites.
 * - An item of a playlist carries the playlist's fields (playlist_index, playlist_autonumber);
 *   a single video has them null or not at all.
 * - For a page whose one <audio> or <video> the generic extractor finds (2023.03.04 and
 *   2026.10.26 alike): extractor 'html5', extractor_key 'HTML5MediaEmbed', id '<page name>-1',
 *   title the page's og:title (else its <title>) followed by ' (1)', upload_date from the media's
 *   Last-Modified; no artist, album or duration.
 */

/** One progress line of a download. */
export interface DownloadProgress {
  downloadedBytes: number;
  /** Exact size when announced, else yt-dlp's estimate (fragmented downloads), else null. */
  totalBytes: number | null;
}

const PROGRESS_LINE = /^PROGRESS (\d+|NA) (\d+|NA) (\d+|NA)$/;

/** Parses one line printed through the progress template; null for any other line. */
export function parseProgressLine(line: string): DownloadProgress | null {
  const m = PROGRESS_LINE.exec(line.trim());
  if (!m) return null;
  const [, downloaded, total, estimate] = m;
  if (downloaded === 'NA') return null;
  const toNumber = (v: string | undefined) => (v === undefined || v === 'NA' ? null : Number(v));
  return { downloadedBytes: Number(downloaded), totalBytes: toNumber(total) ?? toNumber(estimate) };
}

export interface MediaInfo {
  extractor: string;
  extractorKey: string;
  mediaId: string;
  /** The canonical page of the media, as the extractor names it. */
  webpageUrl?: string;
  /** yt-dlp's fields as it gives them, unchecked (../tools/media-metadata.ts makes them fit to show). */
  title?: string;
  /** `artist` (or `artists`), else `creator` (or `creators`), else `uploader`. */
  artist?: string;
  album?: string;
  /** The track's title, as music sites give it (not its number). */
  track?: string;
  /** `YYYYMMDD`, as yt-dlp gives it. */
  uploadDate?: string;
  /** A direct link to a media file: the generic extractor's title is then the file's name. */
  direct?: boolean;
  durationS?: number;
  isLive?: boolean;
  /** A playlist (or multi-video), or one of its items, instead of one item; the worker refuses it. */
  isPlaylist: boolean;
  /** Some format's request headers would override the downloader's proxy; the worker refuses it. */
  overridesProxy: boolean;
  /**
   * The protocol of each format (or of the item itself when it lists no formats), e.g. `https`,
   * `m3u8_native`, `rtmp`; [] when none is named.
   */
  protocols: string[];
}

/**
 * A request header yt-dlp honours by dropping or replacing its proxy for that request (an
 * extractor's geo-verification proxy, or whatever extractor output names it): it would take the
 * download around the egress guard.
 */
const PROXY_OVERRIDE_HEADER = 'ytdl-request-proxy';

/** Reads the fields the service needs from the info JSON; throws on anything malformed. */
export function parseInfoJson(text: string): MediaInfo {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    throw new Error('yt-dlp info JSON is not valid JSON');
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    throw new Error('yt-dlp info JSON is not an object');
  }
  const info = data as Record<string, unknown>;
  const requireString = (key: string): string => {
    const value = info[key];
    if (typeof value === 'string' && value !== '') return value;
    if (typeof value === 'number') return String(value);
    throw new Error(`yt-dlp info JSON lacks "${key}"`);
  };
  const result: MediaInfo = {
    extractor: requireString('extractor'),
    extractorKey: requireString('extractor_key'),
    mediaId: requireString('id'),
    isPlaylist:
      info._type === 'playlist' ||
      info._type === 'multi_video' ||
      typeof info.playlist_index === 'number' ||
      typeof info.playlist_autonumber === 'number',
    overridesProxy: overridesProxy(info),
    protocols: formatProtocols(info),
  };
  const textOf = (key: string): string | undefined => {
    const value = info[key];
    if (typeof value === 'string' && value.trim() !== '') return value;
    // Newer yt-dlps give lists (artists, creators) beside the older joined fields.
    if (Array.isArray(value)) {
      const joined = value.filter((item): item is string => typeof item === 'string' && item.trim() !== '');
      if (joined.length > 0) return joined.join(', ');
    }
    return undefined;
  };
  const title = textOf('title');
  if (title !== undefined) result.title = title;
  const artist = textOf('artist') ?? textOf('artists') ?? textOf('creator') ?? textOf('creators') ?? textOf('uploader');
  if (artist !== undefined) result.artist = artist;
  const album = textOf('album');
  if (album !== undefined) result.album = album;
  const track = textOf('track');
  if (track !== undefined) result.track = track;
  const uploadDate = textOf('upload_date');
  if (uploadDate !== undefined) result.uploadDate = uploadDate;
  if (info.direct === true) result.direct = true;
  if (typeof info.webpage_url === 'string') result.webpageUrl = info.webpage_url;
  if (typeof info.duration === 'number' && Number.isFinite(info.duration)) result.durationS = info.duration;
  if (typeof info.is_live === 'boolean') result.isLive = info.is_live;
  if (info.live_status === 'is_live' || info.live_status === 'is_upcoming') result.isLive = true;
  return result;
}

function formatProtocols(info: Record<string, unknown>): string[] {
  const protocolOf = (item: unknown): string | undefined => {
    const value = (item as { protocol?: unknown } | null)?.protocol;
    return typeof value === 'string' && value !== '' ? value : undefined;
  };
  const items = Array.isArray(info.formats) ? info.formats : [info];
  return items.map(protocolOf).filter((p): p is string => p !== undefined);
}

/** Whether any `http_headers` object, at any depth (formats, fragments...), names PROXY_OVERRIDE_HEADER. */
function overridesProxy(value: unknown): boolean {
  if (Array.isArray(value)) return value.some(overridesProxy);
  if (typeof value !== 'object' || value === null) return false;
  return Object.entries(value as Record<string, unknown>).some(
    ([key, inner]) =>
      (key === 'http_headers' &&
        typeof inner === 'object' &&
        inner !== null &&
        Object.keys(inner).some((name) => name.toLowerCase() === PROXY_OVERRIDE_HEADER)) ||
      overridesProxy(inner),
  );
}
