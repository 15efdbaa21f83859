import fs from 'node:fs/promises';
import type { Database, JobRow } from '../../db/database.js';
import { jobError, type JobError } from '../../job-errors.js';
import { exceededLimit, type ExceededLimit } from '../../sandbox/limits.js';
import { REFUSED_CONNECT, type Sandbox, type SandboxedResult, type ToolNetwork } from '../../sandbox/sandbox.js';
import type { GuardSession } from '../../egress/guard.js';
import type { ContentStore } from '../../store/content-store.js';
import type { KeyAllowance } from '../../store/key-allowance.js';
import type { MakeFifo } from '../../tools/fifo.js';
import { sourceMediaOf, storedMedia } from '../../tools/media-metadata.js';
import { namesMp4File } from '../../tools/streamable-container.js';
import { configFileText, netscapeCookiesProblem } from '../../tools/ytdlp-args.js';
import { markFailed, recordProgress, type Ended } from '../queue.js';
import type { JobContext } from '../worker-pool.js';
import { commitContent } from './commit.js';
import { convertToWav } from './convert.js';
import { convertWhileDownloading } from './convert-while-downloading.js';
import { downloadMedia, type DownloadTimings } from './download.js';
import { explainByUpstream } from './upstream-failure.js';
import { resolveMedia, type MediaDecision } from './media-alias.js';
import { checkExtracted, type Extracted } from './media-info.js';
import {
  JobFailure,
  STORAGE_FULL,
  type AudioAnalysis,
  type FetchContext,
  type FetchLimits,
  type Outcome,
  type ToolName,
  toolRunLimits,
} from './step.js';
import { verifyAudio } from './verify.js';
import type { ConverterWaiting, WaitingConversion } from './waiting-converter.js';
import { attemptFolder, configFilePath, cookiesPath, noFfmpegFolder } from './work-folder.js';

/**
 * The fetch task: one job from URL to stored WAV, as a pipeline of steps the data goes down once:
 *   download (extraction → media checks and media alias, decided at the gate → download)
 *   → convert → verify → commit
 * Each step returns its value or a typed failure; the first failure ends the job (failed, with
 * its code and message). The database is touched by the media alias step and at the commit (and
 * for progress); everything else happens in a per-attempt folder under the work dir, removed at
 * the end whatever happens.
 */
/** A job's session of the egress guard (src/egress/guard.ts). */
export type EgressSession = GuardSession;

export interface FetchTaskDeps {
  database: Database;
  store: ContentStore;
  now: () => number;
  /** Runs the tools, confined to the egress guard (or not, when the operator turned that off). */
  sandbox: Pick<Sandbox, 'mode' | 'guardAuthority' | 'run'>;
  /** Whether each tool run sees a root of its own (TOOL_MOUNT_VIEW); 'netns' mode only. */
  mountView: boolean;
  tools: { ytdlp: string; ffmpeg: string };
  workDir: string;
  limits: FetchLimits;
  /** Every connection the downloader makes goes through this guard, when present. */
  openEgressSession?: (label: string) => EgressSession;
  /** Told about each stored content (the store's size cap hooks in here). */
  onStored?: (contentId: string, bytes: number) => void;
  /** What each API key may store (STORE_BYTES_PER_KEY_PER_DAY); absent: no bound per key. */
  keyAllowance?: KeyAllowance;
  onDownloaded?: (bytes: number) => void;
  /** LOUDNESS and WAVEFORM_PEAKS: loudness measured in the conversion, peaks stored with the WAV. Default both. */
  audioAnalysis?: AudioAnalysis;
  /** YTDLP_COOKIES_FILE: each job gets a copy of it. Its path and content reach no log, error or job record. */
  cookiesFile?: string;
  /** Makes the FIFO through which the converter reads a download as it grows (../../tools/fifo.ts). */
  makeFifo: MakeFifo;
  /** CONVERTER_WAITING: an ffmpeg started before the job, taken by a job whose URL names no MP4-family file. */
  converterWaiting?: ConverterWaiting;
}

const COOKIES_UNUSABLE: JobError = jobError('internal_error', {
  detail: "The downloader's cookies file (YTDLP_COOKIES_FILE) could not be used.",
});

export function createFetchTask(deps: FetchTaskDeps) {
  async function runAttempt(job: JobRow, jobCtx: JobContext): Promise<Ended | undefined> {
    // One folder per attempt: nothing of an interrupted attempt can mix with this one.
    const workDir = attemptFolder(deps.workDir, job);
    const egress = deps.openEgressSession?.(job.id);
    const deadline = AbortSignal.timeout(deps.limits.timeoutMs);
    const signal = AbortSignal.any([jobCtx.signal, deadline]);
    const proxyUrl = egress?.proxyUrlAt(deps.sandbox.guardAuthority);
    const configFile = configFilePath(workDir);
    const noFfmpegDir = noFfmpegFolder(workDir);
    /** A confined tool's first attempt to connect around the guard, as it reported it. */
    let directAttempt: string | null = null;
    const log = jobCtx.log;

    const ctx: FetchContext = {
      job,
      owner: jobCtx.owner,
      log,
      signal,
      workDir,
      hide: [
        workDir,
        deps.workDir,
        deps.store.root,
        ...(proxyUrl ? [proxyUrl] : []),
        ...(deps.cookiesFile ? [deps.cookiesFile] : []),
      ],
      ytdlpOptions: { noFfmpegDir, ...(proxyUrl || deps.cookiesFile ? { configFile } : {}) },
      hostsContacted: () => egress?.hostsContacted() ?? [],
      limits: deps.limits,
      audioAnalysis: deps.audioAnalysis ?? { loudness: true, peaks: true },
      async runTool(name, args, { maxFileBytes, stop, ...output }) {
        // Only the downloader talks to the network (through the guard); the conversion reads a file.
        const network: ToolNetwork = name === 'ytdlp' ? 'guard' : 'none';
        return checkedRun(
          name,
          maxFileBytes,
          stop,
          await deps.sandbox.run({
            command: deps.tools[name],
            args,
            cwd: workDir,
            signal: stop ? AbortSignal.any([signal, stop]) : signal,
            network,
            limits: toolRunLimits(deps.limits, maxFileBytes),
            // The job's folder is the only folder of the host's data a tool sees.
            mountView: deps.sandbox.mode === 'netns' && deps.mountView,
            ...output,
            onStderrLine: deps.sandbox.mode === 'netns' ? noticeDirectAttempt : undefined,
          }),
        );
      },
      async adoptConversion(waiting, { maxFileBytes, stop }) {
        const stops = stop ? AbortSignal.any([signal, stop]) : signal;
        const stopIt = () => waiting.stop();
        if (stops.aborted) stopIt();
        stops.addEventListener('abort', stopIt, { once: true });
        try {
          return checkedRun('ffmpeg', maxFileBytes, stop, await waiting.run);
        } finally {
          stops.removeEventListener('abort', stopIt);
        }
      },
    };

    /** A tool run's end, checked: JobFailure when the tool is missing, could not be confined, was stopped by `stop`, or ran into a ceiling. */
    function checkedRun(
      name: ToolName,
      maxFileBytes: number,
      stop: AbortSignal | undefined,
      result: SandboxedResult,
    ): SandboxedResult {
      if (result.confinementFailure !== null) {
        log.error({ reason: result.confinementFailure }, 'tool confinement failed');
        throw new JobFailure(jobError('confinement_unavailable'));
      }
      if (directAttempt !== null) throw new Error('a tool tried to connect around the egress guard');
      if (result.notFound) {
        throw new JobFailure(jobError(name === 'ytdlp' ? 'downloader_missing' : 'converter_missing'));
      }
      if (signal.aborted) throw new Error('aborted');
      if (stop?.aborted) throw new JobFailure(stop.reason as JobError);
      const exceeded = exceededLimit(result);
      if (exceeded !== null) {
        log.warn({ tool: name, limit: exceeded }, 'a tool run reached its ceiling');
        throw new JobFailure(limitFailure(name, exceeded, deps.limits, maxFileBytes));
      }
      return result;
    }

    /** In a confined tool's output, an errno of a refused connect() can only be a way around the guard. */
    function noticeDirectAttempt(line: string): void {
      const match = REFUSED_CONNECT.exec(line);
      if (match && directAttempt === null) directAttempt = match[0];
    }

    /** The converter started before the job, when this job took it: its folder is this job's too. */
    let waiting: WaitingConversion | undefined;
    /** The attempt's folder and guard session end before its end is recorded, done or failed: a job that has ended leaves nothing behind. */
    const cleanUp = async () => {
      egress?.close();
      await removeFolder(workDir);
      if (waiting) await removeFolder(waiting.folder);
    };
    /** Retried (an entry that appears while it is emptied fails its removal); a folder that stays is logged, and start-up recovery removes it. */
    const removeFolder = (folder: string) =>
      fs
        .rm(folder, { recursive: true, force: true, maxRetries: 3 })
        .catch((err: unknown) => log.warn({ err }, "the job's work folder could not be removed"));
    /** Each step's ms, one after the other: they add up to the task's time. */
    const stepMs: Record<string, number> = {};
    /** What happened within the download's ms (download_ms): the decision at the gate, the conversion alongside. */
    const duringDownload: Record<string, number | string> = {};
    /** The commit's parts, within its own ms (commit_ms). */
    const commitPartMs: Record<string, number> = {};
    let error: JobError;
    try {
      await timed('setup', async () => {
        await fs.rm(workDir, { recursive: true, force: true });
        // Only the service's user may look inside: the job's credentials and cookies are in there.
        await fs.mkdir(deps.workDir, { recursive: true });
        await fs.mkdir(workDir, { mode: 0o700 });
        await fs.mkdir(noFfmpegDir);
        if (deps.cookiesFile) await copyCookies(deps.cookiesFile, cookiesPath(workDir));
        if (proxyUrl || deps.cookiesFile) {
          await fs.writeFile(configFile, configFileText({ proxyUrl, cookies: deps.cookiesFile !== undefined }), {
            mode: 0o600,
            flag: 'wx',
          });
        }
      });
      const outcome = await pipeline();
      if (outcome.ok) {
        await cleanUp();
        log.debug({ ...stepMs, during_download: duringDownload, during_commit: commitPartMs }, 'fetch steps');
        return outcome.value;
      }
      error = outcome.error;
    } catch (err) {
      error = toJobError(err);
    }
    await cleanUp();
    const failed = await fail(error);
    // Once the job's end is recorded, as on success.
    log.debug({ ...stepMs, during_download: duringDownload, during_commit: commitPartMs }, 'fetch steps');
    return failed;

    async function pipeline(): Promise<Outcome<Ended | undefined>> {
      let extracted: Extracted | undefined;
      let media: MediaDecision | undefined;
      const timings: DownloadTimings = {};
      // ffmpeg started before the download (or before the job), and fed it as it grows when its
      // container allows.
      const streamable = !namesMp4File(job.url);
      waiting = streamable ? deps.converterWaiting?.take() : undefined;
      const alongside = convertWhileDownloading(ctx, (input) => convertToWav(ctx, input), deps.makeFifo, waiting);
      if (streamable) alongside.start();
      try {
        const downloadStarted = performance.now();
        const downloaded = await downloadMedia(
          ctx,
          {
            onProgress: (bytes, total) =>
              void recordProgress(deps.database, job.id, jobCtx.owner, bytes, total).catch((err: unknown) =>
                log.warn({ err }, 'recording progress failed'),
              ),
            refusals: () => egress?.refusals() ?? [],
            // While yt-dlp waits at its gate: the media's checks, then its alias.
            async decide(infoText) {
              const decided = performance.now();
              try {
                extracted = checkExtracted(infoText, deps.limits, ctx.hostsContacted());
                const resolved = await resolveMedia(ctx, deps, extracted);
                if (!resolved.ok) throw new JobFailure(resolved.error);
                media = resolved.value;
                return media.kind === 'download';
              } finally {
                duringDownload.media_checks_and_alias_ms = Math.round(performance.now() - decided);
              }
            },
            onGrowing: () => alongside.onGrowing(),
            stop: alongside.stopDownload,
          },
          timings,
        );
        // The run's two parts, one after the other: its extraction, then the rest (gate and download).
        const runMs = Math.round(performance.now() - downloadStarted);
        stepMs.extract_ms = timings.extractMs ?? runMs;
        stepMs.download_ms = runMs - stepMs.extract_ms;
        if (timings.gateWaitMs !== undefined) duringDownload.gate_wait_ms = timings.gateWaitMs;
        if (timings.requestMs !== undefined) duringDownload.request_ms = timings.requestMs;
        if (timings.exitMs !== undefined) duringDownload.downloader_exit_ms = timings.exitMs;
        // The conversion's part after the download: what is left of one that ran alongside, or all of it.
        const converted = await timed('convert', async () => {
          const streamed = await alongside.finish(downloaded);
          if (streamed !== null || !downloaded.ok || downloaded.value === null) return streamed;
          return convertToWav(ctx, { file: downloaded.value.path });
        });
        Object.assign(duringDownload, alongside.report());
        if (!downloaded.ok) return downloaded;
        if (media?.kind === 'reused') return { ok: true, value: media.ended };
        // Following another job's download, or no longer ours: nothing more to do here.
        if (downloaded.value === null || extracted === undefined || converted === null)
          return { ok: true, value: undefined };
        const file = downloaded.value;
        if (!converted.ok) return converted;
        const audio = await timed('verify', () => verifyAudio(ctx, converted.value));
        if (!audio.ok) return audio;
        if (signal.aborted) throw new Error('aborted');
        deps.onDownloaded?.(file.bytes);
        // What the extraction said, with the file's own tags where they add to it.
        const source = {
          mediaKey: extracted.mediaKey,
          media: storedMedia(sourceMediaOf(extracted.info, audio.value.tags)),
        };
        const committed = await timed('commit', () =>
          commitContent(ctx, deps, audio.value, source, cleanUp, commitPartMs),
        );
        if (committed.ok && committed.value) deps.onStored?.(committed.value.job.contentId!, file.bytes);
        return committed;
      } finally {
        await alongside.close();
      }
    }

    /** Runs a step and notes how long it took, for the 'fetch steps' line (where a job's time goes). */
    async function timed<T>(name: string, body: () => Promise<T>): Promise<T> {
      const started = performance.now();
      try {
        return await body();
      } finally {
        stepMs[`${name}_ms`] = Math.round(performance.now() - started);
      }
    }

    /** The operator's cookies, checked (yt-dlp would echo a line it cannot read), into the job's folder. */
    async function copyCookies(from: string, to: string): Promise<void> {
      let text: string;
      try {
        text = await fs.readFile(from, 'utf8');
      } catch (err) {
        log.error({ errno: (err as NodeJS.ErrnoException).code }, 'YTDLP_COOKIES_FILE cannot be read');
        throw new JobFailure(COOKIES_UNUSABLE);
      }
      const problem = netscapeCookiesProblem(text);
      if (problem !== null) {
        log.error({ problem }, 'YTDLP_COOKIES_FILE is not a Netscape cookies file');
        throw new JobFailure(COOKIES_UNUSABLE);
      }
      await fs.writeFile(to, text, { mode: 0o600, flag: 'wx' });
    }

    /**
     * A refusal by the guard or the sandbox explains a failure better than the tool's own words,
     * and so does what the guard saw of the connections it could not make (./upstream-failure.ts).
     * Called once the guard session is closed: every connection of the job has ended.
     */
    async function fail(error: JobError): Promise<Ended | undefined> {
      const refusal = egress?.refusals()[0];
      const stopped: JobError = refusal
        ? jobError('destination_refused', { detail: refusal.message })
        : directAttempt !== null
          ? jobError('direct_connection_refused', {
              detail: `The sandbox refused a connection the downloader tried to make around the egress guard (${directAttempt}).`,
            })
          : deadline.aborted
            ? jobError('fetch_timeout', { values: { limit: deps.limits.timeoutMs / 1000 } })
            : error;
      const reported = refusal ? stopped : explainByUpstream(stopped, egress?.upstreamFailures() ?? []);
      if (jobCtx.signal.aborted) {
        log.info({ reason: jobCtx.signal.reason }, 'job aborted');
        return undefined;
      }
      log.warn(
        { code: reported.code, message: reported.message, detail: reported.detail, http_status: reported.httpStatus },
        'job failed',
      );
      return markFailed(deps.database, job.id, jobCtx.owner, reported, deps.now());
    }

    function toJobError(err: unknown): JobError {
      if (err instanceof JobFailure) return err.error;
      const errno = (err as NodeJS.ErrnoException).code;
      if (errno === 'ENOSPC' || errno === 'EDQUOT') return STORAGE_FULL;
      // An abort, a time-out or a refusal stopped the tools; fail() reports what it was.
      const explained =
        jobCtx.signal.aborted || deadline.aborted || directAttempt !== null || (egress?.refusals().length ?? 0) > 0;
      if (!explained) log.error({ err }, 'unexpected error in fetch task');
      return jobError('internal_error');
    }
  }

  return async function runFetchJob(job: JobRow, jobCtx: JobContext): Promise<Ended | undefined> {
    try {
      return await runAttempt(job, jobCtx);
    } finally {
      // Once this job no longer needs the cores: the next one's converter.
      deps.converterWaiting?.replenish();
    }
  };
}

const TOOL_WORDS: Record<ToolName, string> = { ytdlp: 'The downloader', ffmpeg: 'The converter' };
const MIB = 1024 * 1024;

/** The job's error for a tool run that reached one of the ceilings the sandbox set. */
export function limitFailure(
  tool: ToolName,
  exceeded: ExceededLimit,
  limits: FetchLimits,
  maxFileBytes: number,
): JobError {
  const who = TOOL_WORDS[tool];
  switch (exceeded) {
    case 'memory':
      return jobError('memory_exceeded', {
        values: { tool: who, limit: Math.round(limits.tool.memoryBytes / MIB) },
      });
    case 'cpu':
      return jobError('cpu_time_exceeded', { values: { tool: who, limit: limits.tool.cpuSeconds } });
    case 'processes':
      return jobError('process_limit_exceeded', { values: { tool: who, limit: limits.tool.processes } });
    case 'file_size':
      return tool === 'ffmpeg'
        ? jobError('output_too_large', { values: { limit: maxFileBytes } })
        : jobError('file_too_large', { values: { limit: limits.maxDownloadBytes } });
  }
}
