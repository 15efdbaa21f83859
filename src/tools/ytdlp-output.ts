/**
 * What yt-dlp prints, read: the download's progress lines (as ./ytdlp-args.ts's progress
 * template writes them) and the probe's info JSON, with the fields the service needs and the
 * request headers its replay must not carry. Nothing here runs a process.
 *
 * As Debian's yt-dlp 2023.03.04 prints them (test/unit/tools-integration.test.ts):
 * - For a direct media link the 'generic' extractor answers: extractor 'generic', extractor_key
 *   'Generic', id and title = the file name without extension, `direct: true`, no duration, one
 *   format whose protocol is 'http'. The id is not a stable media identity across sites.
 * - A failed probe prints "null" on stdout (parseInfoJson throws on it).
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
  title?: string;
  durationS?: number;
  isLive?: boolean;
  /** A playlist (or multi-video) instead of one item; the worker refuses it. */
  isPlaylist: boolean;
  /**
   * The protocol of each format (or of the item itself when it lists no formats), e.g. `https`,
   * `m3u8_native`, `rtmp`; [] when none is named.
   */
  protocols: string[];
}

/** Request headers the info JSON must not carry into the download (see withoutReplayedHeaders). */
const NOT_REPLAYED_HEADERS = new Set(['ytdl-request-proxy', 'cookie']);

/**
 * The info JSON the download step replays, without any `Ytdl-request-proxy` header: yt-dlp
 * honours that header (from an extractor, or from options smuggled into a URL) by dropping or
 * replacing its proxy for the request. Nor any `Cookie` header: the download takes cookies from
 * its own jar, for each request's host, instead of sending what the metadata run computed for
 * one URL wherever a request ends up. Throws on text that is not JSON.
 */
export function withoutReplayedHeaders(text: string): string {
  const strip = (value: unknown): void => {
    if (Array.isArray(value)) {
      value.forEach(strip);
    } else if (typeof value === 'object' && value !== null) {
      for (const [key, inner] of Object.entries(value as Record<string, unknown>)) {
        if (key === 'http_headers' && typeof inner === 'object' && inner !== null) {
          for (const header of Object.keys(inner)) {
            if (NOT_REPLAYED_HEADERS.has(header.toLowerCase())) delete (inner as Record<string, unknown>)[header];
          }
        }
        strip(inner);
      }
    }
  };
  const data: unknown = JSON.parse(text);
  strip(data);
  return JSON.stringify(data);
}

/** Reads the fields the service needs from --dump-single-json output; throws on anything malformed. */
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
    isPlaylist: info._type === 'playlist' || info._type === 'multi_video',
    protocols: formatProtocols(info),
  };
  if (typeof info.title === 'string') result.title = info.title;
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
