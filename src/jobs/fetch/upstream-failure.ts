import type { UpstreamFailure } from '../../egress/guard.js';
import { connectionError, type JobError, type JobErrorCode } from '../../job-errors.js';

/**
 * What the egress guard saw of a job's connections (src/egress/guard.ts records, per session, each
 * connection it could not make and each one the origin never answered) explains a failure better
 * than the downloader's words: yt-dlp only sees the guard's 502 where the origin refused the
 * connection or its name does not exist, and only its own time running out where the origin took
 * the request and never answered.
 */

/** Failures the guard's own 502 (or a connection it dropped) makes of a connection it could not make. */
const ANSWERED_BY_THE_GUARD = new Set<JobErrorCode>([
  'connection_refused',
  'host_not_found',
  'host_lookup_failed',
  'connect_timeout',
  'no_answer',
  'network_error',
  'download_failed',
]);

/** The job's or the downloader's time ran out: waiting on what? */
const WAITED = new Set<JobErrorCode>(['metadata_timeout', 'download_stalled', 'fetch_timeout', 'no_answer']);

/** What the guard says is waiting, rather than failing outright. */
const STILL_WAITING = new Set<JobErrorCode>(['no_answer', 'connect_timeout', 'host_lookup_failed']);

/** `error`, or the cause the guard recorded in its place; the error's detail (the downloader's words) is kept. */
export function explainByUpstream(error: JobError, failures: readonly UpstreamFailure[]): JobError {
  if (failures.length === 0) return error;
  const guardsOwn =
    ANSWERED_BY_THE_GUARD.has(error.code) || (error.code === 'http_server_error' && error.httpStatus === 502);
  if (guardsOwn) {
    // A connection it could not make, rather than one that is still waiting: the guard answered 502 for that one.
    const cause = failures.findLast((failure) => failure.code !== 'no_answer') ?? failures.at(-1)!;
    return connectionError(cause.code, cause.host, cause.port, error.detail);
  }
  if (WAITED.has(error.code)) {
    const cause = failures.findLast((failure) => STILL_WAITING.has(failure.code));
    if (cause) return connectionError(cause.code, cause.host, cause.port, error.detail ?? error.message);
  }
  return error;
}
