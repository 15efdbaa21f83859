/**
 * Whether ffmpeg can convert a download from its first byte to its last as it arrives (read from a
 * pipe, never seeking), told from the download's first bytes, whatever its name says. Only
 * containers whose demuxers need nothing from the file's end, and whose conversion from a pipe
 * gives the same bytes as from the file (checked with ffmpeg 5.1 on the test fixtures), count:
 * MPEG audio and ADTS AAC frames (optionally behind ID3v2 tags), Ogg, FLAC, RIFF WAVE and
 * EBML (WebM, Matroska). Anything else, MP4/m4a above all (its index may be at its end), is
 * converted once the download is whole.
 */
export type ContainerVerdict = 'stream' | 'whole' | 'more';

/** An ID3v2 tag larger than this (cover art, say) is not waited for: the file is converted whole. */
export const MAX_SNIFF_BYTES = 1024 * 1024;

const ID3_HEADER_BYTES = 10;

/**
 * 'stream' or 'whole' once `prefix` (the download's first bytes) decides; 'more' while it needs
 * more bytes (never for a prefix of MAX_SNIFF_BYTES or more).
 */
export function streamableContainer(prefix: Buffer): ContainerVerdict {
  let at = 0;
  // ID3v2 tags (one after another, as some taggers write them) in front of MPEG or ADTS frames.
  while (prefix.length >= at + 3 && prefix.toString('latin1', at, at + 3) === 'ID3') {
    if (prefix.length < at + ID3_HEADER_BYTES) return more(prefix);
    const flags = prefix[at + 5]!;
    const sizeBytes = prefix.subarray(at + 6, at + 10);
    // A syncsafe integer: 7 bits a byte, the top bit always clear.
    if (sizeBytes.some((byte) => byte & 0x80)) return 'whole';
    const size = sizeBytes.reduce((sum, byte) => sum * 128 + byte, 0);
    const footer = flags & 0x10 ? ID3_HEADER_BYTES : 0;
    at += ID3_HEADER_BYTES + size + footer;
    if (at >= MAX_SNIFF_BYTES) return 'whole';
  }
  const head = prefix.subarray(at);
  const needed = at > 0 ? 2 : 12;
  if (head.length < needed) return more(prefix);
  // An MPEG audio or ADTS frame: 11 (MPEG) or 12 (ADTS) sync bits.
  if (head[0] === 0xff && (head[1]! & 0xe0) === 0xe0) return 'stream';
  // Behind an ID3 tag only frames count (the tag makes ffmpeg probe what follows as a whole file).
  if (at > 0) return 'whole';
  const text = head.toString('latin1', 0, 4);
  if (text === 'OggS' || text === 'fLaC') return 'stream';
  if (text === 'RIFF' && head.toString('latin1', 8, 12) === 'WAVE') return 'stream';
  if (head.readUInt32BE(0) === 0x1a45dfa3) return 'stream';
  return 'whole';
}

/** Extensions of the MP4 family (ISO base media files: MP4, m4a, QuickTime, 3GP, F4V). */
const MP4_FAMILY_EXTENSION = /\.(?:mp4|m4a|m4b|m4p|m4v|mov|3gp|3g2|f4a|f4v)$/i;

/**
 * Whether a URL's path names a file of the MP4 family, which is converted whole: a guess made
 * before any byte has come (the bytes decide, `streamableContainer`), so that a converter is not
 * started early only to be stopped unfed.
 */
export function namesMp4File(url: string): boolean {
  return URL.canParse(url) && MP4_FAMILY_EXTENSION.test(new URL(url).pathname);
}

function more(prefix: Buffer): ContainerVerdict {
  return prefix.length >= MAX_SNIFF_BYTES ? 'whole' : 'more';
}
