import type { Context } from 'hono';
import { ServiceError } from '../errors.js';
import { presentedKey, type KeyChecker } from '../http/api-key.js';
import { problemResponse } from '../http/problem.js';
import { artifactNotFound, createArtifactResolver, invalidArtifactPath, type ResolvedArtifact } from './artifact-path.js';
import { httpDate, ifRangeAllows, isNotModified } from './conditional.js';
import { createFileBodies, type FileBody } from './file-body.js';
import { parseRange } from './range.js';
import { cachingHeaders, representationHeaders, type AccessGrant } from './representation.js';
import { createSignedLane, type SignedLane, type SignedLaneOptions } from './signed-lane.js';
import { EXPIRES_PARAM, SIGNATURE_PARAM, type UrlSigner } from './signed-url.js';

/**
 * getArtifact, `GET|HEAD /artifacts/:cid/:name`. The app decides who may read what and answers
 * conditional requests itself; the bytes then come from nginx (internal redirect, when
 * `accelRedirectPrefix` is set) or from the app's own streaming fallback. Behind nginx, signed
 * URLs reach the app only when nginx could not say yes itself (nginx/templates/default.conf.template).
 */

/**
 * Caching headers on answers nginx completes (internal redirects): nginx adds them to successes
 * only, so that its own 404 for content evicted meanwhile is never cached.
 */
export const PROXY_CACHE_CONTROL_HEADER = 'x-artifact-cache-control';
export const PROXY_EXPIRES_HEADER = 'x-artifact-expires';

export interface ArtifactHandlerDeps {
  artifactRoot: string;
  /** e.g. '/_artifacts/': answer with X-Accel-Redirect instead of the bytes. */
  accelRedirectPrefix: string | null;
  checkKey: KeyChecker;
  signer: UrlSigner;
  /** Called after each 200, 206 or 304; the caller batches these into store touches. */
  onServed?: (cid: string) => void;
  /** Milliseconds; ages remembered path resolutions and signatures. Default Date.now. */
  now?: () => number;
}

export type ArtifactHandler = (c: Context) => Promise<Response>;

export interface ArtifactDelivery {
  /** getArtifact in the Hono app. */
  handle: ArtifactHandler;
  /**
   * Signed URLs straight from node's server, for the fallback (src/delivery/signed-lane.ts);
   * shares the path resolutions and open files of `handle`.
   */
  signedLane(options: SignedLaneOptions): SignedLane;
}

export function createArtifactHandler(deps: ArtifactHandlerDeps): ArtifactHandler {
  return createArtifactDelivery(deps).handle;
}

export function createArtifactDelivery(deps: ArtifactHandlerDeps): ArtifactDelivery {
  const served = deps.onServed ?? (() => undefined);
  const now = deps.now ?? Date.now;
  const resolve = createArtifactResolver(deps.artifactRoot, { now });
  const bodies = createFileBodies();
  const handle: ArtifactHandler = async (c) => {
    const cid = c.req.param('cid');
    const name = c.req.param('name');
    if (cid === undefined || name === undefined) throw invalidArtifactPath('The artifact path is incomplete.');
    const grant = authorize(c, deps, cid, name);
    const file = await resolve(cid, name);

    const headers = representationHeaders(cid, name);
    headers['last-modified'] = httpDate(file.mtimeMs);
    const caching = cachingHeaders(grant);

    const validators = { etag: headers.etag!, mtimeMs: file.mtimeMs };
    if (isNotModified(c.req.raw.headers, validators)) {
      served(cid);
      return new Response(null, { status: 304, headers: { ...headers, ...caching } });
    }

    if (deps.accelRedirectPrefix !== null) {
      // nginx answers Range and HEAD itself from the internal location.
      headers['x-accel-redirect'] = deps.accelRedirectPrefix + encodePath(file.relativePath);
      served(cid);
      return new Response(null, { status: 200, headers: { ...headers, ...forProxy(caching) } });
    }

    const response = await streamFile(c, file, { ...headers, ...caching }, validators, bodies.body);
    if (response.status !== 416) served(cid);
    return response;
  };

  return {
    handle,
    signedLane: (options) => createSignedLane({ signer: deps.signer, resolve, bodies, served, now }, options),
  };
}

/** The caching headers under the names nginx copies onto its successes only. */
function forProxy(caching: ReturnType<typeof cachingHeaders>): Record<string, string> {
  return {
    [PROXY_CACHE_CONTROL_HEADER]: caching['cache-control'],
    ...(caching.expires ? { [PROXY_EXPIRES_HEADER]: caching.expires } : {}),
  };
}

/** A valid API key, or else a valid signature for exactly this cid and name. */
function authorize(c: Context, deps: ArtifactHandlerDeps, cid: string, name: string): AccessGrant {
  if (deps.checkKey(presentedKey(c.req.raw.headers))) return { by: 'key' };
  const expires = c.req.query(EXPIRES_PARAM);
  const verdict = deps.signer.verify(cid, name, expires, c.req.query(SIGNATURE_PARAM));
  // verify accepted the expiry's form (digits only).
  if (verdict === 'ok') return { by: 'signature', expiresAtMs: Number(expires) * 1000 };
  if (verdict === 'expired') throw new ServiceError('forbidden', 'signature_expired', 'This signed URL has expired.');
  if (verdict === 'invalid') throw new ServiceError('forbidden', 'signature_invalid', 'This signed URL is not valid.');
  throw new ServiceError('unauthorized', 'unauthorized', 'A valid API key or a signed URL is required.');
}

async function streamFile(
  c: Context,
  file: ResolvedArtifact,
  headers: Record<string, string>,
  validators: { etag: string; mtimeMs: number },
  fileBody: FileBody,
): Promise<Response> {
  const range = ifRangeAllows(c.req.header('if-range') ?? null, validators) ? parseRange(c.req.header('range'), file.size) : { kind: 'none' as const };
  if (range.kind === 'unsatisfiable') {
    return problemResponse(416, 'range_not_satisfiable', 'The requested range lies beyond the end of the artifact.', {
      requestId: c.get('requestId' as never) as string | undefined,
      headers: { 'content-range': `bytes */${file.size}`, 'accept-ranges': 'bytes' },
    });
  }
  const status = range.kind === 'range' ? 206 : 200;
  // Advertised on whole answers only, as nginx does (a 206 shows ranges work already).
  if (status === 200) headers['accept-ranges'] = 'bytes';
  const start = range.kind === 'range' ? range.start : 0;
  const end = range.kind === 'range' ? range.end : file.size - 1;
  headers['content-length'] = String(end - start + 1);
  if (range.kind === 'range') headers['content-range'] = `bytes ${start}-${end}/${file.size}`;
  // Hono answers HEAD by running the GET route and dropping the body: never open the file for it.
  if (c.req.method === 'HEAD') return new Response(null, { status, headers });
  let body;
  try {
    body = await fileBody(file.absolutePath, start, end);
  } catch (err) {
    // Evicted between resolution and open.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw artifactNotFound();
    throw err;
  }
  return new Response(body, { status, headers });
}

/** Percent-encodes each segment, so that nginx maps the redirect back to exactly this file. */
function encodePath(relativePath: string): string {
  return relativePath.split('/').map(encodeURIComponent).join('/');
}
