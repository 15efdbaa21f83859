import type { Logger } from '../../logger.js';
import type { JobRow } from '../../db/database.js';
import type { SandboxedResult } from '../../sandbox/sandbox.js';
import type { YtDlpNetworkOptions } from '../../tools/ytdlp.js';
import type { JobError } from '../queue.js';

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

export async function step<T>(body: () => Promise<T>): Promise<Outcome<T>> {
  try {
    return { ok: true, value: await body() };
  } catch (err) {
    if (err instanceof JobFailure) return { ok: false, error: err.error };
    throw err;
  }
}

export type ToolName = 'ytdlp' | 'ffmpeg';

export interface ToolOutput {
  onStdoutLine?: (line: string) => void;
  stdoutCaptureBytes?: number;
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
  /** Runs a tool in the sandbox; throws JobFailure when it is missing or cannot be confined. */
  runTool(name: ToolName, args: string[], output?: ToolOutput): Promise<SandboxedResult>;
  /** Secrets and server paths that must not reach a job's error message. */
  hide: string[];
  ytdlpOptions: YtDlpNetworkOptions;
  /** Host names the downloader reached through the egress guard so far. */
  hostsContacted(): string[];
  limits: { maxDownloadBytes: number; maxDurationS: number };
}

export const STORAGE_FULL: JobError = { code: 'storage_full', message: 'The service has no storage space left for this file.' };

export function durationExceeded(durationS: number, maxDurationS: number): JobFailure {
  return new JobFailure({
    code: 'duration_exceeded',
    message: `The media lasts ${Math.round(durationS)} s, more than the limit of ${maxDurationS} s.`,
  });
}
