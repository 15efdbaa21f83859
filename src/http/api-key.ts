import { createHash, hash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/**
 * Checks a presented API key against the configured set. Keys are compared as SHA-256 digests
 * with timingSafeEqual, so neither a key's content nor its length leaks through timing, and
 * every configured key is compared (no early exit) so that which key matched does not either.
 */
export type KeyChecker = (presented: string | undefined) => boolean;

export function createKeyChecker(keys: readonly string[]): KeyChecker {
  const digests = keys.map((key) => createHash('sha256').update(key).digest());
  return (presented) => {
    if (presented === undefined || presented === '') return false;
    const candidate = hash('sha256', presented, 'buffer');
    let match = false;
    for (const digest of digests) {
      if (timingSafeEqual(digest, candidate)) match = true;
    }
    return match;
  };
}

/** The key a request presents: `Authorization: Bearer <key>` or `X-API-Key: <key>`. */
export function presentedKey(headers: { get(name: string): string | null | undefined }): string | undefined {
  const authorization = headers.get('authorization');
  if (authorization) {
    const match = /^Bearer[ ]+(\S+)\s*$/i.exec(authorization);
    return match?.[1];
  }
  return headers.get('x-api-key')?.trim() || undefined;
}

/**
 * The key a node request presents, read as the app reads it (presentedKey on fetch's Headers), for
 * the lanes in front of the app; undefined when the app would read it otherwise: node keeps the
 * first of repeated Authorization headers, where fetch's Headers joins them and so refuses the
 * key (X-API-Key is joined by both).
 */
export function nodeRequestKey(req: IncomingMessage): string | undefined {
  let authorizations = 0;
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i]!.length === 13 && req.rawHeaders[i]!.toLowerCase() === 'authorization') authorizations++;
  }
  if (authorizations > 1) return undefined;
  return presentedKey({ get: (name) => req.headers[name] as string | undefined });
}
