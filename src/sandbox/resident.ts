import { createConnection, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { Logger } from '../logger.js';
import { startRunResult, superviseRun } from '../tools/process.js';
import { buildWarmUpRun } from '../tools/ytdlp-args.js';
import { inspectYtDlpLauncher } from '../tools/ytdlp-launcher.js';
import { residentLimits } from './limits.js';
import {
  BRIDGE_PORT,
  interpretSandboxed,
  type Sandbox,
  type SandboxedResult,
  type SandboxRunOptions,
} from './sandbox.js';

/**
 * The resident sandbox. Starting unshare, Python and confine.py for every tool run, and Python
 * again with all of yt-dlp for each of a job's two yt-dlp runs, is most of a short job's time and
 * CPU. So one resident process per node (src/sandbox/resident.py) forks a confined child per run
 * instead, and imports yt-dlp once, to run it in that child without starting anything.
 *
 * The resident itself runs in a sandbox like a tool's, with no network at all. Each run's child
 * enters a user, network and PID namespace of its own inside it: its own credentials, its own
 * loopback with the bridge to the egress guard as the only way out (for yt-dlp), its own cwd,
 * and a process group of its own that the service kills on cancel, time-out or shutdown. The
 * resident never reads a run's request (its child does), so nothing of one run reaches another.
 * When the service dies, the resident's sandbox ends and every run with it.
 *
 * Only with TOOL_CONFINEMENT=netns. yt-dlp runs in-process only when YTDLP_PATH is a Python
 * launcher script (src/tools/ytdlp-launcher.ts); a standalone build is started per run, in the
 * resident's children like any tool. Until the resident is ready, while it restarts after dying,
 * or when a run cannot reach it, each tool is started in a sandbox of its own (createSandbox's
 * run). The 'tool runs' log line says which.
 */
export const RESIDENT_SCRIPT = fileURLToPath(new URL('../../src/sandbox/resident.py', import.meta.url));

/** Bytes reserved in the resident's argv for its children's command lines (they name the job's folder). */
const TITLE_ROOM = 1024;
const READY_TIMEOUT_MS = 120_000;
const FIRST_RESTART_DELAY_MS = 1000;
const MAX_RESTART_DELAY_MS = 60_000;
const DEFAULT_KILL_GRACE_MS = 3000;

export interface ResidentSandboxDeps {
  /** Starts tools on their own (and the resident itself); its check() is the health check's. */
  spawned: Sandbox;
  /** YTDLP_PATH resolved to an absolute path, null when not found. */
  ytdlpPath: string | null;
  /** Runs resident.py when yt-dlp is not imported (standard library only, like confine.py). */
  python: string;
  /** In the service's private runtime folder. */
  socketPath: string;
  hostNetns: string;
  guardSocket: string | null;
  /** False: every run is started on its own (RESIDENT_SANDBOX=off). */
  enabled: boolean;
  /** As SandboxDeps.viewReadOnly, for runs with a mount view. */
  viewReadOnly?: string[];
  log: Logger;
  /** Called once the resident's first start is over, ready or not (see settled()). */
  onSettled?: () => void;
}

export interface ResidentSandbox extends Sandbox {
  /** Where runs go right now. */
  runs(): 'resident' | 'spawned';
  /**
   * Whether the resident's first start is over: it is ready, or failed (runs are started on
   * their own meanwhile), or is not used. Workers wait for it: a job started during the
   * resident's warm-up would pay for two starts of yt-dlp.
   */
  settled(): boolean;
  /** Starts the resident in the background (netns mode); until it is ready, runs are spawned. */
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function createResidentSandbox(deps: ResidentSandboxDeps): ResidentSandbox {
  const { spawned, log } = deps;
  let ready = false;
  let settled = false;
  const settle = () => {
    if (settled) return;
    settled = true;
    deps.onSettled?.();
  };
  const stopping = new AbortController();
  let running: Promise<void> | undefined;
  let restartTimer: NodeJS.Timeout | undefined;
  let restartDelayMs = FIRST_RESTART_DELAY_MS;

  /** interpreter and launcher: yt-dlp imported; null: every tool started per run. */
  function launch(ytdlp: { interpreter: string[]; launcher: string } | null, why: string | null): void {
    const startedAt = Date.now();
    let readyAt: number | undefined;
    let importFailed: string | undefined;
    const attempt = new AbortController();
    const readyTimer = setTimeout(() => attempt.abort('not ready in time'), READY_TIMEOUT_MS);
    const [command, ...interpreterArgs] = ytdlp ? ytdlp.interpreter : [deps.python, '-I', '-S'];
    running = spawned
      .run({
        command: command!,
        args: [
          ...interpreterArgs,
          RESIDENT_SCRIPT,
          '--listen',
          deps.socketPath,
          '--host-netns',
          deps.hostNetns,
          ...(deps.guardSocket ? ['--bridge', `${BRIDGE_PORT}=${deps.guardSocket}`] : []),
          ...(ytdlp ? ['--ytdlp', ytdlp.launcher, '--warm-up', JSON.stringify(buildWarmUpRun())] : []),
          '--title-room',
          ' '.repeat(TITLE_ROOM),
        ],
        network: 'none',
        signal: AbortSignal.any([stopping.signal, attempt.signal]),
        killGraceMs: 1000,
        onStdoutLine: (line) => {
          const report = parseReport(line);
          if (!report) return;
          clearTimeout(readyTimer);
          if (report.ready) {
            ready = true;
            readyAt = Date.now();
            log.info(
              {
                runs: 'resident',
                ytdlp: ytdlp ? 'imported' : 'spawned',
                ...(report.ytdlp ? { ytdlp_version: report.ytdlp } : {}),
                ...(report.warmUp ? { warm_up: report.warmUp } : {}),
                shared_with_runs: report.shared,
                ...(why ? { reason: why } : {}),
                warm_up_ms: readyAt - startedAt,
              },
              'tool runs',
            );
            settle();
          } else {
            importFailed = report.reason;
          }
        },
      })
      .then((result) => {
        clearTimeout(readyTimer);
        ready = false;
        if (stopping.signal.aborted) return;
        if (ytdlp && importFailed !== undefined) {
          // The launcher's interpreter cannot import yt-dlp after all: start it per run instead.
          launch(null, `yt-dlp could not be imported: ${importFailed}`);
          return;
        }
        const reason =
          result.confinementFailure ??
          (attempt.signal.aborted ? String(attempt.signal.reason) : `it ended (${result.exitCode ?? result.signal})`);
        log.warn(
          { runs: 'spawned', reason: `the resident sandbox: ${reason}`, stderr: result.stderrTail.slice(-2000) },
          'tool runs',
        );
        settle();
        // One that stayed up a while starts again soon; one that keeps failing, less and less often.
        if (readyAt !== undefined && Date.now() - readyAt > MAX_RESTART_DELAY_MS)
          restartDelayMs = FIRST_RESTART_DELAY_MS;
        restartTimer = setTimeout(() => launch(ytdlp, why), restartDelayMs);
        restartTimer.unref();
        restartDelayMs = Math.min(restartDelayMs * 2, MAX_RESTART_DELAY_MS);
      });
  }

  return {
    mode: spawned.mode,
    guardAuthority: spawned.guardAuthority,
    check: () => spawned.check(),
    runs: () => (ready ? 'resident' : 'spawned'),
    settled: () => settled,

    async run(opts) {
      if (!ready) return spawned.run(opts);
      const result = await runInResident(createConnection(deps.socketPath), opts, deps.viewReadOnly ?? []);
      // The resident went away since it was last seen: this run is started on its own.
      return result === 'unavailable' ? spawned.run(opts) : result;
    },

    async start() {
      if (!deps.enabled || spawned.mode !== 'netns') {
        log.info(
          { runs: 'spawned', reason: deps.enabled ? 'TOOL_CONFINEMENT=off' : 'RESIDENT_SANDBOX=off' },
          'tool runs',
        );
        settle();
        return;
      }
      const inspection =
        deps.ytdlpPath === null
          ? { importable: false as const, reason: 'not found' }
          : await inspectYtDlpLauncher(deps.ytdlpPath);
      log.info({ runs: 'spawned', reason: 'the resident sandbox is starting' }, 'tool runs');
      if (inspection.importable) launch({ interpreter: inspection.interpreter, launcher: deps.ytdlpPath! }, null);
      else launch(null, `YTDLP_PATH: ${inspection.reason}; yt-dlp is started per run`);
    },

    async stop() {
      ready = false;
      clearTimeout(restartTimer);
      stopping.abort('stopping');
      await running;
    },
  };
}

function parseReport(
  line: string,
):
  | { ready: true; ytdlp: string | null; warmUp: string | null; shared: string[] }
  | { ready: false; reason: string }
  | undefined {
  try {
    const report = JSON.parse(line) as {
      ready?: unknown;
      ytdlp?: unknown;
      warm_up?: unknown;
      shared?: unknown;
      reason?: unknown;
    };
    if (report.ready === true)
      return {
        ready: true,
        ytdlp: typeof report.ytdlp === 'string' ? report.ytdlp : null,
        warmUp: typeof report.warm_up === 'string' ? report.warm_up : null,
        shared: Array.isArray(report.shared) ? report.shared.map(String) : [],
      };
    if (report.ready === false) return { ready: false, reason: String(report.reason) };
  } catch {
    // Not a report.
  }
  return undefined;
}

/**
 * One run in the resident, over its own connection (the protocol of resident.py), with the
 * semantics of runProcess: the same output callbacks and buffers; abort and time-out stop the
 * run's whole process group (SIGTERM, then SIGKILL after the grace period); a callback that
 * throws stops it too, and its error is rethrown once the run is gone. 'unavailable' when the
 * resident did not take the run: nothing ran.
 */
export function runInResident(
  socket: Socket,
  opts: SandboxRunOptions,
  viewReadOnly: string[] = [],
): Promise<SandboxedResult | 'unavailable'> {
  const { result, stderrTail, stdoutCapture, keepOutput } = startRunResult(opts);
  if (opts.signal?.aborted) {
    socket.destroy();
    return Promise.resolve({ ...result, aborted: true, confinementFailure: null });
  }
  const killGraceMs = opts.killGraceMs ?? DEFAULT_KILL_GRACE_MS;

  return new Promise((resolve, reject) => {
    let connected = false;
    let pid: number | undefined;
    let setupFailure: string | null = null;
    let killTimer: NodeJS.Timeout | undefined;
    let terminating = false;
    let pending: Buffer = Buffer.alloc(0);

    const signalGroup = (signal: NodeJS.Signals) => {
      try {
        if (pid !== undefined) process.kill(-pid, signal);
      } catch {
        // ESRCH: the run is gone already.
      }
    };
    const terminate = () => {
      if (terminating) return;
      terminating = true;
      if (pid === undefined) {
        // Its leader has not said who it is yet: it ends on end of file, and its run with it.
        socket.destroy();
        return;
      }
      signalGroup('SIGTERM');
      killTimer = setTimeout(() => {
        signalGroup('SIGKILL');
        socket.destroy();
      }, killGraceMs);
    };
    const { stdoutSplitter, stderrSplitter, callbackFailure, release } = superviseRun(opts, result, terminate);

    const onFrame = (kind: string, payload: Buffer) => {
      if (kind === 'P') {
        pid = Number(payload.toString('latin1'));
      } else if (kind === 'O') {
        stdoutCapture?.push(payload);
        stdoutSplitter?.push(payload);
      } else if (kind === 'E') {
        stderrTail.push(payload);
        stderrSplitter?.push(payload);
      } else if (kind === 'X') {
        const status = JSON.parse(payload.toString('utf8')) as { code: number | null; signal: string | null };
        result.exitCode = status.code;
        result.signal = status.signal;
      } else if (kind === 'F') {
        setupFailure = payload.toString('utf8');
      }
    };

    socket.on('connect', () => {
      connected = true;
      const request = {
        command: opts.command,
        argv: opts.args,
        cwd: opts.cwd ?? process.cwd(),
        network: opts.network,
        limits: opts.limits ? residentLimits(opts.limits) : {},
        view: opts.mountView ? { read_only: viewReadOnly } : null,
      };
      socket.write(`${JSON.stringify(request)}\n`);
    });
    socket.on('data', (chunk: Buffer) => {
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      while (pending.length >= 5) {
        const length = pending.readUInt32BE(1);
        if (pending.length < 5 + length) break;
        onFrame(String.fromCharCode(pending[0]!), pending.subarray(5, 5 + length));
        pending = pending.subarray(5 + length);
      }
    });
    socket.on('error', () => {
      // 'close' follows: before 'connect' the resident is not there; after it, the run is cut off.
    });
    socket.on('close', () => {
      clearTimeout(killTimer);
      release();
      // The run's leader speaks first: without a word from it, nothing ran.
      if (!connected || (pid === undefined && !terminating)) {
        resolve('unavailable');
        return;
      }
      // Cut off without a status: killed, by us or with the resident.
      if (result.exitCode === null && result.signal === null) result.signal = 'SIGKILL';
      stdoutSplitter?.end();
      stderrSplitter?.end();
      keepOutput();
      const failure = callbackFailure();
      if (failure !== null) reject(failure.thrown);
      else if (setupFailure !== null) resolve({ ...result, confinementFailure: setupFailure });
      else resolve(interpretSandboxed(result));
    });
  });
}
