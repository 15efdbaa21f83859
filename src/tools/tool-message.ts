/**
 * A failed tool's stderr made fit for a job record's `error.detail`, which a client reads, and for
 * the job's log: no secret, no server path, no terminal escapes, a few lines at most. For yt-dlp
 * (./ytdlp-failure.ts) and ffmpeg alike.
 */

/** A message keeps the last MESSAGE_LINES lines, cut at MAX_MESSAGE_CHARS characters. */
const MAX_MESSAGE_CHARS = 500;
const MESSAGE_LINES = 3;
/** The log keeps more of it: the lines before the error often say what led there. */
const MAX_LOG_CHARS = 4000;
const LOG_LINES = 30;
/** CSI sequences (colours, cursor moves) and OSC sequences (console title). */
const ANSI = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]/g;
/** file:// URLs name server paths outright. */
const FILE_URL = /file:\/\/[^\s'"`()<>,;]*/gi;
/**
 * An absolute path with at least two segments ("file:/tmp/x/y" included), but not "://" nor the
 * path of a URL, which follows its host ("127.0.0.1:8080/a/b", "[::1]/a/b") or another "/".
 */
const ABSOLUTE_PATH = /(?<![\w.%\]/-])\/(?!\/)(?:[^\s/'"`()<>,;]+\/)+[^\s'"`()<>,;]*/g;
/** yt-dlp's "please report this issue" trailer adds nothing for a client. */
const REPORT_TRAILER = /;?\s*please report this issue on\s.*$/i;
/** Progress redraws are noise in an error message. */
const PROGRESS_NOISE = /^(?:\[download\]\s+\d|PROGRESS )/;

/**
 * A short text for the job record's error.detail: the last meaningful stderr lines (ERROR: lines
 * preferred), with the given secrets and paths, every absolute path and ANSI escapes removed, at
 * most ~500 characters. `secretsAndPaths` takes the proxy URL (its user and password are removed too,
 * raw and percent-decoded), the job's temp folder, the data dir...
 */
export function cleanToolMessage(stderrTail: string, secretsAndPaths: string[]): string {
  const lines = cleanLines(stderrTail, secretsAndPaths);
  const errors = lines.filter((line) => line.startsWith('ERROR:'));
  return cut((errors.length > 0 ? errors : lines).slice(-MESSAGE_LINES).join('\n'), MAX_MESSAGE_CHARS);
}

/** The same cleaning for the job's log line: every kind of line (warnings too), the last LOG_LINES. */
export function toolOutputForLog(stderrTail: string, secretsAndPaths: string[]): string {
  return cut(cleanLines(stderrTail, secretsAndPaths).slice(-LOG_LINES).join('\n'), MAX_LOG_CHARS);
}

/** The non-empty lines of `stderrTail`, without escapes, secrets, paths, progress or yt-dlp's trailer. */
function cleanLines(stderrTail: string, secretsAndPaths: string[]): string[] {
  let text = stderrTail.replace(ANSI, '');
  for (const secret of expandSecrets(secretsAndPaths)) {
    text = text.replaceAll(secret, '[redacted]');
  }
  text = text.replace(FILE_URL, '[path]').replace(ABSOLUTE_PATH, '[path]');
  return text
    .split(/\r\n|\r|\n/)
    .map((line) => line.replace(REPORT_TRAILER, '').trim())
    .filter((line) => line !== '' && !PROGRESS_NOISE.test(line));
}

/** A text longer than maxChars keeps its start, and ends in an ellipsis. */
function cut(text: string, maxChars: number): string {
  return text.length > maxChars ? `${text.slice(0, maxChars - 1)}…` : text;
}

/** Each secret, plus the user and password of any that is a URL; longest first so none is half-replaced. */
function expandSecrets(secrets: string[]): string[] {
  const all = new Set<string>();
  for (const secret of secrets) {
    if (secret === '') continue;
    all.add(secret);
    let url: URL | null = null;
    try {
      url = new URL(secret);
    } catch {
      // Not a URL: a path or a bare token.
    }
    for (const part of [url?.username, url?.password]) {
      if (!part) continue;
      all.add(part);
      all.add(safeDecode(part));
    }
  }
  return [...all].sort((a, b) => b.length - a.length);
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}
