/**
 * The headers that describe an artifact, the same in both delivery modes. Content under an
 * address never changes, so it may be cached for a year and its ETag is the content id: an
 * ETag only has to tell versions of one URL apart, and one URL (cid, name) has one version.
 */
const CONTENT_TYPE_BY_EXTENSION: Record<string, string> = {
  wav: 'audio/wav',
  json: 'application/json',
};

export const IMMUTABLE_CACHE_CONTROL = 'public, max-age=31536000, immutable';

export function contentTypeOf(name: string): string {
  const dot = name.lastIndexOf('.');
  const extension = dot < 0 ? '' : name.slice(dot + 1).toLowerCase();
  return CONTENT_TYPE_BY_EXTENSION[extension] ?? 'application/octet-stream';
}

export function etagOf(cid: string): string {
  return `"${cid}"`;
}

/** RFC 6266: an ASCII `filename` fallback and the exact name as RFC 8187 `filename*`. */
export function contentDisposition(name: string): string {
  const fallback = name.replace(/[^\x20-\x7e]|["\\%]/g, '_');
  const exact = encodeURIComponent(name).replace(/['()*]/g, (ch) => `%${ch.charCodeAt(0).toString(16).toUpperCase()}`);
  return `inline; filename="${fallback}"; filename*=UTF-8''${exact}`;
}

export function representationHeaders(cid: string, name: string): Record<string, string> {
  return {
    'content-type': contentTypeOf(name),
    'content-disposition': contentDisposition(name),
    'cache-control': IMMUTABLE_CACHE_CONTROL,
    etag: etagOf(cid),
    // Names other than the WAV get the generic type; never let a browser sniff them into HTML.
    'x-content-type-options': 'nosniff',
  };
}
