/**
 * EBU R128 loudness as ffmpeg's ebur128 filter reports it: the summary it logs (at level info)
 * when the filter graph ends. The conversion measures it on the same decode (ffmpeg.ts,
 * buildConvertArgs with measureLoudness) and has ffmpeg write its log at level info to a report
 * file (LOUDNESS_REPORT_FILE), since ffmpeg's own stderr stays at level error; this reads the
 * summary from the end of that file.
 */
export interface Loudness {
  /** Integrated loudness, LUFS. */
  integratedLufs: number;
  /** Loudness range, LU. */
  rangeLu: number;
  /** True peak (the highest of the channels, 4× oversampled), dBTP. */
  truePeakDbtp: number;
}

/** The ffmpeg report's name, in the conversion's working folder (its cwd). */
export const LOUDNESS_REPORT_FILE = 'ffmpeg-report.log';
/** The end of the report that holds the summary (about 500 bytes, after the input's dump). */
export const LOUDNESS_REPORT_TAIL_BYTES = 16 * 1024;

/** The environment that has ffmpeg write its log at level info (32) to `file`, besides stderr. */
export function loudnessReportEnv(file: string): Record<string, string> {
  // FFREPORT's values are separated by ':' and escaped with '\'.
  return { FFREPORT: `file=${file.replace(/[\\:']/g, (ch) => `\\${ch}`)}:level=32` };
}

const NUMBER = String.raw`(-?(?:\d+(?:\.\d+)?|inf)|nan)`;
const INTEGRATED = new RegExp(String.raw`Integrated loudness:\s*\n\s*I:\s*${NUMBER} LUFS`);
const RANGE = new RegExp(String.raw`Loudness range:\s*\n\s*LRA:\s*${NUMBER} LU\b`);
const TRUE_PEAK = new RegExp(String.raw`True peak:\s*\n\s*Peak:\s*${NUMBER} dBFS`);

/**
 * The last ebur128 summary in `log` (anything before it, such as an input's metadata, is not
 * read), or null when there is none or a value is not finite (silence has a true peak of -inf).
 */
export function parseEbur128Summary(log: string): Loudness | null {
  const at = log.lastIndexOf('] Summary:');
  if (at < 0) return null;
  const summary = log.slice(at);
  const values = [INTEGRATED, RANGE, TRUE_PEAK].map((pattern) => Number(pattern.exec(summary)?.[1] ?? NaN));
  if (!values.every(Number.isFinite)) return null;
  const [integratedLufs, rangeLu, truePeakDbtp] = values as [number, number, number];
  return { integratedLufs, rangeLu, truePeakDbtp };
}
