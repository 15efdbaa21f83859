import { AUDIO_ARTIFACT_NAME } from '../store/layout.js';
import { cutAtGrapheme, withoutUnsafeCharacters } from '../tools/display-text.js';

/**
 * The name a download is saved under (an artifact's `download_name`, its signed URL's and a keyed
 * request's `filename`, the CLI's default file): the source's title with the artifact's suffix
 * (`My Song.wav`, `My Song.peaks.json`), or the artifact's own name when there is no title.
 *
 * Safe on every common system (Linux, macOS, Windows): none of the characters Windows refuses
 * (`< > : " / \ | ? *`: each becomes `_`), no control, bidirectional or invisible direction
 * character (a name never shows in another order than it has, nor hides its extension), not
 * starting with a dot or a space (hidden, or trimmed away), not ending with a dot or a space (which
 * Windows drops), no name Windows keeps for a device (`CON`, `nul.txt`, `COM1`...: prefixed with
 * `_`), in Unicode's composed form, and at most MAX_DOWNLOAD_NAME_BYTES bytes of UTF-8 (file
 * systems count 255 bytes or UTF-16 units; room is left for a "(2)" a browser adds), cut between
 * two characters as people see them (grapheme clusters).
 */
export const MAX_DOWNLOAD_NAME_BYTES = 200;

/** The characters Windows refuses in a file name (besides controls). */
const WINDOWS_RESERVED_CHARACTERS = /[<>:"/\\|?*]/g;
/** The directional marks, which ../tools/display-text.ts keeps in shown text: invisible in a name. */
const DIRECTION_MARKS = /[\u061c\u200e\u200f]/g;
/** Device names Windows keeps, whatever the extension (the part before the first dot). */
const WINDOWS_DEVICE = /^(?:con|prn|aux|nul|com[0-9¹²³]|lpt[0-9¹²³]|conin\$|conout\$)$/i;

const utf8Bytes = (text: string) => Buffer.byteLength(text, 'utf8');

/** An artifact's download name, from the source's title (none: the artifact's own name). */
export function downloadName(title: string | null, artifactName: string): string {
  const suffix = artifactName === AUDIO_ARTIFACT_NAME ? '.wav' : `.${artifactName}`;
  return named(title ?? '', suffix, artifactName);
}

/**
 * The name a request asks for (a keyed request's `filename`, a signed URL's), made safe: cleaned
 * as downloadName cleans a title, and ending with the artifact's extension (`.wav`, `.json`),
 * added when it does not. Empty or nothing left: the artifact's own name. A name downloadName
 * made comes back unchanged.
 */
export function requestedDownloadName(requested: string, artifactName: string): string {
  const dot = artifactName.lastIndexOf('.');
  const extension = dot < 0 ? '' : artifactName.slice(dot);
  const normalized = requested.normalize('NFC');
  const hasExtension = extension !== '' && normalized.toLowerCase().endsWith(extension.toLowerCase());
  const stem = hasExtension ? normalized.slice(0, -extension.length) : normalized;
  return named(stem, extension, artifactName);
}

function named(stem: string, suffix: string, fallback: string): string {
  const safe = safeStem(stem, MAX_DOWNLOAD_NAME_BYTES - utf8Bytes(suffix));
  return safe === '' ? fallback : `${safe}${suffix}`;
}

/** A file name's part before its suffix, made safe (see the module's comment), within `maxBytes` of UTF-8. */
function safeStem(text: string, maxBytes: number): string {
  let stem = withoutUnsafeCharacters(text)
    .replace(DIRECTION_MARKS, '')
    .normalize('NFC')
    .replace(WINDOWS_RESERVED_CHARACTERS, '_')
    .replace(/\s+/g, ' ')
    .replace(/^[. ]+|[. ]+$/g, '');
  if (WINDOWS_DEVICE.test(stem.split('.')[0]!.trimEnd())) stem = `_${stem}`;
  return cutAtGrapheme(stem, maxBytes, utf8Bytes).replace(/[. ]+$/, '');
}
