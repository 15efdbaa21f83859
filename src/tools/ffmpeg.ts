/**
 * ffmpeg's argument builder. Nothing here runs a process.
 *
 * The input is a file someone on the internet chose, so ffmpeg gets two whitelists:
 * - protocols: only `file` (paths are passed as `file:<path>`, so a name containing ":" is never
 *   read as a protocol);
 * - demuxers: only media containers. Without it a "media" file whose content is an HLS playlist
 *   or an ffconcat script is opened by the hls/concat demuxer, which then reads the files it
 *   lists, other files on this server included (verified with Debian's ffmpeg 5.1: the hls
 *   demuxer followed a playlist to a neighbouring file; with the whitelist it refuses).
 */

/** Demuxers a downloaded audio source may need; matched against every name a demuxer has (mov,mp4,m4a...). */
export const INPUT_FORMAT_WHITELIST = [
  'mov', // mp4, m4a, 3gp
  'matroska', // mkv, webm
  'ogg',
  'mp3',
  'aac',
  'loas',
  'flac',
  'wav',
  'w64',
  'aiff',
  'caf',
  'au',
  'wv',
  'ape',
  'tta',
  'amr',
  'ac3',
  'eac3',
  'dts',
  'asf',
  'avi',
  'flv',
  'mpegts',
  'mpeg',
].join(',');

export const OUTPUT_SAMPLE_RATE = 44100;

export interface ConvertArgsOptions {
  input: string;
  /** A path the caller owns and that does not exist yet: ffmpeg is told never to overwrite. */
  output: string;
  maxDurationS: number;
  /** The converter's memory ceiling, which no single allocation may take more than a quarter of. */
  maxAllocBytes: number;
  /**
   * The input is a FIFO fed by the service as the download grows: ffmpeg reads it through its
   * `async` protocol, a thread that drains the FIFO into a buffer of its own (4 MiB) as bytes
   * arrive, so that decoding does not wait for the service's event loop to refill the FIFO's
   * 64 KiB (a one-hour mp3's conversion took some 15 % longer without it).
   */
  fedThroughFifo?: boolean;
  /**
   * A second output, a path the caller owns and that does not exist yet: the input's tags (its
   * global ones and its first audio stream's, where Ogg and Opus keep their Vorbis comments) in
   * ffmpeg's FFMETADATA text (./ffmpeg-tags.ts reads it). The WAV is not touched by it: it still
   * carries no metadata.
   */
  tagsOutput?: string;
}

/**
 * How far past the duration limit the conversion goes: a WAV longer than the limit shows that the
 * media was, with no prober run before (the conversion stops there in any case).
 */
export const DURATION_OVERRUN_S = 1;

/** The input as ffmpeg is told it, and names it at the start of its error lines about it. */
export function inputUrl(opts: Pick<ConvertArgsOptions, 'input' | 'fedThroughFifo'>): string {
  return opts.fedThroughFifo ? `async:file:${opts.input}` : `file:${opts.input}`;
}

/**
 * First audio stream → PCM s16le WAV at 44.1 kHz, cut DURATION_OVERRUN_S past maxDurationS.
 * Mono stays mono, anything else becomes stereo: aformat picks the nearest of the two layouts and
 * ffmpeg's standard downmix does the rest, byte for byte what `-ac 1` or `-ac 2` chosen from the
 * input's channel count give (checked with ffmpeg 5.1 on mono, stereo, 2.1, 3.0, 4.0, quad, 5.1
 * and 7.1), without having to know that count first.
 * The WAV carries no metadata and no encoder tag, so the same input gives the same bytes. The
 * input's tags go, when asked for, to a text file of their own (`tagsOutput`), written by the same
 * run: no second process reads the input.
 * ffmpeg opens its output only once it has opened the input and found an audio stream in it: an
 * output file that does not exist after a failure means the input is not audio.
 */
export function buildConvertArgs(opts: ConvertArgsOptions): string[] {
  return [
    '-nostdin',
    '-nostats',
    '-hide_banner',
    '-loglevel',
    'error',
    // ffmpeg's own belt under the sandbox's memory ceiling: a container that declares a huge
    // table is refused at its first allocation instead of growing the process to the ceiling.
    '-max_alloc',
    String(Math.floor(opts.maxAllocBytes / 4)),
    // Fail rather than replace an existing file.
    '-n',
    // Local files only (through the async reader when fed through a FIFO), of media containers only.
    '-protocol_whitelist',
    opts.fedThroughFifo ? 'async,file' : 'file',
    '-format_whitelist',
    INPUT_FORMAT_WHITELIST,
    '-i',
    inputUrl(opts),
    // Only the first audio stream is mapped: video, cover art, subtitles and data are left out.
    '-map',
    '0:a:0',
    '-t',
    String(opts.maxDurationS + DURATION_OVERRUN_S),
    '-af',
    'aformat=channel_layouts=mono|stereo',
    '-ar',
    String(OUTPUT_SAMPLE_RATE),
    '-c:a',
    'pcm_s16le',
    '-map_metadata',
    '-1',
    '-fflags',
    '+bitexact',
    '-flags:a',
    '+bitexact',
    '-f',
    'wav',
    `file:${opts.output}`,
    ...(opts.tagsOutput === undefined ? [] : tagsOutputArgs(opts.tagsOutput)),
  ];
}

/**
 * An output of no streams, the input's tags alone: its global ones (an MP3's ID3, a FLAC's
 * comments), then its first audio stream's (an Ogg's or Opus's comments) where a global one of
 * the same name is missing: of two mappings to one output, ffmpeg keeps the first one's values.
 */
function tagsOutputArgs(file: string): string[] {
  return [
    '-map_metadata:g',
    '0:g',
    '-map_metadata:g',
    '0:s:a:0',
    '-fflags',
    '+bitexact',
    '-f',
    'ffmetadata',
    `file:${file}`,
  ];
}
