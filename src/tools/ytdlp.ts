/**
 * yt-dlp argument builders and output parsers. Nothing here runs a process.
 *
 * Written against Debian's yt-dlp 2023.03.04 (checked with the real binary, see
 * test/unit/tools-integration.test.ts):
 * - A job is two runs. The probe (`buildProbeArgs`) prints the info JSON on stdout as one line
 *   and downloads no media. The worker stores that text in a file and the download
 *   (`buildDownloadArgs`) replays it with --load-info-json, so the page is not extracted twice.
 *   With --load-info-json yt-dlp ignores any URL on the command line, so none is passed. If
 *   downloading from the loaded info fails, 2023.03 warns and retries once by re-extracting
 *   `webpage_url`; that goes through the same --proxy.
 * - Download stdout carries two kinds of lines: progress lines (`parseProgressLine`) and, once
 *   the file is in place, its absolute path (--print after_move:filepath). Any stdout line that
 *   is not a progress line is that path; the worker must check it lies inside its outputDir.
 * - --print implies --quiet, and quiet turns progress off unless --progress is given. An
 *   after_move print does not imply --simulate; --no-simulate is passed anyway so that stays
 *   true whatever the print stage.
 * - --max-filesize only works when the size is announced (Content-Length). A refusal is silent
 *   under --quiet: yt-dlp exits 0 and prints no path. So "exit 0 without a path while maxBytes
 *   was set" means file_too_large; and for unannounced sizes the worker must enforce its byte
 *   cap itself from the progress lines (abort when downloadedBytes passes it).
 * - For a direct media link the 'generic' extractor answers: extractor 'generic', extractor_key
 *   'Generic', id and title = the file name without extension, `direct: true`, no duration, one
 *   format whose protocol is 'http'. The id is not a stable media identity across sites.
 * - HLS: fragments come through yt-dlp's own downloader (progress has only an estimate until the
 *   end). With --fixup never the file is named source.mp4 but holds MPEG-TS; ffmpeg goes by
 *   content, not by name.
 * - A proxy refusing CONNECT (https) gives "Tunnel connection failed: 403 Forbidden"; a proxy
 *   refusing a plain-http request gives "HTTP Error 403: Forbidden", like an origin would.
 * - A failed probe prints "null" on stdout (parseInfoJson throws on it).
 */

/**
 * Prints e.g. "PROGRESS 15360 37764 NA" (downloaded, total, estimate). %(...)d prints integers
 * (total_bytes_estimate is a float) and NA for a missing value.
 */
const PROGRESS_TEMPLATE =
  'download:PROGRESS %(progress.downloaded_bytes)d %(progress.total_bytes)d %(progress.total_bytes_estimate)d';

/**
 * Protocols whose downloads yt-dlp makes itself, over HTTP(S), hence through --proxy (the egress
 * guard): plain http/https, DASH segments and HLS (native, see --hls-prefer-native; yt-dlp gets no
 * ffmpeg to fall back on). Anything else is handed to an external program that ignores the proxy:
 * rtmp* to rtmpdump (which Debian installs with yt-dlp), rtsp/mms to mpv or mplayer, rtmp_ffmpeg
 * to ffmpeg. The sandbox stops those at connect() anyway; choosing among these protocols only
 * makes such media fail early and clearly (unsupported_protocol) instead.
 */
export const GUARDED_PROTOCOL_PREFIXES = ['http', 'm3u8'] as const;

/** True for a format protocol the guard sees (`https`, `m3u8_native`, `http_dash_segments`...). */
export function isGuardedProtocol(protocol: string): boolean {
  return protocol.split('+').every((p) => GUARDED_PROTOCOL_PREFIXES.some((prefix) => p.startsWith(prefix)));
}

/** The only URL schemes a chosen format may have: `ftp://x/a.m3u8` is protocol m3u8_native too. */
export const GUARDED_URL_PREFIXES = ['https://', 'http://'] as const;

/**
 * `bestaudio/best`, restricted to guarded protocols and http(s) URLs. yt-dlp's format filter
 * `[protocol^=http]` matches http, https and http_dash_segments; `[protocol^=m3u8]` matches m3u8
 * and m3u8_native; `[url^="https://"]` needs its quotes (unquoted values stop at ":").
 */
export const GUARDED_FORMAT = ['bestaudio', 'best']
  .flatMap((base) =>
    GUARDED_PROTOCOL_PREFIXES.flatMap((protocol) => GUARDED_URL_PREFIXES.map((url) => `${base}[protocol^=${protocol}][url^="${url}"]`)),
  )
  .join('/');

/** File stem of the downloaded media inside outputDir; the extension is whatever the source is. */
export const DOWNLOAD_BASENAME = 'source';

/** Options every run gets: no config files, no cache, no colours, one item only. */
const COMMON_ARGS = ['--ignore-config', '--no-playlist', '--no-cache-dir', '--no-colors'];

export interface YtDlpNetworkOptions {
  /**
   * An empty folder given as --ffmpeg-location, so yt-dlp finds no ffmpeg: with one it hands
   * formats its own downloader cannot fetch (SAMPLE-AES HLS, say) to ffmpeg despite
   * --hls-prefer-native, and ffmpeg ignores the proxy. Our conversion runs on the finished file.
   */
  noFfmpegDir?: string;
  /**
   * A file written with configFileText(): the proxy yt-dlp must use (the guard, with the job's
   * own credentials) and the cookies to send, if any. Handed over in a file only the service's
   * user can read, never on the command line (/proc/<pid>/cmdline is readable by every local
   * user). --ignore-config still loads files given by --config-locations.
   */
  configFile?: string;
  socketTimeoutS?: number;
}

function networkArgs({ configFile, socketTimeoutS, noFfmpegDir }: YtDlpNetworkOptions): string[] {
  const args: string[] = [];
  if (noFfmpegDir !== undefined) args.push('--ffmpeg-location', noFfmpegDir);
  if (configFile !== undefined) args.push('--config-locations', configFile);
  if (socketTimeoutS !== undefined) args.push('--socket-timeout', String(socketTimeoutS));
  return args;
}

/**
 * A job's copy of the operator's cookies (YTDLP_COOKIES_FILE), in its folder: yt-dlp writes its
 * cookie jar back to the file it loaded, so what one job's sites set never reaches another job,
 * nor the operator's file. Relative, to the tool's cwd (the job's folder): no server path in it.
 */
export const COOKIES_FILE_NAME = 'cookies.txt';

/**
 * The text of a yt-dlp configuration file that sets the proxy and, with cookies, the job's copy
 * of them. yt-dlp splits such files like a shell (quotes, `#` comments), so a URL with anything
 * that would need escaping is refused.
 */
export function configFileText(opts: { proxyUrl?: string; cookies?: boolean }): string {
  const lines: string[] = [];
  if (opts.proxyUrl !== undefined) {
    if (!/^[A-Za-z0-9:/@.%_~\[\]-]+$/.test(opts.proxyUrl)) throw new Error('proxy URL has characters a yt-dlp config file would split or comment out');
    lines.push(`--proxy "${opts.proxyUrl}"`);
  }
  if (opts.cookies) lines.push(`--cookies ${COOKIES_FILE_NAME}`);
  return lines.map((line) => `${line}\n`).join('');
}

/**
 * Why `text` is not a cookies file yt-dlp reads without complaint (Netscape format: its header
 * line, then comments, blank lines and lines of 7 tab-separated fields), or null when it is.
 * Checked before a file reaches yt-dlp, which would echo a line it skips to stderr, and so into a
 * job's error: the reason names a line by its number, never its content.
 */
export function netscapeCookiesProblem(text: string): string | null {
  const lines = text.split(/\r?\n/);
  if (!/^#( Netscape)? HTTP Cookie File/.test(lines[0] ?? '')) return 'its first line is not "# Netscape HTTP Cookie File"';
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!.replace(/^#HttpOnly_/, '');
    if (line.trim() === '' || line.startsWith('#')) continue;
    const fields = line.split('\t');
    if (fields.length !== 7) return `line ${i + 1} does not have 7 tab-separated fields`;
    if (!/^\d*$/.test(fields[4]!)) return `line ${i + 1} has an expiry that is not a number`;
  }
  return null;
}

/** Metadata only: prints the info JSON on stdout, downloads no media. */
export function buildProbeArgs(opts: { url: string } & YtDlpNetworkOptions): string[] {
  return [
    ...COMMON_ARGS,
    '--skip-download',
    '--dump-single-json',
    // Warnings stay on: a confined yt-dlp that warns of a refused connection is caught by them.
    '--no-progress',
    ...networkArgs(opts),
    // "--" so a URL starting with "-" cannot be read as an option.
    '--',
    opts.url,
  ];
}

export interface DownloadArgsOptions extends YtDlpNetworkOptions {
  /** Info JSON written from the probe's stdout; when given the URL is not used. */
  infoJsonPath?: string;
  url: string;
  /** A folder the job owns; the file lands at <outputDir>/source.<ext>. */
  outputDir: string;
  maxBytes?: number;
  /** Format selector; default `bestaudio/best`. The worker passes GUARDED_FORMAT. */
  format?: string;
}

export function buildDownloadArgs(opts: DownloadArgsOptions): string[] {
  // -o is an output template: a literal % in the folder must be doubled.
  const outputTemplate = `${opts.outputDir.replaceAll('%', '%%')}/${DOWNLOAD_BASENAME}.%(ext)s`;
  const args = [
    ...COMMON_ARGS,
    '-f',
    opts.format ?? 'bestaudio/best',
    '--newline',
    '--progress',
    '--progress-template',
    PROGRESS_TEMPLATE,
    '--print',
    'after_move:filepath',
    '--no-simulate',
    '-o',
    outputTemplate,
    // A fresh folder per job: nothing to resume, and one predictable file name while downloading.
    '--no-part',
    '--no-mtime',
    '--restrict-filenames',
    // HLS through yt-dlp's own downloader, hence through --proxy (not through an ffmpeg child).
    '--hls-prefer-native',
    // Container fix-ups would run ffmpeg inside yt-dlp; our own conversion reads any container.
    '--fixup',
    'never',
    // A fragment that cannot be had fails the download: a playlist with holes is not the media.
    '--abort-on-unavailable-fragment',
    ...networkArgs(opts),
  ];
  if (opts.maxBytes !== undefined) args.push('--max-filesize', String(opts.maxBytes));
  if (opts.infoJsonPath !== undefined) args.push('--load-info-json', opts.infoJsonPath);
  else args.push('--', opts.url);
  return args;
}

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
      for (const [key, inner] of Object.entries(value)) {
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

const MAX_MESSAGE_CHARS = 500;
const MESSAGE_LINES = 3;
/** CSI sequences (colours, cursor moves) and OSC sequences (console title). */
const ANSI = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]/g;
/** file:// URLs name server paths outright. */
const FILE_URL = /file:\/\/[^\s'"`()<>,;]*/gi;
/**
 * An absolute path with at least two segments ("file:/tmp/x/y" included), but not "://" nor the
 * path of a URL, which follows its host ("127.0.0.1:8080/a/b", "[::1]/a/b") or another "/".
 */
const ABSOLUTE_PATH = /(?<![\w.%\]/-])\/(?!\/)(?:[^\s/'"`()<>,;]+\/)+[^\s'"`()<>,;]*/g;
/** yt-dlp's "please report this issue" trailer adds nothing for a client. */
const REPORT_TRAILER = /;?\s*please report this issue on\s.*$/i;
/** Progress redraws are noise in an error message. */
const PROGRESS_NOISE = /^(?:\[download\]\s+\d|PROGRESS )/;

/**
 * A short message for the job record: the last meaningful stderr lines (ERROR: lines preferred),
 * with the given secrets and paths, every absolute path and ANSI escapes removed, at most ~500
 * characters. `secretsAndPaths` takes the proxy URL (its user and password are removed too,
 * raw and percent-decoded), the job's temp folder, the data dir...
 */
export function cleanToolMessage(stderrTail: string, secretsAndPaths: string[]): string {
  let text = stderrTail.replace(ANSI, '');
  for (const secret of expandSecrets(secretsAndPaths)) {
    text = text.replaceAll(secret, '[redacted]');
  }
  text = text.replace(FILE_URL, '[path]').replace(ABSOLUTE_PATH, '[path]');

  const lines = text
    .split(/\r\n|\r|\n/)
    .map((line) => line.replace(REPORT_TRAILER, '').trim())
    .filter((line) => line !== '' && !PROGRESS_NOISE.test(line));
  const errors = lines.filter((line) => line.startsWith('ERROR:'));
  const chosen = (errors.length > 0 ? errors : lines).slice(-MESSAGE_LINES).join('\n');
  return chosen.length > MAX_MESSAGE_CHARS ? `${chosen.slice(0, MAX_MESSAGE_CHARS - 1)}…` : chosen;
}

/** Each secret, plus the user and password of any that is a URL; longest first so none is half-replaced. */
function expandSecrets(secrets: string[]): string[] {
  const all = new Set<string>();
  for (const secret of secrets) {
    if (secret === '') continue;
    all.add(secret);
    let url: URL | null = null;
    try {
      url = new URL(secret);
    } catch {
      // Not a URL: a path or a bare token.
    }
    for (const part of [url?.username, url?.password]) {
      if (!part) continue;
      all.add(part);
      all.add(safeDecode(part));
    }
  }
  return [...all].sort((a, b) => b.length - a.length);
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

export type YtDlpFailureCode =
  | 'destination_refused'
  | 'file_too_large'
  | 'unsupported_url'
  | 'http_error'
  | 'network_error'
  | 'storage_full'
  | 'unsupported_protocol'
  | 'download_failed';

/**
 * yt-dlp wanted ffmpeg as the downloader (an HLS or DASH feature its own lacks, SAMPLE-AES say)
 * and found none: on purpose, since ffmpeg ignores the proxy (see YtDlpNetworkOptions.noFfmpegDir).
 */
const NEEDS_FFMPEG = /ffmpeg could not be found|ffmpeg is not installed|ffmpeg not found/i;

const FAILURE_PATTERNS: Array<[YtDlpFailureCode, RegExp]> = [
  // The egress proxy refuses a CONNECT (https) with 403. A plain-http 403 from the proxy looks
  // like the origin's own 403 (http_error); the worker checks the guard's refusal list for that.
  ['destination_refused', /Tunnel connection failed: 403/i],
  ['file_too_large', /larger than max-filesize/i],
  // Only GUARDED_FORMAT protocols are selectable: nothing left means every format needs another one.
  ['unsupported_protocol', /Requested format is not available/i],
  ['unsupported_protocol', NEEDS_FFMPEG],
  // The job's working folder (DATA_DIR) is full.
  ['storage_full', /No space left on device|Disk quota exceeded/i],
  ['unsupported_url', /ERROR: Unsupported URL/i],
  ['http_error', /HTTP Error \d{3}/i],
  [
    'network_error',
    /Connection refused|Connection reset|timed out|Name or service not known|Temporary failure in name resolution|No route to host|Network is unreachable|Tunnel connection failed/i,
  ],
];

/** The job error for a failed yt-dlp run: a stable code and a message fit for a client. */
export function describeYtDlpFailure(stderrTail: string, secretsAndPaths: string[]): { code: YtDlpFailureCode; message: string } {
  if (NEEDS_FFMPEG.test(stderrTail)) {
    return {
      code: 'unsupported_protocol',
      message: 'The media can only be downloaded by ffmpeg (an HLS or DASH feature such as SAMPLE-AES), which is not used: it would connect around the egress guard.',
    };
  }
  return { code: classifyYtDlpFailure(stderrTail), message: cleanToolMessage(stderrTail, secretsAndPaths) };
}

/** Maps yt-dlp's stderr to a stable code; 'download_failed' when nothing is recognised. */
export function classifyYtDlpFailure(stderrTail: string): YtDlpFailureCode {
  for (const [code, pattern] of FAILURE_PATTERNS) {
    if (pattern.test(stderrTail)) return code;
  }
  return 'download_failed';
}
