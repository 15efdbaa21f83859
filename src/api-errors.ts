import { z } from 'zod';

/**
 * The API's error codes: one closed list of the stable `code` of every problem document
 * (RFC 9457, application/problem+json) the service answers, each with its kind (which fixes the
 * HTTP status) and one line on what it means. ServiceError's code and the problem documents of
 * src/http/problem.ts are typed by this list, so an unknown code fails the type check; openapi.json
 * shows `code` as the `ApiErrorCode` enum, and docs/api.md's table of API error codes is generated
 * from it (`npm run docs:errors`, checked by test/unit/error-codes-doc.test.ts). Clients switch on
 * these strings: a code, once listed, keeps its spelling and its status.
 *
 * A job's own failure codes are another list (src/job-errors.ts): they say why a fetch failed, in
 * the job record, not why a request was refused.
 */

/** What went wrong, in words the HTTP edge maps to a status. */
export const ERROR_KIND_STATUS = {
  invalid_input: 400, // malformed request
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  range_not_satisfiable: 416,
  refused: 422, // well-formed, but policy refuses it (a URL's destination, say)
  rate_limited: 429,
  internal: 500,
  unavailable: 503,
} as const;

export type ErrorKind = keyof typeof ERROR_KIND_STATUS;

/**
 * The address ranges the destination policy refuses (src/policy/address.ts, whose tables hold
 * the blocks), each refused with the code `address_<range>`, and what the range is. An IPv6 form
 * that carries a refused IPv4 address is refused with the IPv4's range.
 */
export const REFUSED_ADDRESS_RANGES = {
  invalid: 'not an IP address (a resolver answered something that does not parse)',
  unspecified: 'unspecified (0.0.0.0/8, ::)',
  loopback: 'loopback (127.0.0.0/8, ::1)',
  private: 'private (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16)',
  link_local: 'link-local (169.254.0.0/16, the cloud metadata address among them; fe80::/10)',
  cgnat: 'in the shared carrier-grade NAT space (100.64.0.0/10)',
  broadcast: 'the limited broadcast address (255.255.255.255)',
  multicast: 'multicast (224.0.0.0/4, ff00::/8)',
  documentation: 'reserved for documentation (TEST-NET-1, -2 and -3, 2001:db8::/32, 3fff::/20)',
  benchmarking: 'reserved for benchmarking (198.18.0.0/15, 2001:2::/48)',
  reserved: 'reserved (240.0.0.0/4, IETF protocol assignments, IPv6 outside 2000::/3)',
  as112: 'in an AS112 DNS sink (192.31.196.0/24, 192.175.48.0/24, 2001:4:112::/48, 2620:4f:8000::/48)',
  amt: 'in the automatic multicast tunnelling range (192.52.193.0/24, 2001:3::/32)',
  orchid: 'an ORCHID one (2001:10::/28, 2001:20::/28)',
  unique_local: 'a unique local IPv6 one (fc00::/7)',
  site_local: 'a deprecated site-local IPv6 one (fec0::/10)',
  nat64_local: 'in the local-use NAT64 prefix (64:ff9b:1::/48)',
  ipv4_compatible: 'a deprecated IPv4-compatible IPv6 one (::/96)',
  ipv4_translated: 'an IPv4-translated IPv6 one (::ffff:0:0:0/96)',
  six_to_four: 'a 6to4 one (2002::/16)',
  teredo: 'a Teredo one (2001::/32)',
} as const;

export type RefusedAddressRange = keyof typeof REFUSED_ADDRESS_RANGES;

interface Entry {
  kind: ErrorKind;
  /** One line for docs/api.md: when the code is answered, and the problem's extra members. */
  meaning: string;
}

const REQUEST_ERRORS = {
  validation_failed: {
    kind: 'invalid_input',
    meaning: 'The request does not match its schema; `errors` lists each field (`path`, `message`).',
  },
  invalid_json: { kind: 'invalid_input', meaning: 'The request body is not valid JSON.' },
  url_invalid: {
    kind: 'invalid_input',
    meaning: 'The URL does not parse, holds control characters, or its host has an empty label.',
  },
  url_host_missing: { kind: 'invalid_input', meaning: 'The URL has no host.' },
  url_scheme_not_allowed: { kind: 'invalid_input', meaning: 'The URL is neither http nor https.' },
  url_credentials_not_allowed: { kind: 'invalid_input', meaning: 'The URL carries a user name or password.' },
  url_smuggled_data: {
    kind: 'invalid_input',
    meaning: 'The URL carries downloader options (`__youtubedl_smuggle`, even percent-encoded).',
  },
  url_too_long: { kind: 'invalid_input', meaning: 'The URL is longer than 2048 characters.' },
  host_invalid: { kind: 'invalid_input', meaning: 'The destination host name is not a valid one (`host`).' },
  port_invalid: { kind: 'invalid_input', meaning: 'The destination port is not a valid TCP port (`host`, `port`).' },
  callback_url_required: {
    kind: 'invalid_input',
    meaning:
      '`playlist.item_callbacks` asks for a callback per child job, but the submission has no `callback_url` to send them to.',
  },
  too_many_jobs: {
    kind: 'invalid_input',
    meaning: 'getEvents names more jobs than one stream carries (`max_jobs`).',
  },
  artifact_path_invalid: { kind: 'invalid_input', meaning: "The artifact's content id or name is malformed." },
  unauthorized: {
    kind: 'unauthorized',
    meaning: 'No valid API key (nor, for an artifact, a signed URL); it never says which part was wrong.',
  },
  signature_invalid: { kind: 'forbidden', meaning: "The signed URL's signature is not valid." },
  signature_expired: { kind: 'forbidden', meaning: 'The signed URL has expired.' },
  job_not_found: {
    kind: 'not_found',
    meaning: 'No job has this id (getEvents: `job_ids` lists the ids that name no job).',
  },
  job_not_collection: {
    kind: 'not_found',
    meaning: 'listJobItems on a job that fetches one source: only a collection (`kind` `collection`) has items.',
  },
  artifact_not_found: { kind: 'not_found', meaning: 'No artifact has this content id and name.' },
  scrub_not_found: { kind: 'not_found', meaning: 'No scrub pass has run on this node since it started.' },
  route_not_found: { kind: 'not_found', meaning: 'No operation has this method and path.' },
  job_already_finished: {
    kind: 'conflict',
    meaning: 'cancelJob on a job that is already done or failed (`status`).',
  },
  scrub_running_elsewhere: { kind: 'conflict', meaning: 'Another node is scrubbing the store (`node_id`).' },
  body_too_large: { kind: 'payload_too_large', meaning: "The request body is larger than the operation's limit." },
  unsupported_media_type: {
    kind: 'unsupported_media_type',
    meaning: 'The request body is not declared as JSON (`application/json` or `application/<name>+json`).',
  },
  range_not_satisfiable: {
    kind: 'range_not_satisfiable',
    meaning: 'The requested range lies beyond the end of the artifact (`Content-Range` gives its size).',
  },
  host_localhost: {
    kind: 'refused',
    meaning: 'The destination host is localhost or a name under .localhost (`host`).',
  },
  host_unresolvable: {
    kind: 'refused',
    meaning: 'The destination host name could not be resolved (`host`, `reason`).',
  },
  collection_nested: {
    kind: 'refused',
    meaning: 'An item of a collection that is itself a collection: collections are not expanded inside collections.',
  },
} as const satisfies Record<string, Entry>;

type AddressCode = `address_${RefusedAddressRange}`;

const ADDRESS_ERRORS = Object.fromEntries(
  Object.entries(REFUSED_ADDRESS_RANGES).map(([range, what]) => [
    `address_${range}`,
    {
      kind: 'refused',
      meaning: `The destination address is ${what}: refused (\`host\`, \`address\`, \`range\`).`,
    },
  ]),
) as Record<AddressCode, { kind: 'refused'; meaning: string }>;

const SERVICE_ERRORS = {
  rate_limited: { kind: 'rate_limited', meaning: "The API key's rate limit is spent; see `Retry-After`." },
  queue_full: { kind: 'rate_limited', meaning: 'Too many jobs are waiting; see `Retry-After`.' },
  too_many_event_streams: {
    kind: 'rate_limited',
    meaning: 'Too many event streams are open (`limit`: `per_key` or `per_node`); see `Retry-After`.',
  },
  internal_error: { kind: 'internal', meaning: 'The service failed to handle the request; the log says why.' },
  shutting_down: { kind: 'unavailable', meaning: 'The node is draining after SIGTERM; try another or again shortly.' },
  database_unavailable: {
    kind: 'unavailable',
    meaning: 'The database cannot be reached or refuses this node; nothing was stored; see `Retry-After`.',
  },
  storage_full: {
    kind: 'unavailable',
    meaning: 'The database refused a write for want of space; nothing was stored; see `Retry-After`.',
  },
  confinement_unavailable: {
    kind: 'unavailable',
    meaning: 'Fetching is disabled: the tools cannot be confined on this host (see `/healthz`); see `Retry-After`.',
  },
} as const satisfies Record<string, Entry>;

export const API_ERRORS = { ...REQUEST_ERRORS, ...ADDRESS_ERRORS, ...SERVICE_ERRORS };

export type ApiErrorCode = keyof typeof API_ERRORS;

/** The kind of a code (or of any of a union of codes). */
export type KindOf<C extends ApiErrorCode> = (typeof API_ERRORS)[C]['kind'];

/** The codes of one kind. */
export type ApiErrorCodeOf<K extends ErrorKind> = {
  [C in ApiErrorCode]: KindOf<C> extends K ? C : never;
}[ApiErrorCode];

export const API_ERROR_CODES = Object.keys(API_ERRORS) as [ApiErrorCode, ...ApiErrorCode[]];

export const ApiErrorCodeSchema = z.enum(API_ERROR_CODES);

/** The HTTP status a code is answered with. */
export function apiErrorStatus(code: ApiErrorCode): (typeof ERROR_KIND_STATUS)[ErrorKind] {
  return ERROR_KIND_STATUS[API_ERRORS[code].kind];
}
