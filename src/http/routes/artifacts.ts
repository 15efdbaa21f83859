import { z, type OpenAPIHono } from '@hono/zod-openapi';
import { createArtifactResolver, invalidArtifactPath } from '../../delivery/artifact-path.js';
import { httpDate, ifRangeAllows, isNotModified } from '../../delivery/conditional.js';
import { parseRange } from '../../delivery/range.js';
import { cachingHeaders, representationHeaders, type AccessGrant } from '../../delivery/representation.js';
import { EXPIRES_PARAM, SIGNATURE_PARAM, type UrlSigner } from '../../delivery/signed-url.js';
import { ServiceError } from '../../errors.js';
import type { AppEnv } from '../env.js';
import { problemResponseSpec } from '../error-responses.js';
import type { KeyAdmission } from '../key-admission.js';
import type { Answer, ApiRequest, Operation, OperationBinding } from '../operation.js';
import { problemAnswer } from '../problem.js';
import { ARTIFACT_ROUTE, honoPath } from '../route-template.js';

/**
 * getArtifact, `GET|HEAD /artifacts/{cid}/{name}`: who may read what, conditional requests and
 * ranges. The bytes then come from nginx (internal redirect, when `accelRedirectPrefix` is set)
 * or from the file itself, sent by whichever dispatcher answers (../node-router.ts,
 * ../hono-operation.ts). Behind nginx, signed URLs reach the app only when nginx could not
 * say yes itself (nginx/templates/default.conf.template).
 */

/**
 * Caching headers on answers nginx completes (internal redirects): nginx adds them to successes
 * only, so that its own 404 for content evicted meanwhile is never cached.
 */
export const PROXY_CACHE_CONTROL_HEADER = 'x-artifact-cache-control';
export const PROXY_EXPIRES_HEADER = 'x-artifact-expires';

export interface ArtifactOperationDeps {
  artifactRoot: string;
  /** e.g. '/_artifacts/': answer with X-Accel-Redirect instead of the bytes. */
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

export function createArtifactOperation(deps: ArtifactOperationDeps): OperationBinding {
  const served = deps.onServed ?? (() => undefined);
  const now = deps.now ?? Date.now;
  const resolve = createArtifactResolver(deps.artifactRoot, { now });
  const verified = new Map<string, number>();

  /** A valid API key (counted against its rate limit), or else a valid signature for exactly this cid and name. */
  function authorize(request: ApiRequest, cid: string, name: string): AccessGrant {
    const key = deps.admission.validKey(request);
    if (key !== undefined) {
      deps.admission.count(key);
      return { by: 'key' };
    }
    const expires = request.query(EXPIRES_PARAM);
    const signature = request.query(SIGNATURE_PARAM);
    const url = `${cid}/${name}?${expires}&${signature}`;
    const expiresAtMs = verified.get(url);
    if (expiresAtMs !== undefined && expiresAtMs > now()) return { by: 'signature', expiresAtMs };
    const verdict = deps.signer.verify(cid, name, expires, signature);
    if (verdict === 'ok') {
      // verify accepted the expiry's form (digits only).
      const grant = { by: 'signature', expiresAtMs: Number(expires) * 1000 } as const;
      if (verified.size >= MAX_VERIFIED) verified.delete(verified.keys().next().value!);
      verified.set(url, grant.expiresAtMs);
      return grant;
    }
    if (verdict === 'expired') throw new ServiceError('forbidden', 'signature_expired', 'This signed URL has expired.');
    if (verdict === 'invalid')
      throw new ServiceError('forbidden', 'signature_invalid', 'This signed URL is not valid.');
    throw new ServiceError('unauthorized', 'unauthorized', 'A valid API key or a signed URL is required.');
  }

  const operation: Operation = {
    route: ARTIFACT_ROUTE,
    async answer(request): Promise<Answer> {
      const { cid, name } = request.params;
      if (cid === undefined || name === undefined) throw invalidArtifactPath('The artifact path is incomplete.');
      const grant = authorize(request, cid, name);
      const file = await resolve(cid, name);

      const headers = representationHeaders(cid, name);
      headers['last-modified'] = httpDate(file.mtimeMs);
      const caching = cachingHeaders(grant);

      const validators = { etag: headers.etag!, mtimeMs: file.mtimeMs };
      if (isNotModified({ get: (field) => request.header(field) ?? null }, validators)) {
        served(cid);
        return { status: 304, headers: { ...headers, ...caching } };
      }

      if (deps.accelRedirectPrefix !== null) {
        // nginx answers Range and HEAD itself from the internal location.
        headers['x-accel-redirect'] = deps.accelRedirectPrefix + encodePath(file.relativePath);
        served(cid);
        return { status: 200, headers: { ...headers, ...forProxy(caching) } };
      }

      const range = ifRangeAllows(request.header('if-range') ?? null, validators)
        ? parseRange(request.header('range'), file.size)
        : ({ kind: 'none' } as const);
      if (range.kind === 'unsatisfiable') {
        return problemAnswer(416, 'range_not_satisfiable', 'The requested range lies beyond the end of the artifact.', {
          requestId: request.facts.id,
          headers: { 'content-range': `bytes */${file.size}`, 'accept-ranges': 'bytes' },
        });
      }
      const start = range.kind === 'range' ? range.start : 0;
      const end = range.kind === 'range' ? range.end : file.size - 1;
      const whole = { ...headers, ...caching, 'content-length': String(end - start + 1) };
      // Advertised on whole answers only, as nginx does (a 206 shows ranges work already).
      const answer: Answer =
        range.kind === 'range'
          ? { status: 206, headers: { ...whole, 'content-range': `bytes ${start}-${end}/${file.size}` } }
          : { status: 200, headers: { ...whole, 'accept-ranges': 'bytes' } };
      // HEAD never opens the file.
      if (request.method !== 'HEAD') answer.file = { absolutePath: file.absolutePath, start, end };
      served(cid);
      return answer;
    },
  };
  return { method: 'GET', path: honoPath(ARTIFACT_ROUTE), operation };
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
});

/**
 * getArtifact's contract. Its operation is src/delivery/artifact-operation.ts (it answers Range,
 * conditional requests and internal redirects itself), mounted for GET and HEAD with the others.
 */
export function registerArtifactContract(app: OpenAPIHono<AppEnv>): void {
  app.openAPIRegistry.registerPath({
    operationId: 'getArtifact',
    method: 'get',
    path: ARTIFACT_ROUTE,
    summary: 'A stored file. Needs the API key or a signed URL. Supports Range, If-None-Match, If-Range and HEAD.',
    security: [{ bearerAuth: [] }, { apiKeyHeader: [] }, {}],
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
}
