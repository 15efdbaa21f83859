/**
 * Stand-ins for yt-dlp and ffmpeg that fail on purpose, for fault tests. Each is a small shell
 * script in `dir`; they answer `--version` / `-version` like the real tool (so the health check
 * finds them) and otherwise echo their whole command line to stderr, which carries server paths
 * and, for yt-dlp, the per-job proxy credentials, before exiting non-zero. A job's error
 * message must show none of that. Three more work but differ: one claims a version (the health
 * check reads its age), one ends late (so that a conversion can be watched), one at the
 * audio's own pace (so that a conversion can be caught in its middle).
 *
 *   const ytdlp = await writeFailingYtDlp(dir);           // YTDLP_PATH
 *   const ffmpeg = await writeFailingFfmpeg(dir);         // FFMPEG_PATH
 *   const noExec = await writeNotExecutable(dir);         // a file without the x bit
 *   const old = await writeYtDlpOfVersion(dir, '2023.03.04'); // says it is that version
 *   const slow = await writeSlowFfmpeg(dir, 2);          // converts, and ends 2 s late
 *   const realtime = await writeRealtimeFfmpeg(dir);      // converts at the audio's own pace
 */
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

async function script(dir: string, name: string, body: string, mode = 0o755): Promise<string> {
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, name);
  await writeFile(file, `#!/bin/sh\n${body}\n`);
  await chmod(file, mode);
  return file;
}

export function writeFailingYtDlp(dir: string): Promise<string> {
  return script(
    dir,
    'yt-dlp',
    [
      'if [ "$1" = "--version" ]; then echo 2023.03.04; exit 0; fi',
      'echo "WARNING: [generic] Falling back on generic information extractor" >&2',
      'echo "ERROR: [generic] Unable to download webpage: crashed while running $*" >&2',
      'echo "  File \\"$PWD/extractor/common.py\\", line 42" >&2',
      'exit 1',
    ].join('\n'),
  );
}

export function writeFailingFfmpeg(dir: string, realFfmpeg = 'ffmpeg'): Promise<string> {
  return script(
    dir,
    'ffmpeg',
    [
      `if [ "$1" = "-version" ]; then exec ${realFfmpeg} -version; fi`,
      'echo "[mp3 @ 0x55d1c0] Header missing in $*" >&2',
      'echo "Conversion failed at $PWD/out.wav" >&2',
      'exit 187',
    ].join('\n'),
  );
}

/** A regular file that is not executable: spawning it fails with EACCES. */
export function writeNotExecutable(dir: string, name = 'yt-dlp'): Promise<string> {
  return script(dir, name, 'exit 0', 0o644);
}

/**
 * A yt-dlp that says it is `version` (e.g. an old release, for the health check's age) and
 * hands everything else to the real one.
 */
export function writeYtDlpOfVersion(dir: string, version: string, realYtDlp = '/usr/bin/yt-dlp'): Promise<string> {
  return script(
    dir,
    'yt-dlp',
    [`if [ "$1" = "--version" ]; then echo '${version}'; exit 0; fi`, `exec ${realYtDlp} "$@"`].join('\n'),
  );
}

/**
 * The real ffmpeg, ending `delaySeconds` late: a conversion that lasts long enough after its input
 * has ended to be seen (the CLI's "converting" phase).
 */
export function writeSlowFfmpeg(dir: string, delaySeconds: number, realFfmpeg = '/usr/bin/ffmpeg'): Promise<string> {
  return script(
    dir,
    'ffmpeg',
    [
      `if [ "$1" = "-version" ]; then exec ${realFfmpeg} -version; fi`,
      `${realFfmpeg} "$@"`,
      'status=$?',
      `sleep ${delaySeconds}`,
      'exit $status',
    ].join('\n'),
  );
}

/**
 * The real ffmpeg, reading its input at the audio's own rate (-re): a 30 s file takes 30 s to
 * convert, its WAV growing all along, so that a test can stop the service in the middle of it.
 */
export function writeRealtimeFfmpeg(dir: string, realFfmpeg = '/usr/bin/ffmpeg'): Promise<string> {
  return script(
    dir,
    'ffmpeg',
    [`if [ "$1" = "-version" ]; then exec ${realFfmpeg} -version; fi`, `exec ${realFfmpeg} -re "$@"`].join('\n'),
  );
}
