import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../logger.js';
import { CONTENT_ID_HEADER, ROUTE_TEMPLATE_HEADER } from '../http/middleware/request-context.js';
import { requestFacts } from '../http/request-envelope.js';
import { ARTIFACT_ROUTE } from '../http/route-template.js';
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
 * (representation, caching, Range, If-Range). It runs inside the request envelope, which gives
 * it the request id, the access-log line and the metrics as it gives them to the app; the lane
 * names its route, and adds the route and content id headers for a proxy's log as the app's
 * middleware does (test/e2e/delivery-signed-lane.test.ts compares both ways).
 */
export type SignedLane = (req: IncomingMessage, res: ServerResponse, otherwise: () => void) => void;

export interface SignedLaneOptions {
  /** For the lane's own failures; each request's line is the envelope's. */
  log: Logger;
}

export interface SignedLaneShared {
  signer: UrlSigner;
  resolve: ArtifactResolver;
  bodies: FileBodies;
  served: (cid: string) => void;
  now: () => number;
}

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

    const head: string[] = [];
    const add = (fields: Record<string, string | undefined>) => {
      for (const key in fields) if (fields[key] !== undefined) head.push(key, fields[key]);
    };
    add(representationHeaders(cid, name));
    add({ 'last-modified': httpDate(file.mtimeMs) });
    add(cachingHeaders({ by: 'signature', expiresAtMs }));
    add({ 'content-length': String(end - start + 1) });
    add(status === 206 ? { 'content-range': `bytes ${start}-${end}/${file.size}` } : { 'accept-ranges': 'bytes' });
    add({ [ROUTE_TEMPLATE_HEADER.toLowerCase()]: ARTIFACT_ROUTE, [CONTENT_ID_HEADER.toLowerCase()]: cid });

    const writeHead = () => {
      const facts = requestFacts(req);
      if (facts) facts.route = ARTIFACT_ROUTE;
      res.writeHead(status, head);
      shared.served(cid);
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
