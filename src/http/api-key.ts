import { createHash, hash, timingSafeEqual } from 'node:crypto';

/**
 * Checks a presented API key against the configured set. Keys are compared as SHA-256 digests
 * with timingSafeEqual, so neither a key's content nor its length leaks through timing, and
 * every configured key is compared (no early exit) so that which key matched does not either.
 *
 * A key found valid is remembered, so that a client's every request does not pay that check
 * again: the set never changes in a checker's life (revoking a key is a restart with other
 * API_KEYS). Only valid keys are kept, so the memory holds at most the configured keys (which
 * the process holds anyway, and which are never logged); a made-up key is never kept and always
 * pays the full check. Looking a presented key up compares its content only with a kept key
 * whose (seeded) string hash it shares, so its time tells nothing of a key's content, only
 * whether it was accepted before, which the answer says anyway.
 */
export type KeyChecker = (presented: string | undefined) => boolean;

export function createKeyChecker(keys: readonly string[]): KeyChecker {
  const digests = keys.map((key) => createHash('sha256').update(key).digest());
  const accepted = new Set<string>();
  return (presented) => {
    if (presented === undefined || presented === '') return false;
    if (accepted.has(presented)) return true;
    const candidate = hash('sha256', presented, 'buffer');
    let match = false;
    for (const digest of digests) {
      if (timingSafeEqual(digest, candidate)) match = true;
    }
    // At most one string per configured key can match.
    if (match) accepted.add(presented);
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
