import type { Database, JobRow } from '../../db/database.js';
import { jobError, type JobError } from '../../job-errors.js';
import type { ContentStore } from '../../store/content-store.js';
import type { KeyAllowance } from '../../store/key-allowance.js';
import type { MakeFifo } from '../../tools/fifo.js';
import { sourceMediaOf, storedMedia } from '../../tools/media-metadata.js';
import { namesMp4File } from '../../tools/streamable-container.js';
import { getJobRow, markFailed, type Ended } from '../queue.js';
import type { JobContext } from '../worker-pool.js';
import {
  closeAttempt,
  explainFailure,
  openAttempt,
  prepareFolder,
  thrownError,
  type AttemptDeps,
  type FetchAttempt,
} from './attempt.js';
import { commitContent } from './commit.js';
import { convertToWav, type Converted } from './convert.js';
import { convertWhileDownloading, type ConversionAlongside } from './convert-while-downloading.js';
import { downloadMedia, type Downloaded, type DownloadTimings } from './download.js';
import { resolveMedia, type MediaDecision } from './media-alias.js';
import { checkExtracted, type Extracted } from './media-info.js';
import { JobFailure, type FetchContext, type Outcome } from './step.js';
import { verifyAudio } from './verify.js';
import type { ConverterWaiting } from './waiting-converter.js';

/**
 * The fetch task: one job from URL to stored WAV. Its attempt's folder is prepared (./attempt.ts:
 * setup), then four steps the data goes down once:
 *   1. download (./download.ts): yt-dlp's extraction → the media's checks and media alias,
 *      decided at its gate → the download, converted alongside as it grows where it can be
 *      (./convert-while-downloading.ts)
 *   2. convert (./convert.ts): what is left of that conversion, or all of it
 *   3. verify (./verify.ts)
 *   4. commit (./commit.ts)
 * Each step returns its value or a typed failure; the first failure ends the job (failed, with
 * its code and message). The database is touched by the media alias (at the gate) and at the
 * commit (and for progress); everything else happens in the attempt's folder under the work dir,
 * removed at the end whatever happens.
 */
export interface FetchTaskDeps extends AttemptDeps {
  database: Database;
  store: ContentStore;
  now: () => number;
  /** Told about each stored content (the store's size cap hooks in here). */
  onStored?: (contentId: string, bytes: number) => void;
  /** What each API key may store (STORE_BYTES_PER_KEY_PER_DAY); absent: no bound per key. */
  keyAllowance?: KeyAllowance;
  onDownloaded?: (bytes: number) => void;
  /** Makes the FIFO through which the converter reads a download as it grows (../../tools/fifo.ts). */
  makeFifo: MakeFifo;
  /** CONVERTER_WAITING: an ffmpeg started before the job, taken by a job whose URL names no MP4-family file. */
  converterWaiting?: ConverterWaiting;
}

export function createFetchTask(deps: FetchTaskDeps) {
  return async function runFetchJob(job: JobRow, jobCtx: JobContext): Promise<Ended | undefined> {
    try {
      return await runAttempt(deps, job, jobCtx);
    } finally {
      // Once this job no longer needs the cores: the next one's converter.
      deps.converterWaiting?.replenish();
    }
  };
}

async function runAttempt(deps: FetchTaskDeps, job: JobRow, jobCtx: JobContext): Promise<Ended | undefined> {
  const attempt = openAttempt(deps, job, jobCtx);
  const times = stepTimes();
  let error: JobError;
  try {
    await times.timed('setup', () => prepareFolder(deps, attempt));
    const outcome = await runSteps(deps, attempt, times, jobCtx.reportProgress);
    if (outcome.ok) {
      await closeAttempt(attempt);
      times.log(attempt.log);
      return outcome.value;
    }
    error = outcome.error;
  } catch (err) {
    error = thrownError(attempt, err);
  }
  await closeAttempt(attempt);
  const failed = await fail(deps, attempt, error);
  // Once the job's end is recorded, as on success.
  times.log(attempt.log);
  return failed;
}

/** The four steps, in order; undefined when the job has nothing more to record here. */
async function runSteps(
  deps: FetchTaskDeps,
  attempt: FetchAttempt,
  times: StepTimes,
  reportProgress: JobContext['reportProgress'],
): Promise<Outcome<Ended | undefined>> {
  const { ctx } = attempt;
  // ffmpeg started before the download (or before the job), and fed it as it grows when its
  // container allows.
  const streamable = !namesMp4File(ctx.job.url);
  const waiting = streamable ? deps.converterWaiting?.take() : undefined;
  // The converter started before the job, once this job took it: its folder is this job's too.
  if (waiting) attempt.otherFolders.push(waiting.folder);
  const alongside = convertWhileDownloading(ctx, (input) => convertToWav(ctx, input), deps.makeFifo, waiting);
  if (streamable) alongside.start();
  try {
    const { downloaded, decided } = await download(deps, attempt, alongside, times, reportProgress);
    const converted = await times.timed('convert', () => convert(ctx, alongside, downloaded));
    Object.assign(times.duringDownload, alongside.report());
    if (!downloaded.ok) return downloaded;
    if (decided.media?.kind === 'reused') return { ok: true, value: decided.media.ended };
    // Following another job's download, or no longer ours: nothing more to do here.
    if (downloaded.value === null || decided.extracted === undefined || converted === null)
      return { ok: true, value: undefined };
    if (!converted.ok) return converted;
    return await verifyAndCommit(
      deps,
      attempt,
      times,
      { file: downloaded.value, extracted: decided.extracted },
      converted.value,
    );
  } finally {
    await alongside.close();
  }
}

/** What was decided at the download's gate: the media's checks passed, and its alias resolved. */
interface Decided {
  extracted?: Extracted;
  media?: MediaDecision;
}

/** Step 1, download: one yt-dlp run, its extraction, the decision at its gate, then the download. */
async function download(
  deps: FetchTaskDeps,
  attempt: FetchAttempt,
  alongside: ConversionAlongside,
  times: StepTimes,
  reportProgress: JobContext['reportProgress'],
): Promise<{ downloaded: Outcome<Downloaded | null>; decided: Decided }> {
  const { ctx } = attempt;
  const decided: Decided = {};
  const timings: DownloadTimings = {};
  const started = performance.now();
  const downloaded = await downloadMedia(
    ctx,
    {
      onProgress: (bytes, total) => reportProgress?.(bytes, total),
      refusals: () => attempt.egress?.refusals() ?? [],
      decide: (infoText) => decideAtGate(deps, ctx, infoText, decided, times),
      onGrowing: () => alongside.onGrowing(),
      stop: alongside.stopDownload,
    },
    timings,
  );
  times.noteDownload(Math.round(performance.now() - started), timings);
  return { downloaded, decided };
}

/** While yt-dlp waits at its gate: the media's checks, then its alias. True: download it. */
async function decideAtGate(
  deps: FetchTaskDeps,
  ctx: FetchContext,
  infoText: string,
  decided: Decided,
  times: StepTimes,
): Promise<boolean> {
  const started = performance.now();
  try {
    decided.extracted = await nestedAsSuch(deps, ctx.job, () =>
      checkExtracted(infoText, deps.limits, ctx.hostsContacted()),
    );
    const resolved = await resolveMedia(ctx, deps, decided.extracted);
    if (!resolved.ok) throw new JobFailure(resolved.error);
    decided.media = resolved.value;
    return decided.media.kind === 'download';
  } finally {
    times.duringDownload.media_checks_and_alias_ms = Math.round(performance.now() - started);
  }
}

/**
 * A collection's child that turns out to be a playlist itself (an entry that only linked to
 * another feed, so its listing could not tell): it fails collection_nested, not
 * playlist_not_supported, which would tell its client to submit each item alone. Its row is read
 * again when the claim did not show its parent: a child is linked to its parent just after it is
 * queued, and may be claimed in between.
 */
async function nestedAsSuch(deps: FetchTaskDeps, job: JobRow, check: () => Extracted): Promise<Extracted> {
  try {
    return check();
  } catch (err) {
    if (!(err instanceof JobFailure) || err.error.code !== 'playlist_not_supported') throw err;
    const parentId = job.parentId ?? (await getJobRow(deps.database, job.id))?.parentId;
    throw parentId ? new JobFailure(jobError('collection_nested')) : err;
  }
}

/**
 * Step 2, convert: what is left of a conversion that ran alongside the download, or all of it;
 * null when there is nothing to convert (the download failed, or was not this job's to make).
 */
async function convert(
  ctx: FetchContext,
  alongside: ConversionAlongside,
  downloaded: Outcome<Downloaded | null>,
): Promise<Outcome<Converted> | null> {
  const streamed = await alongside.finish(downloaded);
  if (streamed !== null || !downloaded.ok || downloaded.value === null) return streamed;
  return convertToWav(ctx, { file: downloaded.value.path });
}

/** Steps 3 and 4, verify and commit: the WAV checked, then stored and the job recorded done. */
async function verifyAndCommit(
  deps: FetchTaskDeps,
  attempt: FetchAttempt,
  times: StepTimes,
  { file, extracted }: { file: Downloaded; extracted: Extracted },
  converted: Converted,
): Promise<Outcome<Ended | undefined>> {
  const { ctx } = attempt;
  const audio = await times.timed('verify', () => verifyAudio(ctx, converted));
  if (!audio.ok) return audio;
  if (ctx.signal.aborted) throw new Error('aborted');
  deps.onDownloaded?.(file.bytes);
  // What the extraction said, with the file's own tags where they add to it.
  const source = {
    mediaKey: extracted.mediaKey,
    media: storedMedia(sourceMediaOf(extracted.info, audio.value.tags)),
  };
  const committed = await times.timed('commit', () =>
    commitContent(ctx, deps, audio.value, source, () => closeAttempt(attempt), times.commitPartMs),
  );
  if (committed.ok && committed.value) deps.onStored?.(committed.value.job.contentId!, file.bytes);
  return committed;
}

/** The job failed: recorded with the error that explains it best, unless the job is no longer this attempt's. */
async function fail(deps: FetchTaskDeps, attempt: FetchAttempt, error: JobError): Promise<Ended | undefined> {
  const { ctx, log } = attempt;
  const reported = explainFailure(deps, attempt, error);
  if (attempt.jobSignal.aborted) {
    log.info({ reason: attempt.jobSignal.reason }, 'job aborted');
    return undefined;
  }
  log.warn(
    { code: reported.code, message: reported.message, detail: reported.detail, http_status: reported.httpStatus },
    'job failed',
  );
  return markFailed(deps.database, ctx.job.id, ctx.owner, reported, deps.now());
}

type StepTimes = ReturnType<typeof stepTimes>;

/** Where a job's time goes, for its 'fetch steps' line. */
function stepTimes() {
  /** Each step's ms, one after the other: they add up to the task's time. */
  const stepMs: Record<string, number> = {};
  /** What happened within the download's ms (download_ms): the decision at the gate, the conversion alongside. */
  const duringDownload: Record<string, number | string> = {};
  /** The commit's parts, within its own ms (commit_ms). */
  const commitPartMs: Record<string, number> = {};
  return {
    duringDownload,
    commitPartMs,
    /** Runs a step and notes how long it took. */
    async timed<T>(name: string, body: () => Promise<T>): Promise<T> {
      const started = performance.now();
      try {
        return await body();
      } finally {
        stepMs[`${name}_ms`] = Math.round(performance.now() - started);
      }
    },
    /** The download's run in two parts, one after the other: its extraction, then the rest (gate and download). */
    noteDownload(runMs: number, timings: DownloadTimings) {
      stepMs.extract_ms = timings.extractMs ?? runMs;
      stepMs.download_ms = runMs - stepMs.extract_ms;
      if (timings.gateWaitMs !== undefined) duringDownload.gate_wait_ms = timings.gateWaitMs;
      if (timings.requestMs !== undefined) duringDownload.request_ms = timings.requestMs;
      if (timings.exitMs !== undefined) duringDownload.downloader_exit_ms = timings.exitMs;
    },
    log(log: FetchAttempt['log']) {
      log.debug({ ...stepMs, during_download: duringDownload, during_commit: commitPartMs }, 'fetch steps');
    },
  };
}
