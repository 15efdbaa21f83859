import type { Logger } from '../../logger.js';
import type { JobRow } from '../../db/database.js';
import { jobError, type JobError } from '../../job-errors.js';
import type { SandboxedResult } from '../../sandbox/sandbox.js';
import type { YtDlpNetworkOptions } from '../../tools/ytdlp-args.js';

/**
 * What the steps of a fetch share (./task.ts builds it per job), and how they end: each step
 * returns its value, or a typed failure (a JobError for the job record). Inside a step, helpers
 * throw JobFailure; `step()` turns it into the step's failure. Anything else thrown is a bug or
 * an I/O error, which the task maps itself (storage full, internal error).
 */
export class JobFailure extends Error {
  constructor(readonly error: JobError) {
    super(error.message);
  }
}

export type Outcome<T> = { ok: true; value: T } | { ok: false; error: JobError };

export async function step<T>(body: () => T | Promise<T>): Promise<Outcome<T>> {
  try {
    return { ok: true, value: await body() };
  } catch (err) {
    if (err instanceof JobFailure) return { ok: false, error: err.error };
    throw err;
  }
}

export type ToolName = 'ytdlp' | 'ffmpeg';

/** One tool run of a step. */
export interface ToolRun {
  /** The largest file the tool may write: the sandbox's file size ceiling for this run. */
  maxFileBytes: number;
  onStdoutLine?: (line: string) => void;
  stdoutCaptureBytes?: number;
  /** Aborted with a JobError as its reason: the run is stopped and the step fails with that error. */
  stop?: AbortSignal;
}

/**
 * A tool run started before the step that takes it (a converter started before the job:
 * ./waiting-converter.ts): its result, and how to stop it.
 */
export interface StartedRun {
  run: Promise<SandboxedResult>;
  stop(): void;
}

/** What a job may spend; FetchTaskDeps.limits, from the configuration. */
export interface FetchLimits {
  timeoutMs: number;
  /** The extraction's own time limit (until yt-dlp prints the info JSON), within timeoutMs. */
  metadataTimeoutMs: number;
  /** A download that gains fewer than minBytes over any windowMs is stopped. */
  downloadStall: { windowMs: number; minBytes: number };
  maxDownloadBytes: number;
  /** The largest WAV. */
  maxOutputBytes: number;
  maxDurationS: number;
  /** Every tool run's ceilings but the file size, which each run sets (ToolRun.maxFileBytes). */
  tool: { memoryBytes: number; cpuSeconds: number; processes: number };
}

export interface FetchContext {
  job: JobRow;
  /** This node, the job's lease holder. */
  owner: string;
  log: Logger;
  /** Aborted on cancel, lease loss, shutdown or the job's time limit. */
  signal: AbortSignal;
  /** The attempt's own folder, removed when the job ends. */
  workDir: string;
  /**
   * Runs a tool in the sandbox under the job's limits; throws JobFailure when it is missing, cannot
   * be confined, was stopped by `run.stop`, or ran into one of its ceilings.
   */
  runTool(name: ToolName, args: string[], run: ToolRun): Promise<SandboxedResult>;
  /**
   * The same for a conversion started before the job: the job's signal and `run.stop` stop it
   * from now on, and its end is checked as runTool checks a run's.
   */
  adoptConversion(started: StartedRun, run: Pick<ToolRun, 'maxFileBytes' | 'stop'>): Promise<SandboxedResult>;
  /** Secrets and server paths that must not reach a job's error message. */
  hide: string[];
  ytdlpOptions: YtDlpNetworkOptions;
  /** Host names the downloader reached through the egress guard so far. */
  hostsContacted(): string[];
  limits: FetchLimits;
  /** Whether the conversion measures the WAV's loudness, and the store's pass over it computes its waveform peaks. */
  audioAnalysis: AudioAnalysis;
}

/** LOUDNESS and WAVEFORM_PEAKS. */
export interface AudioAnalysis {
  loudness: boolean;
  peaks: boolean;
}

/** The sandbox's ceilings for one tool run: the job's limits, and the largest file it may write. */
export function toolRunLimits(limits: FetchLimits, fileBytes: number) {
  return {
    dataBytes: limits.tool.memoryBytes,
    cpuSeconds: limits.tool.cpuSeconds,
    processes: limits.tool.processes,
    fileBytes,
  };
}

/** A signal aborted after `ms` with `error` as its reason, for ToolRun.stop. */
export function abortAfter(ms: number, error: JobError): AbortSignal {
  const controller = new AbortController();
  setTimeout(() => controller.abort(error), ms).unref();
  return controller.signal;
}

export const STORAGE_FULL: JobError = jobError('storage_full');

export function durationExceeded(durationS: number, maxDurationS: number): JobFailure {
  return new JobFailure(
    jobError('duration_exceeded', {
      values: { limit: maxDurationS },
      detail: `The media lasts ${Math.round(durationS)} s.`,
    }),
  );
}
