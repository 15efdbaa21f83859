import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Signed artifact URLs, so that a plain `<audio src>` can play without an API key, and a link can
 * name the file it downloads.
 *
 * Query: `expires=<unix seconds>&sig=<base64url HMAC-SHA256>`, or with a download name
 * `expires=...&sig=...&filename=<percent-encoded UTF-8>`. The MAC covers a versioned,
 * newline-separated canonical string: `artifact-v1\n<cid>\n<name>\n<expires>` without a filename
 * (the URLs issued before names existed stay valid), `artifact-v2\n<cid>\n<name>\n<expires>\n<filename>`
 * with one, the filename decoded. None of cid, name and expiry may hold a newline (cid is hex,
 * names refuse control characters, the expiry is digits) and the filename comes last, so no two
 * sets of values share a string. nginx/lua/source_fetch_signed_url.lua checks the same strings.
 */
export const EXPIRES_PARAM = 'expires';
export const SIGNATURE_PARAM = 'sig';
export const FILENAME_PARAM = 'filename';

export type SignatureVerdict = 'ok' | 'missing' | 'expired' | 'invalid';

export interface SignedQuery {
  /** Expiry, Unix seconds. */
  expires: number;
  signature: string;
  /** `expires=..&sig=..` (and `&filename=..`), ready to append after `?`. */
  query: string;
}

export interface UrlSigner {
  /** `filename`: the name the download is saved under (src/delivery/download-name.ts), covered by the signature. */
  sign(cid: string, name: string, ttlSeconds: number, filename?: string): SignedQuery;
  verify(
    cid: string,
    name: string,
    expires: string | undefined,
    signature: string | undefined,
    filename?: string,
  ): SignatureVerdict;
}

const EXPIRES_FORMAT = /^[0-9]{1,12}$/;
// 32 bytes of HMAC-SHA256 in unpadded base64url.
const SIGNATURE_FORMAT = /^[A-Za-z0-9_-]{43}$/;
const RECENT_SIGNATURES = 1024;

/**
 * A filename as the query carries it: every byte of its UTF-8 percent-encoded (upper-case hex)
 * but RFC 3986's unreserved characters, the only form nginx takes up itself.
 */
export function encodeFilenameParam(filename: string): string {
  return encodeURIComponent(filename).replace(/[!'()*]/g, (ch) => `%${ch.charCodeAt(0).toString(16).toUpperCase()}`);
}

export function createUrlSigner(secret: Buffer | string, opts: { now?: () => number } = {}): UrlSigner {
  const key = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : Buffer.from(secret);
  if (key.length === 0) throw new Error('URL signing secret is empty');
  const now = opts.now ?? Date.now;

  const canonical = (cid: string, name: string, expires: string, filename: string | undefined): string =>
    filename === undefined
      ? `artifact-v1\n${cid}\n${name}\n${expires}`
      : `artifact-v2\n${cid}\n${name}\n${expires}\n${filename}`;
  const mac = (message: string): string => createHmac('sha256', key).update(message).digest('base64url');
  // A job record polled many times a second signs the same URL with the same expiry (whole
  // seconds) each time: the MAC is made once. Bounded; forgotten wholesale when full.
  const recent = new Map<string, string>();
  const signature = (message: string): string => {
    let known = recent.get(message);
    if (known === undefined) {
      if (recent.size >= RECENT_SIGNATURES) recent.clear();
      known = mac(message);
      recent.set(message, known);
    }
    return known;
  };

  return {
    sign(cid, name, ttlSeconds, filename) {
      if (!Number.isInteger(ttlSeconds) || ttlSeconds <= 0) throw new Error('ttlSeconds must be a positive integer');
      const expires = Math.floor(now() / 1000) + ttlSeconds;
      const sig = signature(canonical(cid, name, String(expires), filename));
      const named = filename === undefined ? '' : `&${FILENAME_PARAM}=${encodeFilenameParam(filename)}`;
      return { expires, signature: sig, query: `${EXPIRES_PARAM}=${expires}&${SIGNATURE_PARAM}=${sig}${named}` };
    },
    verify(cid, name, expires, signature, filename) {
      if (!expires && !signature) return 'missing';
      if (!expires || !signature || !EXPIRES_FORMAT.test(expires) || !SIGNATURE_FORMAT.test(signature))
        return 'invalid';
      // Compared as text, not decoded bytes, so the spare bits of the last character cannot vary.
      // Authenticity first: an altered expiry is 'invalid', never 'expired'.
      if (!timingSafeEqual(Buffer.from(mac(canonical(cid, name, expires, filename))), Buffer.from(signature)))
        return 'invalid';
      return Number(expires) * 1000 <= now() ? 'expired' : 'ok';
    },
  };
}
