import { z } from 'zod';

/**
 * Why a job failed: one closed list of stable codes, each with the one sentence a person reads as
 * the job's `error.message` and what to do about it. The job record's `error.code` is typed by
 * this list (openapi.json shows it as an enum), and docs/api.md's table of job error codes is
 * generated from it (`npm run docs:errors`, checked by test/unit/error-codes-doc.test.ts).
 *
 * A sentence may name values between braces ({limit}, {status}, {address}...): jobError() fills
 * them in, and the type checker makes every caller give each one. What a sentence leaves out (the
 * downloader's or converter's own words, the egress guard's reason) goes to `detail`.
 */

export const JOB_ERROR_FAMILIES = {
  reaching: 'Reaching the source',
  http: "The source's HTTP answer",
  content: 'What the URL leads to',
  limits: 'Limits',
  service: 'The service',
} as const;

type Family = keyof typeof JOB_ERROR_FAMILIES;

interface Entry {
  family: Family;
  /** The job's error.message, with {name}s filled in: one plain sentence, no jargon of the tools. */
  sentence: string;
  /** What the person who submitted the URL (or the operator, when it is theirs to fix) can do. */
  action: string;
}

export const JOB_ERRORS = {
  host_not_found: {
    family: 'reaching',
    sentence: 'The host name {host} does not exist.',
    action: 'Check the URL for a typing error; the site may have moved or closed.',
  },
  host_lookup_failed: {
    family: 'reaching',
    sentence: 'The host name {host} could not be looked up: the name servers gave no answer in time.',
    action: 'Submit it again later; if every name fails, the operator checks `DNS_SERVERS`.',
  },
  connection_refused: {
    family: 'reaching',
    sentence: 'The source {address} refused the connection: no server is listening there.',
    action: 'Check the URL (its port especially); the server may be down: submit it again later.',
  },
  connect_timeout: {
    family: 'reaching',
    sentence: 'The source {address} did not accept the connection in time.',
    action: 'The server is unreachable or overloaded: submit it again later.',
  },
  no_answer: {
    family: 'reaching',
    sentence: 'The source {address} accepted the connection but sent no answer.',
    action: 'The server is stuck or overloaded: submit it again later.',
  },
  network_error: {
    family: 'reaching',
    sentence: 'The connection to the source failed.',
    action:
      'The fallback of this family (a connection reset, a network that cannot be reached, a TLS failure): see `detail`, and submit it again later.',
  },
  destination_refused: {
    family: 'reaching',
    sentence: 'The source led the downloader to a destination the service does not fetch from.',
    action:
      'Nothing to retry: the egress guard refused a host on the way (a private address, another scheme than http(s), a redirect carrying downloader options); `detail` says which.',
  },
  http_not_found: {
    family: 'http',
    sentence: 'Nothing was found at the source (HTTP {status}).',
    action: 'Check the URL; the media may have been moved or removed.',
  },
  http_access_denied: {
    family: 'http',
    sentence: 'The source refused access to the media (HTTP {status}).',
    action:
      'The media may need a login or be limited to some countries; a login can be given to the downloader by the operator (`YTDLP_COOKIES_FILE`).',
  },
  http_gone: {
    family: 'http',
    sentence: 'The media has been removed from the source (HTTP {status}).',
    action: 'Nothing to retry: the source says it is gone for good.',
  },
  http_rate_limited: {
    family: 'http',
    sentence: 'The source is refusing requests for now: too many were made (HTTP {status}).',
    action: 'Submit it again later.',
  },
  http_server_error: {
    family: 'http',
    sentence: "The source's server failed to answer the request (HTTP {status}).",
    action: 'The problem is at the source: submit it again later.',
  },
  http_error: {
    family: 'http',
    sentence: 'The source answered with an error (HTTP {status}).',
    action: 'The fallback of this family, for a status without a code of its own: check the URL.',
  },
  not_media: {
    family: 'content',
    sentence: 'The page at the URL holds no media the downloader can find.',
    action: 'Submit the address of the media itself, or of a page of a site the downloader supports.',
  },
  unsupported_url: {
    family: 'content',
    sentence: 'The downloader does not support this URL.',
    action: 'Submit the address of the media itself, or of a page of a site the downloader supports.',
  },
  unsupported_protocol: {
    family: 'content',
    sentence: 'The media is offered only in a way the service does not fetch (RTMP, RTSP or ffmpeg-only streaming).',
    action: 'None: such media cannot be fetched through the egress guard. `detail` names the protocols.',
  },
  playlist_not_supported: {
    family: 'content',
    sentence: 'The URL is a playlist, album, channel or feed: it is fetched only when asked for as a whole playlist.',
    action:
      'Submit it again with `playlist` (the page: "Whole playlist or feed", or the failed job\'s "Fetch the whole playlist"; the CLI: `--playlist`): each entry becomes a job of its own. Or submit the URL of one of its items.',
  },
  collection_nested: {
    family: 'content',
    sentence:
      'This entry of a collection is itself a playlist or feed; collections are not expanded inside collections.',
    action: "Submit the entry's URL with `playlist` as a collection of its own.",
  },
  not_a_collection: {
    family: 'content',
    sentence: 'The URL is not a playlist, album, channel or feed: it leads to one item.',
    action: 'Submit it without `playlist`, as a single URL.',
  },
  live_stream: {
    family: 'content',
    sentence: 'Live streams cannot be fetched.',
    action: 'Submit it again once the stream has ended and is offered as a recording.',
  },
  metadata_invalid: {
    family: 'content',
    sentence: 'The downloader returned metadata that could not be read.',
    action: 'Submit it again later; if it persists, the downloader may need an update (the operator).',
  },
  not_audio: {
    family: 'content',
    sentence: 'The downloaded file holds no audio the converter can read.',
    action: 'Check that the URL leads to audio or video; `detail` has the converter’s reason.',
  },
  media_corrupt: {
    family: 'content',
    sentence: 'The downloaded media is damaged or incomplete.',
    action: 'Submit it again later; if it persists, the file at the source is damaged.',
  },
  download_failed: {
    family: 'content',
    sentence: 'The downloader could not get the media.',
    action:
      "The fallback for a downloader's failure without a code of its own: see `detail`. Submit it again later; the operator may need a newer downloader.",
  },
  conversion_failed: {
    family: 'content',
    sentence: 'The conversion to WAV failed.',
    action: "See `detail` for the converter's words; the media may use a format the converter cannot read.",
  },
  file_too_large: {
    family: 'limits',
    sentence: 'The download is larger than the limit of {limit} bytes.',
    action: 'Not fetched: the operator sets the limit (`MAX_DOWNLOAD_BYTES`).',
  },
  output_too_large: {
    family: 'limits',
    sentence: 'The WAV would be larger than the limit of {limit} bytes.',
    action: 'Not stored: the operator sets the limit (`MAX_OUTPUT_BYTES`).',
  },
  duration_exceeded: {
    family: 'limits',
    sentence: 'The media lasts longer than the limit of {limit} s.',
    action: 'Not fetched: the operator sets the limit (`MAX_DURATION_S`).',
  },
  listing_too_large: {
    family: 'limits',
    sentence: 'Listing the playlist took more than its limit of {limit} bytes from the source and was stopped.',
    action: 'Not listed further: the operator sets the limit (`PLAYLIST_LISTING_MAX_BYTES`).',
  },
  listing_timeout: {
    family: 'limits',
    sentence: 'Listing the playlist took longer than {limit} s and was stopped.',
    action:
      'Submit it again later, or with a lower `max_items`; the operator sets the limit (`PLAYLIST_LISTING_TIMEOUT_S`).',
  },
  metadata_timeout: {
    family: 'limits',
    sentence: "Reading the media's metadata took longer than {limit} s and was stopped.",
    action: 'Submit it again later; the operator sets the limit (`METADATA_TIMEOUT_S`).',
  },
  download_stalled: {
    family: 'limits',
    sentence: 'The download gained fewer than {bytes} bytes in {seconds} s and was stopped.',
    action: 'The source is too slow: submit it again later (the operator sets `DOWNLOAD_STALL_S`).',
  },
  fetch_timeout: {
    family: 'limits',
    sentence: 'The fetch took longer than {limit} s and was stopped.',
    action: 'Submit it again later; the operator sets the limit (`FETCH_TIMEOUT_S`).',
  },
  memory_exceeded: {
    family: 'limits',
    sentence: '{tool} needed more than its memory limit of {limit} MiB and was stopped.',
    action: 'The operator sets the limit (`TOOL_MEMORY_BYTES`).',
  },
  cpu_time_exceeded: {
    family: 'limits',
    sentence: '{tool} used more than its CPU time limit of {limit} s and was stopped.',
    action: 'The operator sets the limit (`TOOL_CPU_S`).',
  },
  process_limit_exceeded: {
    family: 'limits',
    sentence: '{tool} started more than its limit of {limit} processes and threads and was stopped.',
    action: 'The operator sets the limit (`TOOL_MAX_PROCESSES`).',
  },
  key_storage_quota_exceeded: {
    family: 'limits',
    sentence:
      'The new audio would take this API key past its storage allowance of {limit} bytes in {hours} h; nothing was stored.',
    action: 'Submit it again later, once older content has left the window (`STORE_BYTES_PER_KEY_PER_DAY`).',
  },
  attempts_exhausted: {
    family: 'limits',
    sentence: 'The fetch was interrupted {attempts} times and is not tried again.',
    action: 'Submit the URL again; the service was restarting or losing its database meanwhile (`MAX_ATTEMPTS`).',
  },
  storage_full: {
    family: 'service',
    sentence: 'The service has no storage space left for this file.',
    action: 'Submit it again later; the operator frees space.',
  },
  downloader_missing: {
    family: 'service',
    sentence: 'The downloader (yt-dlp) is not installed or not executable.',
    action: 'The operator installs it ([yt-dlp](yt-dlp.md)).',
  },
  converter_missing: {
    family: 'service',
    sentence: 'The converter (ffmpeg) is not installed or not executable.',
    action: 'The operator installs it.',
  },
  confinement_unavailable: {
    family: 'service',
    sentence: 'The tools could not be confined to the egress guard, so nothing was fetched.',
    action: "The operator looks at getHealth's `confinement` ([threat model](threat-model.md)).",
  },
  direct_connection_refused: {
    family: 'service',
    sentence: 'The downloader tried to connect around the egress guard and was stopped.',
    action:
      "Nothing to retry: the media's formats asked the downloader to replace its proxy, or a tool tried to connect by itself; `detail` says which.",
  },
  internal_error: {
    family: 'service',
    sentence: 'The fetch failed for an internal reason.',
    action: 'Submit it again; the operator finds the reason in the log.',
  },
} as const satisfies Record<string, Entry>;

export type JobErrorCode = keyof typeof JOB_ERRORS;

export const JOB_ERROR_CODES = Object.keys(JOB_ERRORS) as [JobErrorCode, ...JobErrorCode[]];

export const JobErrorCodeSchema = z.enum(JOB_ERROR_CODES);

/** Why a job failed, as its row keeps it (error_code, error_message, error_detail, error_http_status). */
export interface JobError {
  code: JobErrorCode;
  /** The code's sentence, its values filled in. */
  message: string;
  /**
   * The specifics, in the words of the part that met the failure: the downloader's or the
   * converter's own text (trimmed, no secret, no server path: ./tools/tool-message.ts), the egress
   * guard's reason; null when there is nothing more to say.
   */
  detail: string | null;
  /** The origin's HTTP status, for the http_* codes; else null. */
  httpStatus: number | null;
}

/** The names between braces in a sentence. */
type Placeholders<S extends string> = S extends `${string}{${infer Name}}${infer Rest}`
  ? Name | Placeholders<Rest>
  : never;
type NamesOf<C extends JobErrorCode> = Placeholders<(typeof JOB_ERRORS)[C]['sentence']>;

interface Extras {
  detail?: string | null;
  httpStatus?: number | null;
}
type Options<C extends JobErrorCode> = Extras &
  ([NamesOf<C>] extends [never] ? { values?: undefined } : { values: Record<NamesOf<C>, string | number> });

/** The job error for `code`: its sentence with `values` filled in, and the extras given. */
export function jobError<C extends JobErrorCode>(
  code: C,
  ...[options]: [NamesOf<C>] extends [never] ? [options?: Options<C>] : [options: Options<C>]
): JobError {
  const values: Record<string, string | number> = options?.values ?? {};
  const message = JOB_ERRORS[code].sentence.replace(/\{(\w+)\}/g, (whole, name: string) =>
    name in values ? String(values[name]) : whole,
  );
  return { code, message, detail: options?.detail ?? null, httpStatus: options?.httpStatus ?? null };
}

/** The codes the egress guard gives a connection it could not make, or that got no answer (src/egress/guard.ts). */
export type UpstreamFailureCode = Extract<
  JobErrorCode,
  'host_not_found' | 'host_lookup_failed' | 'connection_refused' | 'connect_timeout' | 'no_answer' | 'network_error'
>;

/** The code for an HTTP error status from the origin. */
export function httpStatusCode(status: number): Extract<JobErrorCode, `http_${string}`> {
  if (status === 404) return 'http_not_found';
  if (status === 401 || status === 403) return 'http_access_denied';
  if (status === 410) return 'http_gone';
  if (status === 429) return 'http_rate_limited';
  if (status >= 500 && status <= 599) return 'http_server_error';
  return 'http_error';
}

/** The job error for an HTTP error status from the origin, with the downloader's words as detail. */
export function httpStatusError(status: number, detail: string | null): JobError {
  return jobError(httpStatusCode(status), { values: { status }, detail, httpStatus: status });
}

/** The job error for a connection to host:port (an IPv6 host with or without its brackets) that failed as `code` says. */
export function connectionError(
  code: UpstreamFailureCode,
  host: string,
  port: number,
  detail: string | null,
): JobError {
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  const address = `${bare.includes(':') ? `[${bare}]` : bare}:${port}`;
  switch (code) {
    case 'host_not_found':
    case 'host_lookup_failed':
      return jobError(code, { values: { host: bare }, detail });
    case 'network_error':
      return jobError(code, { detail });
    default:
      return jobError(code, { values: { address }, detail });
  }
}
