/**
 * Conditional requests (RFC 9110 §13) against one representation with a strong ETag and a
 * Last-Modified date.
 */
export interface Validators {
  /** Strong entity tag, quoted: `"..."`. */
  etag: string;
  mtimeMs: number;
}

/** If-None-Match (weak comparison, `*`), else If-Modified-Since: true when the answer is 304. */
export function isNotModified(headers: { get(name: string): string | null }, v: Validators): boolean {
  const ifNoneMatch = headers.get('if-none-match');
  if (ifNoneMatch !== null)
    return ifNoneMatch.trim() === '*' || entityTags(ifNoneMatch).some((tag) => opaque(tag) === opaque(v.etag));
  const ifModifiedSince = headers.get('if-modified-since');
  if (ifModifiedSince === null) return false;
  const since = Date.parse(ifModifiedSince);
  // HTTP dates have whole seconds.
  return !Number.isNaN(since) && Math.floor(v.mtimeMs / 1000) * 1000 <= since;
}

/** If-Range: true when a Range may be honoured (no If-Range, or it matches strongly). */
export function ifRangeAllows(ifRange: string | null, v: Validators): boolean {
  if (ifRange === null) return true;
  const value = ifRange.trim();
  if (value.startsWith('"') || value.startsWith('W/')) return value === v.etag; // strong comparison
  const date = Date.parse(value);
  return !Number.isNaN(date) && date === Math.floor(v.mtimeMs / 1000) * 1000;
}

// The last date formatted: the requests for one file ask for its modification time again and again.
let lastDate = { ms: NaN, text: '' };

export function httpDate(ms: number): string {
  if (ms !== lastDate.ms) lastDate = { ms, text: new Date(ms).toUTCString() };
  return lastDate.text;
}

/** The entity tags of a list header; malformed members are dropped. */
function entityTags(list: string): string[] {
  return list.match(/(?:W\/)?"[^"]*"/g) ?? [];
}

function opaque(tag: string): string {
  return tag.startsWith('W/') ? tag.slice(2) : tag;
}
