/**
 * The headers that describe an artifact, the same in both delivery modes. Content under an
 * address never changes, so its ETag is the content id (an ETag only has to tell versions of one
 * URL apart, and one URL (cid, name) has one version) and it may be cached as long as the
 * credential that fetched it allows (see cachingHeaders).
 */
const CONTENT_TYPE_BY_EXTENSION: Record<string, string> = {
  wav: 'audio/wav',
  json: 'application/json',
};

/**
 * How a request was let in: with an API key, or with a signed URL that expires at `expiresAtMs`.
 */
export type AccessGrant = { by: 'key' } | { by: 'signature'; expiresAtMs: number };

/** A key holder's own cache may keep the bytes for a year; a shared cache must not keep them. */
export const KEYED_CACHE_CONTROL = 'private, max-age=31536000, immutable';
/**
 * A signed URL is its own credential, so a shared cache may keep the answer for whoever presents
 * the same URL, but no longer than the signature lives: Expires carries that limit as an absolute
 * time, the same on every answer (nginx writes it from the URL alone:
 * nginx/lua/source_fetch_signed_url.lua).
 * No max-age, which would have to shrink from answer to answer as the signature nears its end.
 */
export const SIGNED_CACHE_CONTROL = 'public, immutable';

export function cachingHeaders(grant: AccessGrant): { 'cache-control': string; expires?: string } {
  if (grant.by === 'key') return { 'cache-control': KEYED_CACHE_CONTROL };
  return { 'cache-control': SIGNED_CACHE_CONTROL, expires: new Date(grant.expiresAtMs).toUTCString() };
}

export function contentTypeOf(name: string): string {
  const dot = name.lastIndexOf('.');
  const extension = dot < 0 ? '' : name.slice(dot + 1).toLowerCase();
  return CONTENT_TYPE_BY_EXTENSION[extension] ?? 'application/octet-stream';
}

export function etagOf(cid: string): string {
  return `"${cid}"`;
}

// Names seen, with their Content-Disposition: few names recur (every audio artifact is audio.wav).
const MAX_DISPOSITIONS = 256;
const dispositions = new Map<string, string>();

/**
 * RFC 6266: an ASCII `filename` fallback and the exact name as RFC 8187 `filename*`. The fallback
 * is the name with each character (code point) outside printable ASCII, and each `"`, `\` and `%`,
 * replaced by `_`; `filename*` is its UTF-8 with every byte but the letters, digits and `-._!~`
 * percent-encoded (upper-case hex). nginx/lua/source_fetch_signed_url.lua writes the same header
 * for a signed URL's `filename`, byte for byte.
 */
export function contentDisposition(name: string): string {
  let disposition = dispositions.get(name);
  if (disposition === undefined) {
    disposition = formatContentDisposition(name);
    if (dispositions.size >= MAX_DISPOSITIONS) dispositions.clear();
    dispositions.set(name, disposition);
  }
  return disposition;
}

function formatContentDisposition(name: string): string {
  const fallback = name.replace(/[^\x20-\x7e]|["\\%]/gu, '_');
  const exact = encodeURIComponent(name).replace(/['()*]/g, (ch) => `%${ch.charCodeAt(0).toString(16).toUpperCase()}`);
  return `inline; filename="${fallback}"; filename*=UTF-8''${exact}`;
}

export function representationHeaders(cid: string, name: string): Record<string, string> {
  return {
    'content-type': contentTypeOf(name),
    'content-disposition': contentDisposition(name),
    etag: etagOf(cid),
    // Names other than the WAV get the generic type; never let a browser sniff them into HTML.
    'x-content-type-options': 'nosniff',
  };
}
