import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../logger.js';
import { CONTENT_ID_HEADER, ROUTE_TEMPLATE_HEADER } from '../http/middleware/proxy-log-headers.js';
import type { ArtifactResolver } from './artifact-path.js';
import { httpDate, ifRangeAllows } from './conditional.js';
import type { FileBodies } from './file-body.js';
import { parseRange } from './range.js';
import { cachingHeaders, representationHeaders } from './representation.js';
import type { UrlSigner } from './signed-url.js';

/**
 * The fallback's answer to signed URLs, straight from node's HTTP server, before the Hono app:
 * what nginx's signed location is when nginx is in front. A listener seeking through a track
 * sends many small range requests, and the profile of the whole service answering them through
 * Hono (bench/delivery) spent most of its JavaScript time outside delivery: Request, Response
 * and Headers objects, the middleware chain, a fresh HMAC per request. This answers the common
 * case with none of that: GET or HEAD of `/artifacts/<64 hex>/<plain .wav name>` with exactly the
 * query the service issues (`?expires=..&sig=..`), no API key, no If-None-Match or
 * If-Modified-Since, a valid unexpired signature, a file that resolves, and a satisfiable range.
 * Anything else, and any failure before the head is written, goes on to the app (`otherwise`),
 * which answers it with its usual checks and problem documents.
 *
 * The checks are the app's own: the same signer (its yes remembered per URL, the expiry checked
 * again on every request), the same path resolution and O_NOFOLLOW open, the same headers
 * (representation, caching, Range, If-Range). What the app's middleware adds to every answer is
 * done here too: the request id (the same rule), one access-log line with the same fields, the
 * request metrics, and the route and content id headers for a proxy's log
 * (src/http/middleware/*; test/e2e/delivery-signed-lane.test.ts compares both ways).
 */
export type SignedLane = (req: IncomingMessage, res: ServerResponse, otherwise: () => void) => void;

export interface SignedLaneOptions {
  log: Logger;
  observeRequest: (method: string, route: string, status: number, seconds: number) => void;
  /** The request id to use, given the client's X-Request-Id (src/http/middleware/request-id.ts). */
  requestIdFor: (offered: string | undefined) => string;
}

export interface SignedLaneShared {
  signer: UrlSigner;
  resolve: ArtifactResolver;
  bodies: FileBodies;
  served: (cid: string) => void;
  now: () => number;
}

export const ARTIFACT_ROUTE = '/artifacts/{cid}/{name}';
const SIGNED_ARTIFACT = /^\/artifacts\/([0-9a-f]{64})\/([A-Za-z0-9_-][A-Za-z0-9._-]{0,250}\.wav)\?expires=([0-9]{1,12})&sig=([A-Za-z0-9_-]{43})$/;
// Signed URLs whose signature was checked, with their expiry (ms); oldest forgotten first.
const MAX_VERIFIED = 4096;

export function createSignedLane(shared: SignedLaneShared, options: SignedLaneOptions): SignedLane {
  const verified = new Map<string, number>();

  function signatureHolds(url: string, cid: string, name: string, expires: string, signature: string): boolean {
    const expiresAt = verified.get(url);
    if (expiresAt !== undefined) return expiresAt > shared.now();
    if (shared.signer.verify(cid, name, expires, signature) !== 'ok') return false;
    if (verified.size >= MAX_VERIFIED) verified.delete(verified.keys().next().value!);
    verified.set(url, Number(expires) * 1000);
    return true;
  }

  async function answer(req: IncomingMessage, res: ServerResponse, cid: string, name: string, expiresAtMs: number, otherwise: () => void): Promise<void> {
    const started = performance.now();
    let file;
    try {
      file = await shared.resolve(cid, name);
    } catch {
      return otherwise();
    }
    const validators = { etag: `"${cid}"`, mtimeMs: file.mtimeMs };
    const range = ifRangeAllows(headerValue(req.headers['if-range']) ?? null, validators) ? parseRange(req.headers.range, file.size) : ({ kind: 'none' } as const);
    if (range.kind === 'unsatisfiable') return otherwise();
    const start = range.kind === 'range' ? range.start : 0;
    const end = range.kind === 'range' ? range.end : file.size - 1;
    const status = range.kind === 'range' ? 206 : 200;

    const requestId = options.requestIdFor(headerValue(req.headers['x-request-id']));
    const head: string[] = [];
    const add = (fields: Record<string, string | undefined>) => {
      for (const key in fields) if (fields[key] !== undefined) head.push(key, fields[key]);
    };
    add(representationHeaders(cid, name));
    add({ 'last-modified': httpDate(file.mtimeMs) });
    add(cachingHeaders({ by: 'signature', expiresAtMs }));
    add({ 'content-length': String(end - start + 1) });
    add(status === 206 ? { 'content-range': `bytes ${start}-${end}/${file.size}` } : { 'accept-ranges': 'bytes' });
    add({ 'x-request-id': requestId, [ROUTE_TEMPLATE_HEADER.toLowerCase()]: ARTIFACT_ROUTE, [CONTENT_ID_HEADER.toLowerCase()]: cid });

    const writeHead = () => {
      res.writeHead(status, head);
      shared.served(cid);
      const seconds = (performance.now() - started) / 1000;
      options.log.info({ request_id: requestId, method: req.method, route: ARTIFACT_ROUTE, status, latency_ms: Math.round(seconds * 10000) / 10 }, 'request');
      options.observeRequest(req.method!, ARTIFACT_ROUTE, status, seconds);
    };
    // Like the app: HEAD never opens the file.
    if (req.method === 'HEAD') {
      writeHead();
      res.end();
      return;
    }
    try {
      await shared.bodies.send(res, file.absolutePath, start, end, writeHead);
    } catch {
      // Evicted since it resolved, or unreadable: nothing was written yet.
      otherwise();
    }
  }

  return (req, res, otherwise) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') return otherwise();
    const url = req.url ?? '';
    const match = SIGNED_ARTIFACT.exec(url);
    const headers = req.headers;
    if (!match || headers.authorization !== undefined || headers['x-api-key'] !== undefined || headers['if-none-match'] !== undefined || headers['if-modified-since'] !== undefined) {
      return otherwise();
    }
    const [, cid, name, expires, signature] = match as unknown as [string, string, string, string, string];
    if (!signatureHolds(url, cid, name, expires, signature)) return otherwise();
    void answer(req, res, cid, name, Number(expires) * 1000, otherwise).catch((err: unknown) => {
      options.log.error({ err }, 'signed lane failed');
      res.destroy();
    });
  };
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value;
}
