import {
  connectionError,
  httpStatusCode,
  httpStatusError,
  jobError,
  type JobError,
  type JobErrorCode,
  type UpstreamFailureCode,
} from '../job-errors.js';
import { cleanToolMessage } from './tool-message.js';

/**
 * Why a yt-dlp run failed, as a job error (../job-errors.ts), from what it wrote on stderr; its
 * own words, cleaned, become the error's detail. Through the egress guard, a connection the guard
 * could not make reaches yt-dlp as the guard's 502 ("HTTP Error 502: Bad Gateway", or "Tunnel
 * connection failed: 502" for https): the fetch task puts the cause the guard recorded in its place
 * (src/jobs/fetch/upstream-failure.ts). The network patterns below serve a run without the guard.
 *
 * As Debian's yt-dlp 2023.03.04 and a current one word it (test/unit/tools-integration.test.ts,
 * test/unit/tools-ytdlp.test.ts): a proxy refusing CONNECT (https) gives "Tunnel connection
 * failed: 403 Forbidden"; a proxy refusing a plain-http request gives "HTTP Error 403: Forbidden",
 * like an origin would (the task checks the guard's refusals for that); a page without media
 * gives "Unsupported URL" after the generic extractor's "Falling back on generic information
 * extractor" warning.
 */
export type YtDlpFailureCode = Extract<
  JobErrorCode,
  | 'destination_refused'
  | 'file_too_large'
  | 'unsupported_url'
  | 'not_media'
  | 'storage_full'
  | 'unsupported_protocol'
  | 'download_failed'
  | `http_${string}`
  | UpstreamFailureCode
>;

type HttpCode = Extract<YtDlpFailureCode, `http_${string}`>;

/** The code, and the origin's HTTP status for the http_* codes. */
export type YtDlpFailure =
  { code: HttpCode; httpStatus: number } | { code: Exclude<YtDlpFailureCode, HttpCode>; httpStatus: null };

/**
 * yt-dlp wanted ffmpeg as the downloader (an HLS or DASH feature its own lacks, SAMPLE-AES say)
 * and found none: on purpose, since ffmpeg ignores the proxy (see YtDlpNetworkOptions.noFfmpegDir, ./ytdlp-args.ts).
 */
const NEEDS_FFMPEG = /ffmpeg could not be found|ffmpeg is not installed|ffmpeg not found/i;
/** The generic extractor read the page and found nothing in it: printed before its "Unsupported URL". */
const GENERIC_FALLBACK = /Falling back on generic information extractor/i;
const HTTP_STATUS = /HTTP Error (\d{3})/i;

const FAILURE_PATTERNS: Array<[Exclude<YtDlpFailureCode, HttpCode>, RegExp]> = [
  // The egress proxy refuses a CONNECT (https) with 403. A plain-http 403 from the proxy looks
  // like the origin's own 403 (http_access_denied); the task checks the guard's refusal list for that.
  ['destination_refused', /Tunnel connection failed: 403/i],
  ['file_too_large', /larger than max-filesize/i],
  // Only GUARDED_FORMAT protocols are selectable (./ytdlp-args.ts): nothing left means every format needs another one.
  ['unsupported_protocol', /Requested format is not available/i],
  ['unsupported_protocol', NEEDS_FFMPEG],
  // The job's working folder (DATA_DIR) is full.
  ['storage_full', /No space left on device|Disk quota exceeded/i],
];

/** Connections that failed, as yt-dlp words them when it connects by itself; after any HTTP status. */
const NETWORK_PATTERNS: Array<[UpstreamFailureCode, RegExp]> = [
  ['connection_refused', /Connection refused/i],
  ['host_not_found', /Name or service not known|No address associated with hostname|nodename nor servname/i],
  ['host_lookup_failed', /Temporary failure in name resolution/i],
  ['connect_timeout', /connect timeout|Connection to \S+ timed out/i],
  ['no_answer', /timed out/i],
  [
    'network_error',
    /Connection reset|Remote end closed|No route to host|Network is unreachable|Tunnel connection failed|CERTIFICATE_VERIFY_FAILED|SSL/i,
  ],
];

/** Maps yt-dlp's stderr to a code of the job error list; 'download_failed' when nothing is recognised. */
export function classifyYtDlpFailure(stderrTail: string): YtDlpFailure {
  for (const [code, pattern] of FAILURE_PATTERNS) {
    if (pattern.test(stderrTail)) return { code, httpStatus: null };
  }
  if (/ERROR: Unsupported URL/i.test(stderrTail)) {
    return { code: GENERIC_FALLBACK.test(stderrTail) ? 'not_media' : 'unsupported_url', httpStatus: null };
  }
  const status = HTTP_STATUS.exec(stderrTail);
  if (status) {
    const httpStatus = Number(status[1]);
    return { code: httpStatusCode(httpStatus), httpStatus };
  }
  for (const [code, pattern] of NETWORK_PATTERNS) {
    if (pattern.test(stderrTail)) return { code, httpStatus: null };
  }
  return { code: 'download_failed', httpStatus: null };
}

export interface YtDlpFailureContext {
  /** Secrets and server paths kept out of the detail (cleanToolMessage). */
  hide: string[];
  /** The job's URL: its host names a connection that failed, when nothing better does. */
  url: string;
  /** MAX_DOWNLOAD_BYTES. */
  maxBytes: number;
}

/** The job error for a failed yt-dlp run: its code, the code's sentence, and yt-dlp's own words as detail. */
export function describeYtDlpFailure(stderrTail: string, context: YtDlpFailureContext): JobError {
  const detail = cleanToolMessage(stderrTail, context.hide) || null;
  if (NEEDS_FFMPEG.test(stderrTail)) {
    return jobError('unsupported_protocol', {
      detail:
        'The media can only be downloaded by ffmpeg (an HLS or DASH feature such as SAMPLE-AES), which is not used: it would connect around the egress guard.',
    });
  }
  const failure = classifyYtDlpFailure(stderrTail);
  if (failure.httpStatus !== null) return httpStatusError(failure.httpStatus, detail);
  const code = failure.code;
  switch (code) {
    case 'file_too_large':
      return jobError(code, { values: { limit: context.maxBytes }, detail });
    case 'host_not_found':
    case 'host_lookup_failed':
    case 'connection_refused':
    case 'connect_timeout':
    case 'no_answer':
    case 'network_error': {
      const url = new URL(context.url);
      const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
      return connectionError(code, url.hostname, port, detail);
    }
    default:
      return jobError(code, { detail });
  }
}
