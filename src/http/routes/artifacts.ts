import { createRoute, z } from '@hono/zod-openapi';
import { createArtifactResolver, invalidArtifactPath, type ResolvedArtifact } from '../../delivery/artifact-path.js';
import { httpDate, ifRangeAllows, isNotModified, type Validators } from '../../delivery/conditional.js';
import { parseRange } from '../../delivery/range.js';
import { requestedDownloadName } from '../../delivery/download-name.js';
import {
  cachingHeaders,
  contentDisposition,
  representationHeaders,
  type AccessGrant,
} from '../../delivery/representation.js';
import { EXPIRES_PARAM, FILENAME_PARAM, SIGNATURE_PARAM, type UrlSigner } from '../../delivery/signed-url.js';
import { ServiceError } from '../../errors.js';
import { apiKeySecurity, problemResponseSpec } from '../error-responses.js';
import type { KeyAdmission } from '../key-admission.js';
import type { Answer } from '../answer.js';
import { bindOperation, type ApiRequest, type OperationBinding } from '../operation.js';
import { problemAnswer } from '../problem.js';
import { ARTIFACT_ROUTE } from '../route-template.js';

/**
 * getArtifact, `GET|HEAD /artifacts/{cid}/{name}`: who may read what, conditional requests and
 * ranges. The bytes then come from nginx (internal redirect, when `accelRedirectPrefix` is set and
 * the request came through nginx) or from the file itself, sent by whichever dispatcher answers (../node-router.ts,
 * ../hono-operation.ts). Behind nginx, signed URLs reach the app only when nginx could not
 * say yes itself (nginx/templates/default.conf.template).
 */

/**
 * Caching headers on answers nginx completes (internal redirects): nginx adds them to successes
 * only, so that its own 404 for content evicted meanwhile is never cached.
 */
export const PROXY_CACHE_CONTROL_HEADER = 'x-artifact-cache-control';
export const PROXY_EXPIRES_HEADER = 'x-artifact-expires';

/**
 * The request header by which nginx in front says it turns an internal redirect into the file's
 * bytes (the convention of Rack::Sendfile): the template sets it on every request it proxies,
 * replacing any a client sent. Without it (a client on the app's own port) the app streams the
 * file even with `accelRedirectPrefix` set; a client that sends it itself gets the empty
 * redirect it asked for, and nothing it could not read anyway.
 */
export const ACCEL_REQUEST_HEADER = 'x-sendfile-type';
const ACCEL_REQUEST_VALUE = 'x-accel-redirect';

export interface ArtifactOperationDeps {
  artifactRoot: string;
  /**
   * e.g. '/_artifacts/': answer requests that came through nginx (ACCEL_REQUEST_HEADER) with
   * X-Accel-Redirect instead of the bytes.
   */
  accelRedirectPrefix: string | null;
  admission: KeyAdmission;
  signer: UrlSigner;
  /** Called after each 200, 206 or 304; the caller batches these into store touches. */
  onServed?: (cid: string) => void;
  /** Milliseconds; ages remembered path resolutions and signatures. Default Date.now. */
  now?: () => number;
}

// Signed URLs whose signature was checked, with their expiry (ms): a listener seeking through a
// track sends many range requests with one URL. Oldest forgotten first.
const MAX_VERIFIED = 4096;

/** How a request was let in, with the caching headers that follow from it. */
interface Admitted {
  grant: AccessGrant;
  caching: ReturnType<typeof cachingHeaders>;
}

const BY_KEY: Admitted = { grant: { by: 'key' }, caching: cachingHeaders({ by: 'key' }) };

/** What a resolved file's answers share: the representation's headers and its validators. */
interface Described {
  headers: Record<string, string>;
  validators: Validators;
}

export function createArtifactOperation(deps: ArtifactOperationDeps): OperationBinding {
  const served = deps.onServed ?? (() => undefined);
  const now = deps.now ?? Date.now;
  const resolve = createArtifactResolver(deps.artifactRoot, { now });
  // Each remembered signed URL with its grant: its Expires header is formatted once.
  const verified = new Map<string, Admitted & { grant: { by: 'signature' } }>();
  // The resolver hands out the same object while it remembers a file.
  const descriptions = new WeakMap<ResolvedArtifact, Described>();

  function describe(file: ResolvedArtifact, cid: string, name: string): Described {
    let described = descriptions.get(file);
    if (described === undefined) {
      const headers = representationHeaders(cid, name);
      headers['last-modified'] = httpDate(file.mtimeMs);
      described = { headers, validators: { etag: headers.etag!, mtimeMs: file.mtimeMs } };
      descriptions.set(file, described);
    }
    return described;
  }

  /**
   * A valid API key (counted against its rate limit), or else a valid signature for exactly this
   * cid, name and filename (when the URL names one).
   */
  function authorize(request: ApiRequest, cid: string, name: string, filename: string | undefined): Admitted {
    const key = deps.admission.validKey(request);
    if (key !== undefined) {
      deps.admission.count(key);
      return BY_KEY;
    }
    const expires = request.query(EXPIRES_PARAM);
    const signature = request.query(SIGNATURE_PARAM);
    // JSON: no two sets of values share a string, whatever the filename holds.
    const url = JSON.stringify([cid, name, expires, signature, filename]);
    const known = verified.get(url);
    // The expiry is checked on every request; only the MAC is not made again.
    if (known !== undefined && known.grant.expiresAtMs > now()) return known;
    const verdict = deps.signer.verify(cid, name, expires, signature, filename);
    if (verdict === 'ok') {
      // verify accepted the expiry's form (digits only).
      const grant = { by: 'signature', expiresAtMs: Number(expires) * 1000 } as const;
      const admitted = { grant, caching: cachingHeaders(grant) };
      verified.delete(url);
      if (verified.size >= MAX_VERIFIED) verified.delete(verified.keys().next().value!);
      verified.set(url, admitted);
      return admitted;
    }
    if (verdict === 'expired') throw new ServiceError('forbidden', 'signature_expired', 'This signed URL has expired.');
    if (verdict === 'invalid')
      throw new ServiceError('forbidden', 'signature_invalid', 'This signed URL is not valid.');
    throw new ServiceError('unauthorized', 'unauthorized', 'A valid API key or a signed URL is required.');
  }

  return bindOperation(getArtifactRoute, {
    async answer(request): Promise<Answer> {
      const { cid, name } = request.params;
      if (cid === undefined || name === undefined) throw invalidArtifactPath('The artifact path is incomplete.');
      const filename = request.query(FILENAME_PARAM);
      const { caching } = authorize(request, cid, name, filename);
      const file = await resolve(cid, name);
      const described = describe(file, cid, name);
      const { validators } = described;
      // Named as the request asks (free with a key; covered by the signature otherwise), made safe.
      const headers =
        filename === undefined || filename === ''
          ? described.headers
          : { ...described.headers, 'content-disposition': contentDisposition(requestedDownloadName(filename, name)) };

      if (isNotModified({ get: (field) => request.header(field) ?? null }, validators)) {
        served(cid);
        return { status: 304, headers: { ...headers, ...caching } };
      }

      if (
        deps.accelRedirectPrefix !== null &&
        request.header(ACCEL_REQUEST_HEADER)?.toLowerCase() === ACCEL_REQUEST_VALUE
      ) {
        // nginx answers Range and HEAD itself from the internal location.
        const redirect = deps.accelRedirectPrefix + encodePath(file.relativePath);
        served(cid);
        return { status: 200, headers: { ...headers, 'x-accel-redirect': redirect, ...forProxy(caching) } };
      }

      const range = ifRangeAllows(request.header('if-range') ?? null, validators)
        ? parseRange(request.header('range'), file.size)
        : ({ kind: 'none' } as const);
      if (range.kind === 'unsatisfiable') {
        return problemAnswer('range_not_satisfiable', 'The requested range lies beyond the end of the artifact.', {
          requestId: request.facts.id,
          headers: { 'content-range': `bytes */${file.size}`, 'accept-ranges': 'bytes' },
        });
      }
      const start = range.kind === 'range' ? range.start : 0;
      const end = range.kind === 'range' ? range.end : file.size - 1;
      const length = String(end - start + 1);
      // Accept-Ranges on whole answers only, as nginx does (a 206 shows ranges work already).
      const answer: Answer =
        range.kind === 'range'
          ? {
              status: 206,
              headers: {
                ...headers,
                ...caching,
                'content-length': length,
                'content-range': `bytes ${start}-${end}/${file.size}`,
              },
            }
          : { status: 200, headers: { ...headers, ...caching, 'content-length': length, 'accept-ranges': 'bytes' } };
      // HEAD never opens the file.
      if (request.method !== 'HEAD') answer.file = { absolutePath: file.absolutePath, start, end };
      served(cid);
      return answer;
    },
  });
}

/** The caching headers under the names nginx copies onto its successes only. */
function forProxy(caching: ReturnType<typeof cachingHeaders>): Record<string, string> {
  return {
    [PROXY_CACHE_CONTROL_HEADER]: caching['cache-control'],
    ...(caching.expires ? { [PROXY_EXPIRES_HEADER]: caching.expires } : {}),
  };
}

/** Percent-encodes each segment, so that nginx maps the redirect back to exactly this file. */
function encodePath(relativePath: string): string {
  return relativePath.split('/').map(encodeURIComponent).join('/');
}

const ArtifactParams = z.object({
  cid: z
    .string()
    .openapi({ param: { name: 'cid', in: 'path' }, description: 'Content id: lowercase hex SHA-256 of the file.' }),
  name: z.string().openapi({ param: { name: 'name', in: 'path' }, example: 'audio.wav' }),
});

const SignatureQuery = z.object({
  expires: z
    .string()
    .optional()
    .openapi({ param: { name: 'expires', in: 'query' }, description: 'Expiry of a signed URL (Unix seconds).' }),
  sig: z
    .string()
    .optional()
    .openapi({ param: { name: 'sig', in: 'query' }, description: 'Signature of a signed URL.' }),
  filename: z
    .string()
    .optional()
    .openapi({
      param: { name: 'filename', in: 'query' },
      description:
        "The name the answer's `Content-Disposition` gives the file (an artifact's `download_name`). In a signed URL it is covered by the signature; with the API key any name may be asked for, and it is made safe (characters Windows refuses become `_`, control and direction characters go, the artifact's extension is added when missing, at most 200 bytes). Without it the file is named as the artifact (`audio.wav`).",
      example: 'My Song.wav',
    }),
});

/**
 * getArtifact's contract, answered for GET and HEAD. Its operation is createArtifactOperation above
 * (it answers Range, conditional requests and internal redirects itself).
 */
export const getArtifactRoute = createRoute({
  operationId: 'getArtifact',
  method: 'get',
  path: ARTIFACT_ROUTE,
  summary: 'A stored file. Needs the API key or a signed URL. Supports Range, If-None-Match, If-Range and HEAD.',
  // The API key either way, or a signed URL (no key).
  security: [...apiKeySecurity, {}],
  request: { params: ArtifactParams, query: SignatureQuery },
  responses: {
    200: {
      description: 'The file: `audio.wav` as audio/wav, `peaks.json` (its waveform peaks) as application/json.',
      content: {
        'audio/wav': { schema: { type: 'string', format: 'binary' } },
        'application/json': {
          schema: { type: 'object', description: "BBC audiowaveform's JSON format, version 2." },
        },
      },
    },
    206: { description: 'A byte range of the file.' },
    304: { description: 'Not modified.' },
    400: problemResponseSpec('Malformed content id or name.'),
    401: problemResponseSpec('No key and no signature.'),
    403: problemResponseSpec('Signature invalid or expired.'),
    404: problemResponseSpec('No such artifact.'),
    416: problemResponseSpec('Range not satisfiable.'),
  },
});
