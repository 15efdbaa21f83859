import fs from 'node:fs/promises';
import type { JobRow } from '../../db/database.js';
import type { GuardSession, SessionOptions } from '../../egress/guard.js';
import { jobError, type JobError } from '../../job-errors.js';
import type { Logger } from '../../logger.js';
import { exceededLimit, type ExceededLimit } from '../../sandbox/limits.js';
import { REFUSED_CONNECT, type Sandbox, type SandboxedResult, type ToolNetwork } from '../../sandbox/sandbox.js';
import type { ContentStore } from '../../store/content-store.js';
import { configFileText, netscapeCookiesProblem, type YtDlpNetworkOptions } from '../../tools/ytdlp-args.js';
import type { JobContext } from '../worker-pool.js';
import {
  JobFailure,
  STORAGE_FULL,
  toolRunLimits,
  type AudioAnalysis,
  type FetchContext,
  type FetchLimits,
  type StartedRun,
  type ToolName,
  type ToolRun,
} from './step.js';
import { explainByUpstream } from './upstream-failure.js';
import { attemptFolder, configFilePath, cookiesPath, noFfmpegFolder } from './work-folder.js';

/**
 * One attempt of a fetch job (./task.ts runs its steps): its folder under the work dir, its session
 * of the egress guard, its time limit, and the FetchContext its steps share, whose tool runs are
 * confined and checked here. At its end its folder and session are closed (closeAttempt), and a
 * failure is explained by what the guard and the sandbox saw (explainFailure).
 */
export interface AttemptDeps {
  store: Pick<ContentStore, 'root'>;
  /** Runs the tools, confined to the egress guard (or not, when the operator turned that off). */
  sandbox: Pick<Sandbox, 'mode' | 'guardAuthority' | 'run'>;
  /** Whether each tool run sees a root of its own (TOOL_MOUNT_VIEW); 'netns' mode only. */
  mountView: boolean;
  tools: { ytdlp: string; ffmpeg: string };
  workDir: string;
  limits: FetchLimits;
  /** Every connection the downloader makes goes through this guard, when present. */
  openEgressSession?: (label: string, options?: SessionOptions) => GuardSession;
  /** LOUDNESS and WAVEFORM_PEAKS: loudness measured in the conversion, peaks stored with the WAV. Default both. */
  audioAnalysis?: AudioAnalysis;
  /** YTDLP_COOKIES_FILE: each job gets a copy of it. Its path and content reach no log, error or job record. */
  cookiesFile?: string;
}

/** What a run of the tools for a job needs besides the job itself: a fetch's attempt, or a collection's listing (../collection/list-entries.ts). */
export interface ToolAttempt {
  log: Logger;
  /** The attempt's own folder (./work-folder.ts). */
  workDir: string;
  /** Aborted on cancel, lease loss or shutdown (the job's signal), not by the time limit. */
  jobSignal: AbortSignal;
  /** Aborted once the job's time limit (FETCH_TIMEOUT_S) has passed. */
  deadline: AbortSignal;
  egress: GuardSession | undefined;
  /** The proxy with the job's credentials, when there is a guard. */
  proxyUrl: string | undefined;
  /** A confined tool's first attempt to connect around the guard, as it reported it. */
  directAttempt: string | null;
  /** Removed with the attempt's folder: the folder of the converter started before the job, once this job took it. */
  otherFolders: string[];
}

export interface FetchAttempt extends ToolAttempt {
  job: JobRow;
  ctx: FetchContext;
}

const COOKIES_UNUSABLE: JobError = jobError('internal_error', {
  detail: "The downloader's cookies file (YTDLP_COOKIES_FILE) could not be used.",
});

/** Opens the attempt's guard session and starts its time limit; its folder is made by prepareFolder. */
export function openAttempt(deps: AttemptDeps, job: JobRow, jobCtx: JobContext): FetchAttempt {
  const egress = deps.openEgressSession?.(job.id);
  const deadline = AbortSignal.timeout(deps.limits.timeoutMs);
  const attempt: ToolAttempt & { job: JobRow } = {
    job,
    log: jobCtx.log,
    workDir: attemptFolder(deps.workDir, job),
    jobSignal: jobCtx.signal,
    deadline,
    egress,
    proxyUrl: egress?.proxyUrlAt(deps.sandbox.guardAuthority),
    directAttempt: null,
    otherFolders: [],
  };
  const signal = AbortSignal.any([jobCtx.signal, deadline]);
  return Object.assign(attempt, { ctx: fetchContext(deps, attempt, jobCtx.owner, signal) });
}

function fetchContext(
  deps: AttemptDeps,
  attempt: ToolAttempt & { job: JobRow },
  owner: string,
  signal: AbortSignal,
): FetchContext {
  const { job, log, workDir, egress } = attempt;
  const withStop = (stop: AbortSignal | undefined) => (stop ? AbortSignal.any([signal, stop]) : signal);
  return {
    job,
    owner,
    log,
    signal,
    workDir,
    hide: hiddenInMessages(deps, attempt),
    ytdlpOptions: ytdlpOptions(deps, attempt),
    hostsContacted: () => egress?.hostsContacted() ?? [],
    limits: deps.limits,
    audioAnalysis: deps.audioAnalysis ?? { loudness: true, peaks: true },
    runTool: (name, args, run) => runTool(deps, attempt, signal, name, args, run),
    async adoptConversion(started: StartedRun, { maxFileBytes, stop }) {
      const stops = withStop(stop);
      const stopIt = () => started.stop();
      if (stops.aborted) stopIt();
      stops.addEventListener('abort', stopIt, { once: true });
      try {
        return checkedRun(deps, attempt, { name: 'ffmpeg', maxFileBytes, stop, signal }, await started.run);
      } finally {
        stops.removeEventListener('abort', stopIt);
      }
    },
  };
}

/** FetchContext.ytdlpOptions: the attempt's empty ffmpeg folder, and its configuration file when prepareFolder writes one. */
export function ytdlpOptions(
  deps: AttemptDeps,
  attempt: Pick<ToolAttempt, 'workDir' | 'proxyUrl'>,
): YtDlpNetworkOptions {
  return {
    noFfmpegDir: noFfmpegFolder(attempt.workDir),
    ...(attempt.proxyUrl || deps.cookiesFile ? { configFile: configFilePath(attempt.workDir) } : {}),
  };
}

/** Secrets and server paths that must not reach a job's error message (FetchContext.hide). */
export function hiddenInMessages(deps: AttemptDeps, attempt: Pick<ToolAttempt, 'workDir' | 'proxyUrl'>): string[] {
  return [
    attempt.workDir,
    deps.workDir,
    deps.store.root,
    ...(attempt.proxyUrl ? [attempt.proxyUrl] : []),
    ...(deps.cookiesFile ? [deps.cookiesFile] : []),
  ];
}

/**
 * FetchContext.runTool: a tool run in the sandbox, stopped by `signal` (the attempt's) or
 * `run.stop`, and its end checked.
 */
export async function runTool(
  deps: AttemptDeps,
  attempt: ToolAttempt,
  signal: AbortSignal,
  name: ToolName,
  args: string[],
  { maxFileBytes, stop, ...output }: ToolRun,
): Promise<SandboxedResult> {
  const stops = stop ? AbortSignal.any([signal, stop]) : signal;
  const result = await runConfined(deps, attempt, name, args, stops, maxFileBytes, output);
  return checkedRun(deps, attempt, { name, maxFileBytes, stop, signal }, result);
}

/** One tool run in the sandbox, in the attempt's folder, under the job's limits. */
function runConfined(
  deps: AttemptDeps,
  attempt: ToolAttempt,
  name: ToolName,
  args: string[],
  signal: AbortSignal,
  maxFileBytes: number,
  output: Pick<ToolRun, 'onStdoutLine' | 'stdoutCaptureBytes'>,
): Promise<SandboxedResult> {
  // Only the downloader talks to the network (through the guard); the conversion reads a file.
  const network: ToolNetwork = name === 'ytdlp' ? 'guard' : 'none';
  /** In a confined tool's output, an errno of a refused connect() can only be a way around the guard. */
  const noticeDirectAttempt = (line: string) => {
    const match = REFUSED_CONNECT.exec(line);
    if (match && attempt.directAttempt === null) attempt.directAttempt = match[0];
  };
  return deps.sandbox.run({
    command: deps.tools[name],
    args,
    cwd: attempt.workDir,
    signal,
    network,
    limits: toolRunLimits(deps.limits, maxFileBytes),
    // The job's folder is the only folder of the host's data a tool sees.
    mountView: deps.sandbox.mode === 'netns' && deps.mountView,
    ...output,
    onStderrLine: deps.sandbox.mode === 'netns' ? noticeDirectAttempt : undefined,
  });
}

/** A tool run's end, checked: JobFailure when the tool is missing, could not be confined, was stopped by `stop`, or ran into a ceiling. */
function checkedRun(
  deps: AttemptDeps,
  attempt: ToolAttempt,
  run: { name: ToolName; maxFileBytes: number; stop: AbortSignal | undefined; signal: AbortSignal },
  result: SandboxedResult,
): SandboxedResult {
  const { name, maxFileBytes, stop, signal } = run;
  if (result.confinementFailure !== null) {
    attempt.log.error({ reason: result.confinementFailure }, 'tool confinement failed');
    throw new JobFailure(jobError('confinement_unavailable'));
  }
  if (attempt.directAttempt !== null) throw new Error('a tool tried to connect around the egress guard');
  if (result.notFound) {
    throw new JobFailure(jobError(name === 'ytdlp' ? 'downloader_missing' : 'converter_missing'));
  }
  if (signal.aborted) throw new Error('aborted');
  if (stop?.aborted) throw new JobFailure(stop.reason as JobError);
  const exceeded = exceededLimit(result);
  if (exceeded !== null) {
    attempt.log.warn({ tool: name, limit: exceeded }, 'a tool run reached its ceiling');
    throw new JobFailure(limitFailure(name, exceeded, deps.limits, maxFileBytes));
  }
  return result;
}

/**
 * Makes the attempt's folder afresh, with yt-dlp's configuration and the job's copy of the
 * cookies. Only the service's user may look inside: the job's credentials and cookies are in there.
 */
export async function prepareFolder(deps: AttemptDeps, attempt: ToolAttempt): Promise<void> {
  const { workDir, proxyUrl } = attempt;
  await fs.rm(workDir, { recursive: true, force: true });
  await fs.mkdir(deps.workDir, { recursive: true });
  await fs.mkdir(workDir, { mode: 0o700 });
  await fs.mkdir(noFfmpegFolder(workDir));
  if (deps.cookiesFile) await copyCookies(attempt.log, deps.cookiesFile, cookiesPath(workDir));
  if (proxyUrl || deps.cookiesFile) {
    await fs.writeFile(configFilePath(workDir), configFileText({ proxyUrl, cookies: deps.cookiesFile !== undefined }), {
      mode: 0o600,
      flag: 'wx',
    });
  }
}

/** The operator's cookies, checked (yt-dlp would echo a line it cannot read), into the job's folder. */
async function copyCookies(log: Logger, from: string, to: string): Promise<void> {
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

/** The attempt's folders and guard session end before its end is recorded, done or failed: a job that has ended leaves nothing behind. */
export async function closeAttempt(attempt: ToolAttempt): Promise<void> {
  attempt.egress?.close();
  await removeFolder(attempt, attempt.workDir);
  for (const folder of attempt.otherFolders) await removeFolder(attempt, folder);
}

/** Retried (an entry that appears while it is emptied fails its removal); a folder that stays is logged, and start-up recovery removes it. */
async function removeFolder(attempt: ToolAttempt, folder: string): Promise<void> {
  await fs
    .rm(folder, { recursive: true, force: true, maxRetries: 3 })
    .catch((err: unknown) => attempt.log.warn({ err }, "the job's work folder could not be removed"));
}

/** What a step (of a fetch, or a listing) threw, as the job's error: a JobFailure's own, storage full, or internal_error. */
export function thrownError(attempt: ToolAttempt, err: unknown): JobError {
  if (err instanceof JobFailure) return err.error;
  const errno = (err as NodeJS.ErrnoException).code;
  if (errno === 'ENOSPC' || errno === 'EDQUOT') return STORAGE_FULL;
  // An abort, a time-out or a refusal stopped the tools; explainFailure reports what it was.
  const explained =
    attempt.jobSignal.aborted ||
    attempt.deadline.aborted ||
    attempt.directAttempt !== null ||
    (attempt.egress?.refusals().length ?? 0) > 0;
  if (!explained) attempt.log.error({ err }, "unexpected error in a job's tool run or its folder");
  return jobError('internal_error');
}

/**
 * A refusal by the guard or the sandbox explains a failure better than the tool's own words,
 * and so does what the guard saw of the connections it could not make (./upstream-failure.ts).
 * Called once the guard session is closed: every connection of the job has ended.
 */
export function explainFailure(deps: AttemptDeps, attempt: ToolAttempt, error: JobError): JobError {
  const { egress, directAttempt } = attempt;
  const refusal = egress?.refusals()[0];
  if (refusal) return jobError('destination_refused', { detail: refusal.message });
  const stopped: JobError =
    directAttempt !== null
      ? jobError('direct_connection_refused', {
          detail: `The sandbox refused a connection the downloader tried to make around the egress guard (${directAttempt}).`,
        })
      : attempt.deadline.aborted
        ? jobError('fetch_timeout', { values: { limit: deps.limits.timeoutMs / 1000 } })
        : error;
  return explainByUpstream(stopped, egress?.upstreamFailures() ?? []);
}

const TOOL_WORDS: Record<ToolName, string> = { ytdlp: 'The downloader', ffmpeg: 'The converter' };
const MIB = 1024 * 1024;

/** The job's error for a tool run that reached one of the ceilings the sandbox set. */
function limitFailure(tool: ToolName, exceeded: ExceededLimit, limits: FetchLimits, maxFileBytes: number): JobError {
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
