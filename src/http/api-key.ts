import { createHash, hash, timingSafeEqual } from 'node:crypto';

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
