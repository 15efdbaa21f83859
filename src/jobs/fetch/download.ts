import { constants as fsConstants } from 'node:fs';
import fs, { type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { jobError, type JobError } from '../../job-errors.js';
import { buildDownloadArgs, GATE_LINE, GUARDED_FORMAT, INFO_PREFIX } from '../../tools/ytdlp-args.js';
import { describeYtDlpFailure } from '../../tools/ytdlp-failure.js';
import { parseProgressLine } from '../../tools/ytdlp-output.js';
import { toolOutputForLog } from '../../tools/tool-message.js';
import type { SandboxedResult } from '../../sandbox/sandbox.js';
import { JobFailure, step, type FetchContext, type Outcome } from './step.js';
import { downloadFolder, gateFifoPath } from './work-folder.js';

/**
 * Step 1 (of ./task.ts), download: one yt-dlp run through the egress guard that extracts the
 * media's metadata, then waits at a gate (see src/tools/ytdlp-args.ts) while the service decides
 * from that metadata, then downloads the best audio, with the byte limit enforced while it
 * downloads and a download that stalls (an origin that trickles, or sends nothing) stopped early.
 * The metadata has its own time limit (METADATA_TIMEOUT_S); the stall watch starts once the gate
 * opens.
 */
export interface Downloaded {
  path: string;
  bytes: number;
}

export interface DownloadDeps {
  /** Called with the bytes so far at most every PROGRESS_INTERVAL_MS, and once at the end. */
  onProgress: (bytes: number, totalBytes: number | null) => void;
  /** Refusals of the egress guard so far, for this job. */
  refusals: () => unknown[];
  /**
   * Called once, with the info JSON's text, as soon as the run has printed it and before any
   * media is downloaded: true lets the download go on; false stops the run (the caller has what it
   * decided instead); a JobFailure it throws fails the step with its error, and stops the run.
   */
  decide: (infoText: string) => Promise<boolean>;
  /** Called on every progress line once the gate is open: the file in the download folder (./work-folder.ts) may have grown. */
  onGrowing?: () => void;
  /** Aborted with a JobError as its reason (the conversion reading the download failed): the run is stopped and the step fails with it. */
  stop?: AbortSignal;
}

/** Where the run's time went, for the 'fetch steps' line. */
export interface DownloadTimings {
  /** yt-dlp started → its info JSON read (the extraction). */
  extractMs?: number;
  /** The gate reached → opened: how long yt-dlp waited on the service's decision. */
  gateWaitMs?: number;
  /** The gate opened → the first progress line: yt-dlp's request through the guard, up to the media's first bytes. */
  requestMs?: number;
  /** The downloaded file's path printed → the run's end: yt-dlp's exit, and its sandbox's. */
  exitMs?: number;
}

/** The run's reason for stopping once the decision said not to download: never a job's error. */
const DECIDED: JobError = jobError('internal_error', { detail: 'The download was not needed.' });

const PROGRESS_INTERVAL_MS = 500;
const FILE_SIZE_SLACK_BYTES = 1024 * 1024;
/** How many times per stall window the bytes so far are sampled. */
const STALL_SAMPLES_PER_WINDOW = 5;

/**
 * Aborts its signal, with download_stalled as the reason, once the bytes reported through
 * `progress` grew by fewer than `minBytes` (at least one) over the last `windowMs`.
 */
export function watchForStall({ windowMs, minBytes }: { windowMs: number; minBytes: number }) {
  const stalled = new AbortController();
  let bytes = 0;
  const samples: Array<{ at: number; bytes: number }> = [{ at: performance.now(), bytes: 0 }];
  const timer = setInterval(() => {
    const now = performance.now();
    while (samples.length > 1 && now - samples[1]!.at >= windowMs) samples.shift();
    const oldest = samples[0]!;
    if (now - oldest.at >= windowMs && bytes - oldest.bytes < Math.max(1, minBytes)) {
      clearInterval(timer);
      stalled.abort(
        jobError('download_stalled', { values: { bytes: Math.max(1, minBytes), seconds: windowMs / 1000 } }),
      );
    }
    samples.push({ at: now, bytes });
  }, windowMs / STALL_SAMPLES_PER_WINDOW);
  return {
    signal: stalled.signal,
    progress(downloadedBytes: number) {
      bytes = Math.max(bytes, downloadedBytes);
    },
    stop: () => clearInterval(timer),
  };
}

/**
 * Opens the gate: writes a line into the FIFO yt-dlp's gate command reads. The handle stays open
 * until the run ends, so the line waits in the FIFO whenever the command opens it. The run could
 * have put anything at that path: no symbolic link is followed and nothing but a FIFO is written.
 */
async function openGate(file: string): Promise<FileHandle> {
  const handle = await fs.open(file, fsConstants.O_RDWR | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
  try {
    if (!(await handle.stat()).isFIFO()) throw new Error('the gate is not a FIFO');
    await handle.write('go\n');
    return handle;
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/**
 * Downloads the media; null when `deps.decide` said not to (nothing was downloaded). `timings` is
 * filled as the run goes, whatever its end.
 */
export function downloadMedia(
  ctx: FetchContext,
  deps: DownloadDeps,
  timings: DownloadTimings = {},
): Promise<Outcome<Downloaded | null>> {
  return step(async () => {
    const downloadDir = downloadFolder(ctx.workDir);
    await fs.mkdir(downloadDir);
    const maxBytes = ctx.limits.maxDownloadBytes;
    const run = beginRun(ctx, deps, timings);
    let result: SandboxedResult;
    try {
      result = await ctx.runTool(
        'ytdlp',
        buildDownloadArgs({
          url: ctx.job.url,
          outputDir: downloadDir,
          ...ctx.ytdlpOptions,
          maxBytes,
          // Only formats fetched over HTTP(S) by yt-dlp itself, through the guard.
          format: GUARDED_FORMAT,
        }),
        {
          // Room for the last chunk past the byte limit: the progress check stops it first.
          maxFileBytes: maxBytes + FILE_SIZE_SLACK_BYTES,
          stop: run.stopRun.signal,
          onStdoutLine: (line) => onStdoutLine(run, line),
        },
      );
    } catch (err) {
      // What the service decided explains a stopped run better than the stop itself.
      if (run.decision !== undefined && (!(err instanceof JobFailure) || err.error === DECIDED)) {
        if (!(await run.decision)) return null;
      }
      throw err;
    } finally {
      await endRun(run);
    }
    return await checkedEnd(run, result, downloadDir);
  });
}

/** The run's state as its output comes, from its start to its end. */
interface Run {
  ctx: FetchContext;
  deps: DownloadDeps;
  timings: DownloadTimings;
  started: number;
  stopRun: AbortController;
  stopFromOutside: () => void;
  metadataTimer: NodeJS.Timeout;
  /** The decision on the info JSON, once it was printed. */
  decision?: Promise<boolean>;
  /** The decision said to download. */
  go: boolean;
  gateReachedAt?: number;
  gateOpenedAt?: number;
  pathPrintedAt?: number;
  gate?: Promise<FileHandle>;
  stall?: ReturnType<typeof watchForStall>;
  downloadedPath?: string;
  lastProgress: number;
}

/** Starts the watch on the run: the stop from outside, and the metadata's time limit. */
function beginRun(ctx: FetchContext, deps: DownloadDeps, timings: DownloadTimings): Run {
  const run: Run = {
    ctx,
    deps,
    timings,
    started: performance.now(),
    stopRun: new AbortController(),
    stopFromOutside: () => stop(run, deps.stop!.reason as JobError),
    metadataTimer: setTimeout(
      () => stop(run, jobError('metadata_timeout', { values: { limit: ctx.limits.metadataTimeoutMs / 1000 } })),
      ctx.limits.metadataTimeoutMs,
    ),
    go: false,
    lastProgress: 0,
  };
  if (deps.stop?.aborted) run.stopFromOutside();
  deps.stop?.addEventListener('abort', run.stopFromOutside, { once: true });
  return run;
}

function stop(run: Run, reason: JobError): void {
  if (!run.stopRun.signal.aborted) run.stopRun.abort(reason);
}

function onStdoutLine(run: Run, line: string): void {
  if (line.startsWith(INFO_PREFIX)) {
    // Each item of a playlist prints its own; the first decides (and refuses a playlist).
    if (run.decision === undefined) onInfo(run, line.slice(INFO_PREFIX.length));
    return;
  }
  if (line === GATE_LINE) {
    run.gateReachedAt ??= performance.now();
    openGateWhenReady(run);
    return;
  }
  const progress = parseProgressLine(line);
  if (progress) onProgress(run, progress);
  else if (path.isAbsolute(line.trim())) {
    run.downloadedPath = line.trim();
    run.pathPrintedAt = performance.now();
  }
}

function onInfo(run: Run, infoText: string): void {
  clearTimeout(run.metadataTimer);
  run.timings.extractMs = Math.round(performance.now() - run.started);
  const decision = run.deps.decide(infoText);
  run.decision = decision;
  decision.then(
    (download) => {
      if (!download) return stop(run, DECIDED);
      run.go = true;
      openGateWhenReady(run);
    },
    () => stop(run, DECIDED),
  );
}

/** Once the decision said to download and yt-dlp waits at its gate: the gate opened, the stall watch started. */
function openGateWhenReady(run: Run): void {
  if (!run.go || run.gateReachedAt === undefined || run.gate) return;
  const { ctx } = run;
  run.gateOpenedAt = performance.now();
  run.timings.gateWaitMs = Math.round(run.gateOpenedAt - run.gateReachedAt);
  const stall = watchForStall(ctx.limits.downloadStall);
  run.stall = stall;
  stall.signal.addEventListener('abort', () => stop(run, stall.signal.reason as JobError), { once: true });
  run.gate = openGate(gateFifoPath(ctx.workDir));
  run.gate.catch((err: unknown) => {
    ctx.log.error({ err }, 'opening the download gate failed');
    stop(run, jobError('internal_error'));
  });
}

function onProgress(run: Run, progress: { downloadedBytes: number; totalBytes: number | null }): void {
  const maxBytes = run.ctx.limits.maxDownloadBytes;
  // Nothing is downloaded before the gate opens: a run that does anyway is stopped.
  if (run.gate === undefined) throw new Error('the downloader started downloading before the gate opened');
  run.timings.requestMs ??= Math.round(performance.now() - run.gateOpenedAt!);
  run.stall?.progress(progress.downloadedBytes);
  // Enforced while downloading, whatever the origin announced (chunked responses have no
  // size for --max-filesize to check): throwing here kills yt-dlp's process group.
  if (progress.downloadedBytes > maxBytes) throw tooLarge(maxBytes);
  const now = Date.now();
  if (now - run.lastProgress >= PROGRESS_INTERVAL_MS) {
    run.lastProgress = now;
    run.deps.onProgress(progress.downloadedBytes, progress.totalBytes);
  }
  run.deps.onGrowing?.();
}

/** Whatever the run's end: its watches stopped, the gate closed. */
async function endRun(run: Run): Promise<void> {
  if (run.pathPrintedAt !== undefined) run.timings.exitMs = Math.round(performance.now() - run.pathPrintedAt);
  run.deps.stop?.removeEventListener('abort', run.stopFromOutside);
  clearTimeout(run.metadataTimer);
  run.stall?.stop();
  await run.gate?.then((handle) => handle.close()).catch(() => {});
}

/** A run that ended by itself, checked: the downloaded file, null when the decision said not to download. */
async function checkedEnd(run: Run, result: SandboxedResult, downloadDir: string): Promise<Downloaded | null> {
  const { ctx, deps, decision, downloadedPath } = run;
  const maxBytes = ctx.limits.maxDownloadBytes;
  if (decision === undefined) {
    if (result.exitCode !== 0) throw downloaderFailure(ctx, result);
    throw new JobFailure(jobError('not_media', { detail: 'The downloader exited without naming any media.' }));
  }
  // A refusal (the decision's JobFailure) comes first; so does media that is not to be downloaded.
  if (!(await decision)) return null;
  if (result.exitCode !== 0) throw downloaderFailure(ctx, result);
  // A destination refused on the way (a segment, a redirect) fails the job even when yt-dlp
  // carried on without it; the task reports the refusal itself.
  if (deps.refusals().length > 0) throw new Error('destination refused during download');
  if (!downloadedPath) {
    // yt-dlp's one silent way out (its HTTP downloader, read in 2023.03.04): an announced size
    // over --max-filesize, reported under --quiet by nothing but exit 0 and no file. Its other
    // failures raise, exit non-zero and say why on stderr.
    throw tooLarge(maxBytes);
  }
  const downloaded = await fs.stat(downloadedPath).catch(() => null);
  if (!downloaded?.isFile() || path.dirname(path.resolve(downloadedPath)) !== downloadDir) {
    throw new JobFailure(
      jobError('download_failed', { detail: 'The downloader reported success but produced no file.' }),
    );
  }
  if (downloaded.size > maxBytes) throw tooLarge(maxBytes);
  deps.onProgress(downloaded.size, downloaded.size);
  return { path: downloadedPath, bytes: downloaded.size };
}

function tooLarge(maxBytes: number): JobFailure {
  return new JobFailure(jobError('file_too_large', { values: { limit: maxBytes } }));
}

/** A yt-dlp run that exited non-zero: its words go to the job's log, and its job error says why in plain words. */
function downloaderFailure(ctx: FetchContext, run: SandboxedResult): JobFailure {
  const error = describeYtDlpFailure(run.stderrTail, {
    hide: ctx.hide,
    url: ctx.job.url,
    maxBytes: ctx.limits.maxDownloadBytes,
  });
  ctx.log.warn(
    { tool: 'ytdlp', exit_code: run.exitCode, output: toolOutputForLog(run.stderrTail, ctx.hide), code: error.code },
    'the downloader failed',
  );
  return new JobFailure(error);
}
