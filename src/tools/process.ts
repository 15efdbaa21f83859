/**
 * Runs one external tool (yt-dlp, ffmpeg) as a child process and reports how it ended.
 *
 * - argv array, never a shell; stdin is closed ('ignore') so no tool can wait for input, unless
 *   `keepStdinOpen` asks for a lifeline pipe (a sandbox's, which gives the tool no stdin either).
 * - The child is spawned `detached`, which on POSIX makes it the leader of a new process group
 *   (and session). On abort or timeout the whole group gets SIGTERM, then SIGKILL after
 *   `killGraceMs`, so helpers a tool started (yt-dlp runs ffmpeg, say) die with it.
 * - When the leader exits, whatever is left in its group gets SIGKILL: a job's processes do not
 *   outlive the job, and no straggler keeps our pipes open (which would delay 'close' forever).
 * - The promise resolves only after the child exited and its stdio closed. Spawn failures come
 *   back as data (`notFound`, `spawnError`), never as an unhandled error. It rejects only when an
 *   `onStdoutLine`/`onStderrLine` callback throws: the group is killed first, then the callback's
 *   error is rethrown once the child is gone.
 *
 * - The child's environment is the few variables of the parent's (or `env`) that a tool needs,
 *   see `toolEnvironment`: no proxy setting and none of the service's secrets.
 *
 * Parent death is best effort: a detached group survives its parent, so on the service's
 * process 'exit' (normal exit, process.exit() after SIGTERM handling, uncaught exception) every
 * live group is sent SIGKILL. A SIGKILLed or OOM-killed service cannot do that; run it in a
 * container or a systemd unit with KillMode=control-group so the supervisor reaps its cgroup.
 */
import { spawn as nodeSpawn, type ChildProcess } from 'node:child_process';
import { StringDecoder } from 'node:string_decoder';

export interface RunProcessOptions {
  command: string;
  args: string[];
  cwd?: string;
  /**
   * The environment to start from; default the service's own (process.env). The child never gets
   * it as is: `toolEnvironment` keeps only what a tool needs.
   */
  env?: NodeJS.ProcessEnv;
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Time between SIGTERM and SIGKILL to the group. Default 3000. */
  killGraceMs?: number;
  /** Called per line of stdout; lines end at \n or \r (yt-dlp redraws progress with \r). Empty lines are skipped. */
  onStdoutLine?: (line: string) => void;
  onStderrLine?: (line: string) => void;
  /** How much of the end of stderr to keep for error reporting. Default 8 KiB. */
  stderrTailBytes?: number;
  /** Keep stdout (up to this many bytes) in `stdout`, e.g. yt-dlp's --dump-single-json. Default 0: not kept. */
  stdoutCaptureBytes?: number;
  /**
   * Give the child a stdin pipe that is never written nor closed while it runs, instead of none:
   * a lifeline, whose end of file tells the child (src/sandbox/confine.py) that we are gone.
   */
  keepStdinOpen?: boolean;
  /** Injected in tests. */
  spawn?: typeof nodeSpawn;
}

export interface RunProcessResult {
  /** Null when the child was killed by a signal or never started. */
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  aborted: boolean;
  stderrTail: string;
  /** The command does not exist or is not executable (ENOENT/EACCES). */
  notFound: boolean;
  /** Error code when the child could not be started at all (ENOENT, EACCES, EMFILE...), else null. */
  spawnError: string | null;
  /** Captured stdout when `stdoutCaptureBytes` was given, else ''. */
  stdout: string;
  /** True when stdout was longer than `stdoutCaptureBytes` and was cut. */
  stdoutTruncated: boolean;
}

const DEFAULT_KILL_GRACE_MS = 3000;
const DEFAULT_STDERR_TAIL_BYTES = 8 * 1024;
/**
 * A line longer than this is handed over in pieces, so a tool that never prints a newline cannot
 * grow memory without bound. Large enough for yt-dlp's one-line info JSON of a big site.
 */
const MAX_LINE_CHARS = 16 * 1024 * 1024;

/** Process groups started here and still alive, killed if the service exits first. */
const liveGroups = new Set<number>();
let exitHookInstalled = false;

function trackGroup(pid: number): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const pgid of liveGroups) signalGroup(pgid, 'SIGKILL');
    });
  }
  liveGroups.add(pid);
}

/** Signals a whole process group; a group that is already gone (ESRCH) is not an error. */
function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // ESRCH: nothing left in the group. EPERM cannot happen for our own children.
  }
}

/** What a tool needs from the service's environment: where programs are, locale, temp, Python's. */
const TOOL_VARIABLES = new Set([
  'PATH',
  'HOME',
  'USER',
  'LOGNAME',
  'LANG',
  'LANGUAGE',
  'TZ',
  'TMPDIR',
  'PYTHONPATH',
  'PYTHONIOENCODING',
  'PYTHONUTF8',
  'PYTHONDONTWRITEBYTECODE',
  'SSL_CERT_FILE',
  'SSL_CERT_DIR',
  'XDG_CONFIG_HOME',
  'XDG_CACHE_HOME',
]);
const LOCALE_VARIABLE = /^LC_[A-Z_]+$/;

/**
 * The environment a tool is started with: only the variables of `base` it needs (TOOL_VARIABLES
 * and LC_*). Pure: it reads only `base`.
 *
 * Why an allowlist:
 * - The service's secrets (API_KEYS, URL_SIGNING_SECRET, a database URL with its password...)
 *   are no business of a downloader that parses pages from anywhere.
 * - yt-dlp must reach the network only through the egress guard it is given (`--proxy`). Python's
 *   urllib reads every `*_proxy` variable (getproxies_environment lowercases the names), and its
 *   ProxyHandler, under yt-dlp's PerRequestProxyHandler, skips the proxy for any host that
 *   `no_proxy`/`NO_PROXY` matches; other variables (https_proxy, all_proxy) could route a tool's
 *   traffic somewhere the guard never sees. None of them is on the list.
 */
export function toolEnvironment(base: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(base)) {
    if (value !== undefined && (TOOL_VARIABLES.has(name) || LOCALE_VARIABLE.test(name))) env[name] = value;
  }
  return env;
}

/**
 * A run's result before it has run, and what it keeps of its output (stderr's tail; stdout's
 * head when asked for), which keepOutput() copies into the result once the run is over. For
 * runProcess and for runs in the resident sandbox alike.
 */
export function startRunResult(opts: Pick<RunProcessOptions, 'stderrTailBytes' | 'stdoutCaptureBytes'>) {
  const result: RunProcessResult = {
    exitCode: null,
    signal: null,
    timedOut: false,
    aborted: false,
    stderrTail: '',
    notFound: false,
    spawnError: null,
    stdout: '',
    stdoutTruncated: false,
  };
  const stderrTail = new TailBuffer(opts.stderrTailBytes ?? DEFAULT_STDERR_TAIL_BYTES);
  const stdoutCapture = opts.stdoutCaptureBytes ? new HeadBuffer(opts.stdoutCaptureBytes) : null;
  return {
    result,
    stderrTail,
    stdoutCapture,
    keepOutput: (): void => {
      result.stderrTail = stderrTail.text();
      if (stdoutCapture) {
        result.stdout = stdoutCapture.text();
        result.stdoutTruncated = stdoutCapture.truncated;
      }
    },
  };
}

export function runProcess(opts: RunProcessOptions): Promise<RunProcessResult> {
  const { result, stderrTail, stdoutCapture, keepOutput } = startRunResult(opts);
  if (opts.signal?.aborted) return Promise.resolve({ ...result, aborted: true });

  const spawn = opts.spawn ?? nodeSpawn;
  const killGraceMs = opts.killGraceMs ?? DEFAULT_KILL_GRACE_MS;

  let child: ChildProcess;
  try {
    child = spawn(opts.command, opts.args, {
      cwd: opts.cwd,
      env: toolEnvironment(opts.env ?? process.env),
      detached: true,
      shell: false,
      stdio: [opts.keepStdinOpen ? 'pipe' : 'ignore', opts.onStdoutLine || stdoutCapture ? 'pipe' : 'ignore', 'pipe'],
    });
  } catch (err) {
    return Promise.resolve(withSpawnError(result, err));
  }
  const pid = child.pid;
  if (pid !== undefined) trackGroup(pid);
  // A child that exits before reading would make our end fail with EPIPE: nothing to report.
  child.stdin?.on('error', () => {});

  return new Promise<RunProcessResult>((resolve, reject) => {
    let killTimer: NodeJS.Timeout | undefined;
    let settled = false;

    const terminate = (): void => {
      if (pid === undefined || settled || killTimer) return;
      signalGroup(pid, 'SIGTERM');
      killTimer = setTimeout(() => signalGroup(pid, 'SIGKILL'), killGraceMs);
    };

    const { stdoutSplitter, stderrSplitter, callbackFailure, release } = superviseRun(opts, result, terminate);

    child.stdout?.on('data', (chunk: Buffer) => {
      stdoutCapture?.push(chunk);
      stdoutSplitter?.push(chunk);
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      stderrTail.push(chunk);
      stderrSplitter?.push(chunk);
    });

    child.on('error', (err) => {
      // 'error' without a pid is a spawn failure; later ones (a failed kill) change nothing.
      if (pid !== undefined) return;
      withSpawnError(result, err);
      finish();
    });
    child.on('exit', () => {
      // Sweep the group: leftovers are orphans of this job.
      if (pid !== undefined) signalGroup(pid, 'SIGKILL');
    });
    child.on('close', (code, signal) => {
      if (settled) return; // after a spawn failure 'close' follows 'error'
      result.exitCode = code;
      result.signal = signal;
      stdoutSplitter?.end();
      stderrSplitter?.end();
      finish();
    });

    function finish(): void {
      if (settled) return;
      settled = true;
      if (pid !== undefined) liveGroups.delete(pid);
      child.stdin?.destroy();
      clearTimeout(killTimer);
      release();
      keepOutput();
      const failure = callbackFailure();
      if (failure !== null) reject(failure.thrown);
      else resolve(result);
    }
  });
}

/**
 * What every way of running a tool shares (a process here, a run of the resident sandbox): the
 * abort signal and the time limit stop it, marked in the result; a line callback that throws
 * stops it too, and its first error is kept for the caller to reject with. `release` undoes the
 * listener and the timer once the run is over.
 */
export function superviseRun(opts: RunProcessOptions, result: RunProcessResult, terminate: () => void) {
  // Boxed: a callback may throw any value, null and undefined too.
  let callbackFailure: { thrown: unknown } | null = null;
  let timeoutTimer: NodeJS.Timeout | undefined;
  const onAbort = (): void => {
    result.aborted = true;
    terminate();
  };
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  if (opts.timeoutMs !== undefined) {
    timeoutTimer = setTimeout(() => {
      result.timedOut = true;
      terminate();
    }, opts.timeoutMs);
  }
  const guarded = (fn: ((line: string) => void) | undefined) =>
    fn &&
    ((line: string) => {
      if (callbackFailure !== null) return;
      try {
        fn(line);
      } catch (err) {
        callbackFailure = { thrown: err };
        terminate();
      }
    });
  const stdoutLines = guarded(opts.onStdoutLine);
  const stderrLines = guarded(opts.onStderrLine);
  return {
    stdoutSplitter: stdoutLines ? new LineSplitter(stdoutLines) : null,
    stderrSplitter: stderrLines ? new LineSplitter(stderrLines) : null,
    callbackFailure: (): { thrown: unknown } | null => callbackFailure,
    release: (): void => {
      clearTimeout(timeoutTimer);
      opts.signal?.removeEventListener('abort', onAbort);
    },
  };
}

function withSpawnError(result: RunProcessResult, err: unknown): RunProcessResult {
  const code = (err as NodeJS.ErrnoException | undefined)?.code ?? 'EUNKNOWN';
  result.spawnError = code;
  result.notFound = code === 'ENOENT' || code === 'EACCES';
  return result;
}

/** Splits a byte stream into lines on \n, \r or \r\n, decoding UTF-8 across chunk boundaries. */
export class LineSplitter {
  private readonly decoder = new StringDecoder('utf8');
  /** Pieces of the unfinished line, joined only when it ends, so long lines cost linear time. */
  private pending: string[] = [];
  private pendingChars = 0;

  constructor(private readonly onLine: (line: string) => void) {}

  push(chunk: Buffer): void {
    const pieces = this.decoder.write(chunk).split(/\r\n|\r|\n/);
    const rest = pieces.pop() ?? '';
    if (pieces.length > 0) {
      pieces[0] = this.takePending() + pieces[0];
      for (const line of pieces) this.emit(line);
    }
    this.pending.push(rest);
    this.pendingChars += rest.length;
    if (this.pendingChars > MAX_LINE_CHARS) this.emit(this.takePending());
  }

  end(): void {
    this.pending.push(this.decoder.end());
    this.emit(this.takePending());
  }

  private takePending(): string {
    const text = this.pending.join('');
    this.pending = [];
    this.pendingChars = 0;
    return text;
  }

  private emit(line: string): void {
    // A \r\n split across two chunks yields one empty piece; empty lines carry nothing anyway.
    if (line !== '') this.onLine(line);
  }
}

/** Keeps the last `limit` bytes pushed. */
export class TailBuffer {
  private chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly limit: number) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    while (this.chunks.length > 1 && this.size - this.chunks[0]!.length >= this.limit) {
      this.size -= this.chunks.shift()!.length;
    }
  }

  text(): string {
    const all = Buffer.concat(this.chunks);
    const tail = all.subarray(Math.max(0, all.length - this.limit));
    // Cutting may split a UTF-8 sequence at the start; drop the replacement character it leaves.
    return tail.toString('utf8').replace(/^\uFFFD+/, '');
  }
}

/** Keeps the first `limit` bytes pushed. */
export class HeadBuffer {
  private chunks: Buffer[] = [];
  private size = 0;
  truncated = false;

  constructor(private readonly limit: number) {}

  push(chunk: Buffer): void {
    const room = this.limit - this.size;
    if (chunk.length > room) this.truncated = true;
    if (room <= 0) return;
    const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.chunks.push(kept);
    this.size += kept.length;
  }

  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

/** Whether a process of this machine is alive: signal 0 reaches it, or it exists but is not ours (EPERM). */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
