import type { RunProcessResult } from '../tools/process.js';

/**
 * Resource ceilings of one tool run, set by the sandbox before the tool starts (confine.py's
 * apply_limits, or prlimit when confinement is off), so that they hold for every extractor,
 * decoder and code path of the tool, present or future, and whatever the media makes it do.
 */
export interface ToolLimits {
  /** Data segment: heap and private writable mappings, where an inflating response or a huge allocation grows. */
  dataBytes: number;
  /** CPU seconds: SIGXCPU at the limit, SIGKILL CPU_KILL_AFTER_S later. */
  cpuSeconds: number;
  /** Largest file the tool may write: SIGXFSZ, or EFBIG where the tool ignores the signal (Python). */
  fileBytes: number;
  /** Processes and threads of the run's user in its own user namespace; not enforced for a real root. */
  processes: number;
}

export type ExceededLimit = 'memory' | 'cpu' | 'file_size' | 'processes';

/** As confine.py's CPU_KILL_AFTER_S. */
const CPU_KILL_AFTER_S = 2;
const SIGXCPU_STATUS = 128 + 24;
const SIGXFSZ_STATUS = 128 + 25;

/** The argument of confine.py's --limits. */
export function confineLimitsArgument(limits: ToolLimits): string {
  return `data=${limits.dataBytes},cpu=${limits.cpuSeconds},fsize=${limits.fileBytes},nproc=${limits.processes}`;
}

/** The request member of resident.py. */
export function residentLimits(limits: ToolLimits): Record<string, number> {
  return { data: limits.dataBytes, cpu: limits.cpuSeconds, fsize: limits.fileBytes, nproc: limits.processes };
}

/** util-linux prlimit's options, for tools run without confinement; it execs the tool in its place. */
export function prlimitArgs(limits: ToolLimits): string[] {
  return [
    `--data=${limits.dataBytes}`,
    `--cpu=${limits.cpuSeconds}:${limits.cpuSeconds + CPU_KILL_AFTER_S}`,
    `--fsize=${limits.fileBytes}`,
    `--nproc=${limits.processes}`,
    '--core=0',
    '--',
  ];
}

/** prlimit's own words when it cannot start the tool. */
export const PRLIMIT_NOT_FOUND = /^prlimit: failed to execute /m;

/**
 * What an allocation refused under the data limit looks like: Python (as yt-dlp reports it too:
 * zlib's words, without the exception's name), ffmpeg (ENOMEM), C++ and glibc.
 */
const OUT_OF_MEMORY =
  /\bMemoryError\b|Unable to allocate output buffer|Cannot allocate memory|std::bad_alloc|\bout of memory\b/i;
/** confine.py's MEMORY_EXHAUSTED: yt-dlp in the resident sandbox's interpreter ended by a MemoryError. */
export const MEMORY_EXHAUSTED_STATUS = 123;
/** Python's abort() after a fatal error: the signal, or confine.py's 128 + signal. */
const SIGABRT_STATUS = 128 + 6;
/**
 * The fatal errors of Python 3.11 (Debian 12's) that a run at its data ceiling dies of instead of a
 * MemoryError, written by the interpreter itself before it aborts: a recursion through the
 * handling of MemoryErrors, or none left to raise.
 */
const PYTHON_FATAL_OUT_OF_MEMORY =
  /^Fatal Python error: (?:\w+: )?(?:Cannot recover from stack overflow|Cannot recover from MemoryErrors while normalizing exceptions|Out of memory)/m;
/** A write refused under the file size limit where SIGXFSZ is ignored (Python: EFBIG). */
const FILE_TOO_LARGE = /File too large|\[Errno 27\]/;
/** fork() or a new thread refused under the process limit: EAGAIN in C, Python's own words for threads. */
const NO_MORE_PROCESSES = /Resource temporarily unavailable|can't start new thread|\[Errno 11\]/;

/**
 * Which ceiling ended a run, from how it ended: a signal (or confine.py's 128 + signal) for CPU and
 * file size, the sandbox's status for a MemoryError, the tool's report of a refused allocation,
 * write or fork otherwise. Python's fatal errors count as memory only with the abort that ends
 * them, which no words a tool passes on from an origin can make. Null for a run that ended for any
 * other reason.
 */
export function exceededLimit(
  result: Pick<RunProcessResult, 'exitCode' | 'signal' | 'stderrTail'>,
): ExceededLimit | null {
  if (result.signal === 'SIGXCPU' || result.exitCode === SIGXCPU_STATUS) return 'cpu';
  if (result.signal === 'SIGXFSZ' || result.exitCode === SIGXFSZ_STATUS) return 'file_size';
  if (result.exitCode === MEMORY_EXHAUSTED_STATUS) return 'memory';
  const aborted = result.signal === 'SIGABRT' || result.exitCode === SIGABRT_STATUS;
  if (aborted && PYTHON_FATAL_OUT_OF_MEMORY.test(result.stderrTail)) return 'memory';
  // ffmpeg reports a refused allocation while decoding and may still exit 0.
  if (OUT_OF_MEMORY.test(result.stderrTail)) return 'memory';
  if (result.exitCode === 0) return null;
  if (FILE_TOO_LARGE.test(result.stderrTail)) return 'file_size';
  if (NO_MORE_PROCESSES.test(result.stderrTail)) return 'processes';
  return null;
}
