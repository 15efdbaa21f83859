import { cleanToolMessage } from './tool-message.js';

/**
 * Why a yt-dlp run failed, as a stable code for the job record, from what it wrote on stderr.
 *
 * As Debian's yt-dlp 2023.03.04 words it (test/unit/tools-integration.test.ts): a proxy refusing
 * CONNECT (https) gives "Tunnel connection failed: 403 Forbidden"; a proxy refusing a plain-http
 * request gives "HTTP Error 403: Forbidden", like an origin would.
 */
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
 * and found none: on purpose, since ffmpeg ignores the proxy (see YtDlpNetworkOptions.noFfmpegDir, ./ytdlp-args.ts).
 */
const NEEDS_FFMPEG = /ffmpeg could not be found|ffmpeg is not installed|ffmpeg not found/i;

const FAILURE_PATTERNS: Array<[YtDlpFailureCode, RegExp]> = [
  // The egress proxy refuses a CONNECT (https) with 403. A plain-http 403 from the proxy looks
  // like the origin's own 403 (http_error); the worker checks the guard's refusal list for that.
  ['destination_refused', /Tunnel connection failed: 403/i],
  ['file_too_large', /larger than max-filesize/i],
  // Only GUARDED_FORMAT protocols are selectable (./ytdlp-args.ts): nothing left means every format needs another one.
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
export function describeYtDlpFailure(
  stderrTail: string,
  secretsAndPaths: string[],
): { code: YtDlpFailureCode; message: string } {
  if (NEEDS_FFMPEG.test(stderrTail)) {
    return {
      code: 'unsupported_protocol',
      message:
        'The media can only be downloaded by ffmpeg (an HLS or DASH feature such as SAMPLE-AES), which is not used: it would connect around the egress guard.',
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
