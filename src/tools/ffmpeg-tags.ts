/**
 * A media file's own tags (ID3, Vorbis comments, MP4 atoms...), as the conversion's ffmpeg writes
 * them beside the WAV in its FFMETADATA format (./ffmpeg.ts, `tagsOutput`), read. Nothing here
 * runs a process.
 *
 * The format (libavformat's ffmetaenc.c): a first line `;FFMETADATA1`, then `key=value` lines,
 * in which `=`, `;`, `#`, `\` and a line break are escaped with a `\`; sections (`[STREAM]`,
 * `[CHAPTER]`) follow the global ones, which are the only ones read. ffmpeg keeps keys as the file
 * has them (`TITLE` in a FLAC's Vorbis comments, `title` in an MP3's ID3): they are matched
 * without regard to case.
 */

export interface FileTags {
  title?: string;
  artist?: string;
  album?: string;
}

/** The most of the file read: tags past it (after a long lyrics tag, say) are not seen. */
export const MAX_TAGS_BYTES = 64 * 1024;

const HEADER = ';FFMETADATA1';
/** The keys read (in lower case), for each of our tags in order of preference. */
const WANTED: Record<keyof FileTags, string[]> = {
  title: ['title'],
  artist: ['artist', 'album_artist'],
  album: ['album'],
};

/**
 * The title, artist (else the album's artist) and album among the global tags of an FFMETADATA
 * text, the first non-blank value of each key; {} when it is not one.
 */
export function parseFfmetadata(text: string): FileTags {
  if (!text.startsWith(HEADER)) return {};
  const found = new Map<string, string>();
  for (const [key, value] of entries(text.slice(HEADER.length))) {
    const lower = key.toLowerCase();
    if (!found.has(lower) && value.trim() !== '') found.set(lower, value);
  }
  const tags: FileTags = {};
  for (const [tag, keys] of Object.entries(WANTED) as Array<[keyof FileTags, string[]]>) {
    const value = keys.map((key) => found.get(key)).find((v) => v !== undefined);
    if (value !== undefined) tags[tag] = value;
  }
  return tags;
}

/** The global section's `key=value` entries, unescaped; a last line cut short (no line break) is left out. */
function* entries(body: string): Generator<[string, string]> {
  let line = '';
  let escaped = false;
  for (const ch of body) {
    if (escaped) {
      line += ch === '\n' ? '\n' : `\\${ch}`;
      escaped = false;
    } else if (ch === '\\') escaped = true;
    else if (ch === '\n') {
      if (line.startsWith('[')) return;
      const entry = splitEntry(line);
      if (entry) yield entry;
      line = '';
    } else line += ch;
  }
}

/** `key=value` at its first unescaped `=`, both unescaped; null for a comment or a line without one. */
function splitEntry(line: string): [string, string] | null {
  if (line.startsWith(';') || line.startsWith('#')) return null;
  for (let i = 0; i < line.length; i++) {
    if (line[i] === '\\') i++;
    else if (line[i] === '=') return [unescape(line.slice(0, i)), unescape(line.slice(i + 1))];
  }
  return null;
}

function unescape(text: string): string {
  return text.replace(/\\(.)/gs, '$1');
}
