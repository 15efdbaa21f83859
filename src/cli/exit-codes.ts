/** The CLI's exit codes (docs/cli.md). Scripts switch on them: keep them stable. */
export const EXIT = {
  /** fetch: the WAV is written and its SHA-256 is the content id; status: shown; cancel: canceled. */
  ok: 0,
  /** fetch: the job failed or was canceled (its error code is printed); --playlist: an entry was not saved (refused, failed, canceled) or the listing failed. */
  jobFailed: 1,
  /** Bad arguments, or SOURCE_FETCH_URL / SOURCE_FETCH_API_KEY missing or malformed. */
  usage: 2,
  /** The service refused the request (4xx): a refused URL, a bad key, no such job, a finished job, a limit, a scrub running on another node. */
  refused: 3,
  /** The service could not be reached, failed (5xx), or answered something that is not its API (scrub: the pass failed or stopped); also a bug of the CLI's own. */
  unavailable: 4,
  /** The downloaded WAV's SHA-256 is not its content id (nothing is left at the output path). */
  checksumMismatch: 5,
  /** The output file could not be written. */
  writeFailed: 6,
  /** scrub: the pass ended and found corrupt, missing or unreadable artifacts (listed). */
  storeProblems: 7,
  /** Interrupted (Ctrl-C); the job goes on in the service. */
  interrupted: 130,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];
