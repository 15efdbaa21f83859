/**
 * Text someone on the internet chose (a page's title, a file's tags), made fit to show: in a job
 * record, on the page, in a file name. Nothing here reads or runs anything.
 *
 * What goes, and why:
 * - control characters (C0, DEL, C1): line breaks and tabs become spaces, the rest goes; they
 *   move terminals' cursors and split log lines;
 * - the bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069): an
 *   override shows text in another order than it has ("song‮vaw.exe" reads as "songexe.wav");
 *   right-to-left letters keep their own direction without them, so Hebrew or Arabic text stays
 *   readable; the directional marks (LRM, RLM, ALM), which reorder nothing, stay;
 * - lone surrogates and the noncharacters U+FFFE, U+FFFF and U+FEFF (a byte-order mark): not
 *   text, and not encodable as UTF-8;
 * - HTML: every tag (`<b>`, `</a>`, `<!-- -->`, `<script ...>`) is removed, again until none is
 *   left (`<<b>script>` does not become `<script>`), and a `<` that could still open one (before
 *   a letter, `/`, `!` or `?`) becomes `＜` (U+FF1C): the text never carries markup, whoever
 *   shows it and however. Entities (`&amp;`) are left as they are: decoding them would make tags.
 * The text is put in Unicode's composed form (NFC), runs of white space become one space, the ends
 * are trimmed, and it is cut at its bound on a boundary between characters as people see them
 * (grapheme clusters: an emoji sequence or a letter with its accents is never split), ending in
 * `…` when cut.
 */

const LINE_BREAKS = /[\t\n\v\f\r\u0085\u2028\u2029]/g;
const CONTROLS = /[\u0000-\u001f\u007f-\u009f]/g;
const BIDI_EMBEDDINGS_OVERRIDES_ISOLATES = /[\u202a-\u202e\u2066-\u2069]/g;
const NONCHARACTERS = /[\ufeff\ufffe\uffff]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
/** A tag, a closing tag, a comment, a declaration or a processing instruction, whole. */
const TAG = /<[A-Za-z/!?][^<>]*>/g;
/** A `<` that could open a tag, once no whole tag is left. */
const TAG_OPENER = /<(?=[A-Za-z/!?])/g;
/** The most characters looked at: a longer input is cut first, so that cleaning costs a bounded time. */
const MAX_INPUT_CHARS = 16 * 1024;

const graphemes = new Intl.Segmenter('en', { granularity: 'grapheme' });

/** Removes markup: whole tags (until none is left), then turns a `<` that could open one into `＜`. */
export function withoutMarkup(text: string): string {
  let previous: string;
  let current = text;
  do {
    previous = current;
    current = current.replace(TAG, '');
  } while (current !== previous);
  return current.replace(TAG_OPENER, '\uff1c');
}

/** Removes what could spoof or break a display (see the module's comment); white space kept as it is but line breaks. */
export function withoutUnsafeCharacters(text: string): string {
  return text
    .replace(LINE_BREAKS, ' ')
    .replace(CONTROLS, '')
    .replace(BIDI_EMBEDDINGS_OVERRIDES_ISOLATES, '')
    .replace(NONCHARACTERS, '');
}

/**
 * `text` cut to at most `max` units as `measure` counts them, on a grapheme boundary; `ellipsis`
 * is appended when cut (and counted within `max`).
 */
export function cutAtGrapheme(text: string, max: number, measure: (part: string) => number, ellipsis = ''): string {
  if (measure(text) <= max) return text;
  const room = max - measure(ellipsis);
  let kept = '';
  let used = 0;
  for (const { segment } of graphemes.segment(text)) {
    const size = measure(segment);
    if (used + size > room) break;
    kept += segment;
    used += size;
  }
  return kept.trimEnd() + ellipsis;
}

/** Characters as people count them in a string: code points (an emoji is one, not two UTF-16 units). */
export function codePoints(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/**
 * `value` made fit to show, at most `maxChars` code points (see the module's comment); null when
 * it is not a string or nothing is left of it.
 */
export function cleanDisplayText(value: unknown, maxChars: number): string | null {
  if (typeof value !== 'string') return null;
  // Characters first: a tag split by one ("<\u202eb>") is whole once it is gone.
  const cleaned = withoutMarkup(withoutUnsafeCharacters(value.slice(0, MAX_INPUT_CHARS)).normalize('NFC'))
    .replace(/\s+/g, ' ')
    .trim();
  if (cleaned === '') return null;
  return cutAtGrapheme(cleaned, maxChars, codePoints, '…');
}
