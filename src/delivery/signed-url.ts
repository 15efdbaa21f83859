import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Signed artifact URLs, so that a plain `<audio src>` can play without an API key.
 *
 * Query: `expires=<unix seconds>&sig=<base64url HMAC-SHA256>`. The MAC covers a versioned,
 * newline-separated canonical string of cid, name and expiry; none of them may hold a newline
 * (cid is hex, names refuse control characters), so no two triples share a string.
 */
export const EXPIRES_PARAM = 'expires';
export const SIGNATURE_PARAM = 'sig';

export type SignatureVerdict = 'ok' | 'missing' | 'expired' | 'invalid';

export interface SignedQuery {
  /** Expiry, Unix seconds. */
  expires: number;
  signature: string;
  /** `expires=..&sig=..`, ready to append after `?`. */
  query: string;
}

export interface UrlSigner {
  sign(cid: string, name: string, ttlSeconds: number): SignedQuery;
  verify(cid: string, name: string, expires: string | undefined, signature: string | undefined): SignatureVerdict;
}

const EXPIRES_FORMAT = /^[0-9]{1,12}$/;
// 32 bytes of HMAC-SHA256 in unpadded base64url.
const SIGNATURE_FORMAT = /^[A-Za-z0-9_-]{43}$/;
const RECENT_SIGNATURES = 1024;

export function createUrlSigner(secret: Buffer | string, opts: { now?: () => number } = {}): UrlSigner {
  const key = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : Buffer.from(secret);
  if (key.length === 0) throw new Error('URL signing secret is empty');
  const now = opts.now ?? Date.now;

  const mac = (cid: string, name: string, expires: string): string =>
    createHmac('sha256', key).update(`artifact-v1\n${cid}\n${name}\n${expires}`).digest('base64url');
  // A job record polled many times a second signs the same URL with the same expiry (whole
  // seconds) each time: the MAC is made once. Bounded; forgotten wholesale when full.
  const recent = new Map<string, string>();
  const signature = (cid: string, name: string, expires: string): string => {
    const canonical = `${cid}\n${name}\n${expires}`;
    let known = recent.get(canonical);
    if (known === undefined) {
      if (recent.size >= RECENT_SIGNATURES) recent.clear();
      known = mac(cid, name, expires);
      recent.set(canonical, known);
    }
    return known;
  };

  return {
    sign(cid, name, ttlSeconds) {
      if (!Number.isInteger(ttlSeconds) || ttlSeconds <= 0) throw new Error('ttlSeconds must be a positive integer');
      const expires = Math.floor(now() / 1000) + ttlSeconds;
      const sig = signature(cid, name, String(expires));
      return { expires, signature: sig, query: `${EXPIRES_PARAM}=${expires}&${SIGNATURE_PARAM}=${sig}` };
    },
    verify(cid, name, expires, signature) {
      if (!expires && !signature) return 'missing';
      if (!expires || !signature || !EXPIRES_FORMAT.test(expires) || !SIGNATURE_FORMAT.test(signature))
        return 'invalid';
      // Compared as text, not decoded bytes, so the spare bits of the last character cannot vary.
      // Authenticity first: an altered expiry is 'invalid', never 'expired'.
      if (!timingSafeEqual(Buffer.from(mac(cid, name, expires)), Buffer.from(signature))) return 'invalid';
      return Number(expires) * 1000 <= now() ? 'expired' : 'ok';
    },
  };
}
