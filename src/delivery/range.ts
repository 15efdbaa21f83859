/**
 * The Range header (RFC 9110 §14), as far as artifact delivery uses it: one byte range.
 * Anything this does not understand is ignored (a full 200), which RFC 9110 allows; that
 * includes several ranges at once, because players ask for one and multipart bodies would
 * only add a second way of answering.
 */
export type RangeOutcome =
  | { kind: 'none' } // no Range, or one we ignore: send the whole file
  | { kind: 'range'; start: number; end: number } // inclusive bounds
  | { kind: 'unsatisfiable' };

const SINGLE_RANGE = /^bytes[ \t]*=[ \t]*(\d*)[ \t]*-[ \t]*(\d*)[ \t]*$/i;

export function parseRange(header: string | undefined, size: number): RangeOutcome {
  if (header === undefined) return { kind: 'none' };
  const match = SINGLE_RANGE.exec(header);
  if (!match) return { kind: 'none' };
  const [, first = '', last = ''] = match;
  if (first === '' && last === '') return { kind: 'none' };
  if (first === '') {
    // Suffix range: the last N bytes.
    const length = Number(last);
    if (!Number.isSafeInteger(length)) return { kind: 'none' };
    if (length === 0 || size === 0) return { kind: 'unsatisfiable' };
    return { kind: 'range', start: Math.max(0, size - length), end: size - 1 };
  }
  const start = Number(first);
  const end = last === '' ? Number.MAX_SAFE_INTEGER : Number(last);
  if (!Number.isSafeInteger(start) || !Number.isSafeInteger(end)) return { kind: 'none' };
  if (end < start) return { kind: 'none' }; // syntactically invalid: ignored
  if (start >= size) return { kind: 'unsatisfiable' };
  return { kind: 'range', start, end: Math.min(end, size - 1) };
}
