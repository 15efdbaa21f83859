/**
 * yt-dlp's command lines and the configuration file a job hands it. Nothing here runs a process;
 * what yt-dlp prints is read by ./ytdlp-output.ts, and why a run failed by ./ytdlp-failure.ts.
 *
 * Written against Debian's yt-dlp 2023.03.04 (checked with the real binary, see
 * test/unit/tools-integration.test.ts):
 * - A job is one run (`buildDownloadArgs`) that extracts and downloads, with a stop between the
 *   two where the service decides. Once extracted, before any format is chosen, the run prints
 *   the media's info JSON as one line (INFO_PREFIX, then `%()j`: --print pre_process). Before
 *   the download, its --exec before_dl command makes a FIFO in the run's cwd, GATE_FIFO, prints
 *   GATE_LINE and reads a line from GATE_FIFO: yt-dlp waits for that command to end, so nothing
 *   is downloaded until the service has written to the FIFO (go on) or stopped the run. Every
 *   item of a playlist would pass through the same two points; the service stops the run at the
 *   first. --exec appends the file's path to a command without a template field, which
 *   would show it on the command line of the gate's shell: hence a field no info has, NO_FIELD,
 *   empty, quoted with `q` (a current yt-dlp refuses `s` in --exec).
 * - Stdout also carries progress lines (PROGRESS_TEMPLATE, read by parseProgressLine) and, once
 *   the file is in place, its absolute path (--print after_move:filepath). A stdout line that is
 *   none of the others is that path; the worker must check it lies inside its outputDir.
 * - --print implies --quiet, and quiet turns progress off unless --progress is given. A
 *   pre_process or after_move print does not imply --simulate; --no-simulate is passed anyway
 *   so that stays true whatever the print stage.
 * - --max-filesize only works when the size is announced (Content-Length). A refusal is silent
 *   under --quiet: yt-dlp exits 0 and prints no path. So "exit 0 without a path while maxBytes
 *   was set" means file_too_large; and for unannounced sizes the worker must enforce its byte
 *   cap itself from the progress lines (abort when downloadedBytes passes it).
 * - HLS: fragments come through yt-dlp's own downloader (progress has only an estimate until the
 *   end). With --fixup never the file is named source.mp4 but holds MPEG-TS; ffmpeg goes by
 *   content, not by name.
 */

/**
 * Prints e.g. "PROGRESS 15360 37764 NA" (downloaded, total, estimate). %(...)d prints integers
 * (total_bytes_estimate is a float) and NA for a missing value. Read by parseProgressLine
 * (./ytdlp-output.ts).
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
    GUARDED_PROTOCOL_PREFIXES.flatMap((protocol) =>
      GUARDED_URL_PREFIXES.map((url) => `${base}[protocol^=${protocol}][url^="${url}"]`),
    ),
  )
  .join('/');

/** Starts the stdout line that holds the media's info JSON, printed once extracted. */
export const INFO_PREFIX = 'INFO ';
/** The stdout line that says yt-dlp waits at the gate, before downloading. */
export const GATE_LINE = 'GATE';
/** The FIFO yt-dlp's gate command makes in the run's cwd and reads one line from. */
export const GATE_FIFO = 'gate';
/** An output template field no info dict has. */
const NO_FIELD = 'source_fetch_no_field';

/** File stem of the downloaded media inside outputDir; the extension is whatever the source is. */
export const DOWNLOAD_BASENAME = 'source';

/** Options every run gets: no config files, no cache, no colours. */
const BASE_ARGS = ['--ignore-config', '--no-cache-dir', '--no-colors'];
/** A download run's: one item only. */
const COMMON_ARGS = [...BASE_ARGS, '--no-playlist'];

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
    if (!/^[A-Za-z0-9:/@.%_~[\]-]+$/.test(opts.proxyUrl))
      throw new Error('proxy URL has characters a yt-dlp config file would split or comment out');
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
  if (!/^#( Netscape)? HTTP Cookie File/.test(lines[0] ?? ''))
    return 'its first line is not "# Netscape HTTP Cookie File"';
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!.replace(/^#HttpOnly_/, '');
    if (line.trim() === '' || line.startsWith('#')) continue;
    const fields = line.split('\t');
    if (fields.length !== 7) return `line ${i + 1} does not have 7 tab-separated fields`;
    if (!/^\d*$/.test(fields[4]!)) return `line ${i + 1} has an expiry that is not a number`;
  }
  return null;
}

export interface DownloadArgsOptions extends YtDlpNetworkOptions {
  url: string;
  /** A folder the job owns; the file lands at <outputDir>/source.<ext>. */
  outputDir: string;
  maxBytes?: number;
  /** Format selector; default `bestaudio/best`. The worker passes GUARDED_FORMAT. */
  format?: string;
}

export function buildDownloadArgs(opts: DownloadArgsOptions): string[] {
  return [
    ...downloadOptions(opts),
    '--exec',
    `before_dl:: %(${NO_FIELD}|)q; mkfifo ${GATE_FIFO} && echo ${GATE_LINE} && read -r go < ${GATE_FIFO}`,
    '--no-simulate',
    // "--" so a URL starting with "-" cannot be read as an option.
    '--',
    opts.url,
  ];
}

/** Starts each stdout line of a listing run: one entry (LISTING_FIELDS, read by ./ytdlp-listing.ts). */
export const LISTING_PREFIX = 'ENTRY ';

/**
 * The fields a listing run prints of each entry, as one JSON object (`%(.{...})j`: a field the
 * entry lacks is left out). `url` is the entry's own URL for a URL entry (`_type` url or
 * url_transparent, as a feed's items come) and the chosen format's for an entry the extractor
 * resolved in place (an XSPF track, a page's `<audio>`); the playlist_* fields are the
 * collection's, which every entry carries.
 */
const LISTING_FIELDS = [
  '_type',
  'url',
  'title',
  'playlist_index',
  'playlist_id',
  'playlist_title',
  'playlist_webpage_url',
];

export interface ListingArgsOptions extends YtDlpNetworkOptions {
  url: string;
  /** Entries 1 to `items` are listed, lazily: those past it are neither read nor resolved. */
  items: number;
}

/**
 * A collection's listing: its entries, one line each as they come (LISTING_PREFIX), without
 * resolving any (--flat-playlist: a feed item's URL is printed, never fetched) and without
 * reading entries past `items` where the extractor yields them lazily (--lazy-playlist; the
 * generic extractor still reads a whole feed before its first entry: the egress guard's byte
 * limit bounds that). --print implies --simulate: nothing is downloaded. For a URL that is one
 * item the line comes without playlist_index.
 */
export function buildListingArgs(opts: ListingArgsOptions): string[] {
  return [
    ...BASE_ARGS,
    '--yes-playlist',
    '--flat-playlist',
    '--lazy-playlist',
    '--playlist-items',
    `1:${opts.items}`,
    // yt-dlp's default ('only_download') reports an extraction's unexpected exception by its text
    // alone: a MemoryError at the memory ceiling would be a bare "ERROR: ". Aborting lets it end
    // the run with its traceback, which names it (../sandbox/limits.ts exceededLimit).
    '--abort-on-error',
    '--print',
    `${LISTING_PREFIX}%(.{${LISTING_FIELDS.join(',')}})j`,
    ...networkArgs(opts),
    '--',
    opts.url,
  ];
}

/** The file a warm-up run's info JSON is written to, in the folder it runs in. */
const WARM_UP_INFO_FILE = 'warm-up.info.json';

/**
 * A job's run, simulated on made-up media (a direct link's info JSON, as yt-dlp's generic
 * extractor gives it, loaded from WARM_UP_INFO_FILE): no network, no gate, nothing written. The
 * resident sandbox makes it once, before it serves runs, so that what a job's run would otherwise
 * compile at each start (the format selector, the print and output templates, the regular
 * expressions behind them) is in the memory every run inherits.
 */
export function buildWarmUpRun(): { argv: string[]; info: Record<string, unknown>; info_file: string } {
  const url = 'http://warm-up.invalid/media.mp3';
  const format = { format_id: 'mp3', url, ext: 'mp3', protocol: 'http', vcodec: 'none', acodec: 'mp3' };
  return {
    argv: [
      ...downloadOptions({ outputDir: '.', format: GUARDED_FORMAT, maxBytes: 1 << 30, noFfmpegDir: '.' }),
      '--simulate',
      '--load-info-json',
      WARM_UP_INFO_FILE,
    ],
    info: {
      id: 'media',
      title: 'media',
      webpage_url: url,
      extractor: 'generic',
      extractor_key: 'Generic',
      direct: true,
      formats: [format],
      ...format,
    },
    info_file: WARM_UP_INFO_FILE,
  };
}

/** A download run's options but the gate, --simulate's choice and the URL. */
function downloadOptions(opts: Omit<DownloadArgsOptions, 'url'>): string[] {
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
    `pre_process:${INFO_PREFIX}%()j`,
    '--print',
    'after_move:filepath',
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
  return args;
}
