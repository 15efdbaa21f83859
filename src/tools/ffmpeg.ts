/**
 * ffmpeg/ffprobe argument builders and the ffprobe JSON parser. Nothing here runs a process.
 *
 * The input is a file someone on the internet chose, so both tools get two whitelists:
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

const INPUT_GUARDS = ['-protocol_whitelist', 'file', '-format_whitelist', INPUT_FORMAT_WHITELIST];

export const OUTPUT_SAMPLE_RATE = 44100;

export interface ConvertArgsOptions {
  input: string;
  /** A path the caller owns and that does not exist yet: ffmpeg is told never to overwrite. */
  output: string;
  /** Channels of the input's first audio stream (from parseProbe): 1 stays mono, 2+ or unknown becomes stereo. */
  inputChannels: number | null;
  maxDurationS: number;
}

/**
 * First audio stream → PCM s16le WAV at 44.1 kHz, mono or stereo, cut at maxDurationS.
 * The WAV carries no metadata and no encoder tag, so the same input gives the same bytes.
 */
export function buildConvertArgs(opts: ConvertArgsOptions): string[] {
  return [
    '-nostdin',
    '-hide_banner',
    '-loglevel',
    'error',
    // Fail rather than replace an existing file.
    '-n',
    ...INPUT_GUARDS,
    '-i',
    `file:${opts.input}`,
    // Only the first audio stream is mapped: video, cover art, subtitles and data are left out.
    '-map',
    '0:a:0',
    '-t',
    String(opts.maxDurationS),
    '-ac',
    opts.inputChannels === 1 ? '1' : '2',
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
  ];
}

/** ffprobe: streams and container of one local file, as JSON on stdout. */
export function buildProbeArgs(input: string): string[] {
  return [
    '-v',
    'error',
    ...INPUT_GUARDS,
    '-print_format',
    'json',
    '-show_streams',
    '-show_format',
    `file:${input}`,
  ];
}

export interface ProbeSummary {
  /** 0 means the file has no audio: the worker fails the job with its own code. */
  audioStreams: number;
  /** Of the first audio stream. */
  channels: number | null;
  sampleRate: number | null;
  durationS: number | null;
  formatName: string | null;
}

/** Summarises ffprobe's JSON; throws when it is not ffprobe JSON at all. */
export function parseProbe(json: string): ProbeSummary {
  let data: unknown;
  try {
    data = JSON.parse(json);
  } catch {
    throw new Error('ffprobe output is not valid JSON');
  }
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    throw new Error('ffprobe output is not an object');
  }
  const { streams, format } = data as { streams?: unknown; format?: unknown };
  const streamList = Array.isArray(streams) ? (streams as Array<Record<string, unknown>>) : [];
  const formatObj = typeof format === 'object' && format !== null ? (format as Record<string, unknown>) : {};
  const audio = streamList.filter((s) => typeof s === 'object' && s !== null && s.codec_type === 'audio');
  const first = audio[0];
  return {
    audioStreams: audio.length,
    channels: positiveNumber(first?.channels),
    sampleRate: positiveNumber(first?.sample_rate),
    durationS: positiveNumber(formatObj.duration) ?? positiveNumber(first?.duration),
    formatName: typeof formatObj.format_name === 'string' ? formatObj.format_name : null,
  };
}

/** ffprobe prints some numbers as strings ("44100", "3.000000") and "N/A" when unknown. */
function positiveNumber(value: unknown): number | null {
  const n = typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : NaN;
  return Number.isFinite(n) && n > 0 ? n : null;
}
