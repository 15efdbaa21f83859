import { randomBytes, randomUUID } from 'node:crypto';
import path from 'node:path';
import { COOKIES_FILE_NAME, DOWNLOAD_BASENAME, GATE_FIFO } from '../../tools/ytdlp-args.js';

/**
 * The work folder's layout (WORK_DIR): what lies where, by name. Nothing here touches the disk.
 *
 *   <job id>.<attempt>/          one attempt of a job (attemptFolder), removed when it ends
 *     yt-dlp.conf                the proxy with the job's credentials, and its cookies (configFilePath)
 *     cookies.txt                the job's copy of YTDLP_COOKIES_FILE (named by yt-dlp's config: COOKIES_FILE_NAME)
 *     no-ffmpeg/                 an empty folder handed to yt-dlp as its ffmpeg (noFfmpegFolder)
 *     gate                       the FIFO yt-dlp's gate reads (GATE_FIFO, ../../tools/ytdlp-args.ts)
 *     download/source.<ext>      the download as it grows, and once done (downloadFolder, isDownloadFile)
 *     feed                       the FIFO the converter reads the download from (feedFifoPath)
 *     <uuid>.wav, <uuid>.tags    the converted WAV and the input's tags beside it (newWavPath, tagsPathOf)
 *   <job id>.listing/            the listing of a collection's entries (listingFolder): yt-dlp.conf,
 *                                cookies.txt and no-ffmpeg/ as in an attempt's folder, removed when it ends
 *   converter.<node id>.<random>/  a converter started before its job (waitingConverterFolder):
 *     feed, <uuid>.wav, <uuid>.tags  as in an attempt's folder
 *
 * Start-up recovery (../../ops/startup.ts) tells whose a folder is from its name
 * (jobIdOfFolder, waitingConverterNode).
 */

/** The folder of one attempt of a job: nothing of an interrupted attempt can mix with the next. */
export function attemptFolder(workDir: string, job: { id: string; attempts: number }): string {
  return path.join(workDir, `${job.id}.${job.attempts}`);
}

/** The folder of a collection's listing (../collection/list-entries.ts), named for its job like an attempt's. */
export function listingFolder(workDir: string, jobId: string): string {
  return path.join(workDir, `${jobId}.listing`);
}

/** `<job id>.<attempt>` (or `<job id>.listing`) → job id. */
export function jobIdOfFolder(folder: string): string {
  const dot = folder.lastIndexOf('.');
  return dot > 0 ? folder.slice(0, dot) : folder;
}

/** yt-dlp's configuration file: the proxy with the job's credentials, and its cookies, never on a command line. */
export function configFilePath(attempt: string): string {
  return path.join(attempt, 'yt-dlp.conf');
}

/** The job's copy of the operator's cookies, where the configuration file names it. */
export function cookiesPath(attempt: string): string {
  return path.join(attempt, COOKIES_FILE_NAME);
}

/** An empty folder as yt-dlp's ffmpeg: it must download by itself, over HTTP(S), or not at all. */
export function noFfmpegFolder(attempt: string): string {
  return path.join(attempt, 'no-ffmpeg');
}

/** The FIFO yt-dlp's gate command makes in its cwd, the attempt's folder. */
export function gateFifoPath(attempt: string): string {
  return path.join(attempt, GATE_FIFO);
}

/** The download's output folder: the file being downloaded is its only `source.<ext>`. */
export function downloadFolder(attempt: string): string {
  return path.join(attempt, 'download');
}

/** The download's file while it grows: `source.<ext>` (fragments, `source.<ext>-Frag1`, do not match). */
const DOWNLOAD_FILE = new RegExp(`^${DOWNLOAD_BASENAME}\\.[A-Za-z0-9]+$`);

/** Whether a name in the download folder is the download's file. */
export function isDownloadFile(name: string): boolean {
  return DOWNLOAD_FILE.test(name);
}

/** The FIFO the converter reads the download from, in an attempt's folder or a waiting converter's. */
export function feedFifoPath(folder: string): string {
  return path.join(folder, 'feed');
}

/** A new name for a conversion's WAV, in `folder`. */
export function newWavPath(folder: string): string {
  return path.join(folder, `${randomUUID()}.wav`);
}

/** Where a conversion writes its input's tags: beside its WAV. */
export function tagsPathOf(wavPath: string): string {
  return `${wavPath.replace(/\.wav$/, '')}.tags`;
}

const CONVERTER_PREFIX = 'converter.';

/** A new folder for a converter started before its job, by this node. */
export function waitingConverterFolder(workDir: string, nodeId: string): string {
  return path.join(workDir, `${CONVERTER_PREFIX}${nodeId}.${randomBytes(6).toString('hex')}`);
}

/** The node whose waiting converter a folder of the work folder is, or undefined when it is not one. */
export function waitingConverterNode(folder: string): string | undefined {
  if (!folder.startsWith(CONVERTER_PREFIX)) return undefined;
  const rest = folder.slice(CONVERTER_PREFIX.length);
  const dot = rest.lastIndexOf('.');
  return dot > 0 ? rest.slice(0, dot) : undefined;
}
