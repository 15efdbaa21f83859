import { readlinkSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import type { RunProcessOptions, RunProcessResult } from '../tools/process.js';
import { confineLimitsArgument, PRLIMIT_NOT_FOUND, prlimitArgs, type ToolLimits } from './limits.js';

/**
 * Confinement of the external tools. yt-dlp and ffmpeg are ordinary processes that can
 * open sockets of their own: options, URL fragments, protocols (ftp:, rtmp:...) and helper
 * programs that nobody has thought of would reach the network around the egress guard. So in
 * 'netns' mode every tool runs inside a new network namespace (an unprivileged user namespace
 * makes that possible without root) that holds nothing but its own loopback interface:
 *
 *   unshare --user --map-root-user --net --pid --fork --kill-child -- python3 confine.py ... -- tool args
 *
 * confine.py checks that it really is confined, and for tools that may use the network brings
 * loopback up with a bridge on 127.0.0.1:BRIDGE_PORT to the guard's Unix socket. Any other
 * connect() fails at once: nothing is listening on the namespace's loopback, and there is no
 * route anywhere else. Tools that need no network (the conversion) get no bridge at all.
 *
 * Either way a run may be given resource ceilings (./limits.ts): confine.py sets them on the tool
 * it starts; in 'off' mode util-linux prlimit does.
 *
 * 'off' runs the tools as plain processes (the guard then listens on loopback TCP). It exists for
 * hosts that forbid namespaces and must be chosen explicitly: see TOOL_CONFINEMENT in docs/configuration.md.
 */
export type ConfinementMode = 'netns' | 'off';

/** Inside a tool's namespace, the bridge to the egress guard listens here. */
export const BRIDGE_PORT = 3128;

/** What a tool may reach: the egress guard through the bridge, or nothing at all. */
export type ToolNetwork = 'guard' | 'none';

/** How confine.py reports its own failures (see MARKER, SETUP_FAILED, NOT_FOUND there). */
const MARKER = 'source-fetch-sandbox:';
const SETUP_FAILED = 125;
const NOT_FOUND = 127;
/** util-linux unshare prints its own failures this way ("unshare: unshare failed: Operation not permitted"). */
const UNSHARE_FAILURE = /^unshare: .*$/m;

/**
 * What a refused connect() (or a name look-up, which can only be for a direct connection) looks
 * like in a confined tool's output: errno texts from Python, glibc and ffmpeg. Through the bridge
 * these never happen: the guard answers an unreachable origin with 502, which tools report as an
 * HTTP error. So in 'netns' mode any of these means the tool tried to get around the guard.
 */
export const REFUSED_CONNECT =
  /Connection refused|Network is unreachable|No route to host|Cannot assign requested address|Address family not supported|Temporary failure in name resolution|Name or service not known|No address associated with hostname|Errno (?:-2|-3|-5|99|101|111|113)\b/i;

export const CONFINE_SCRIPT = fileURLToPath(new URL('../../src/sandbox/confine.py', import.meta.url));

export interface SandboxDeps {
  mode: ConfinementMode;
  /** util-linux unshare. */
  unshare: string;
  /** Any Python 3; confine.py uses the standard library only. */
  python: string;
  /** The guard's Unix socket ('netns' mode). */
  guardSocket: string | null;
  /** The guard's loopback TCP authority ('off' mode). */
  guardAuthority: string | null;
  /** util-linux prlimit, which sets a run's limits in 'off' mode; default 'prlimit', looked up on PATH. */
  prlimit?: string;
  /** confine.py; default the one beside this module. It must be readable by the user the tools run as. */
  confineScript?: string;
  /**
   * What a run with a mount view sees read-only besides the system's programs and libraries: the
   * tools' folders. Given, the health check makes a view too, so that a host that cannot make one
   * is told at once.
   */
  viewReadOnly?: string[];
  /** `readlink /proc/self/ns/net` of the service: confine.py refuses to run in the same one. */
  hostNetns: string;
  run: (opts: RunProcessOptions) => Promise<RunProcessResult>;
}

export type ConfinementStatus =
  { mode: 'netns'; ok: true } | { mode: 'netns'; ok: false; reason: string } | { mode: 'off'; ok: true };

export interface SandboxedResult extends RunProcessResult {
  /** Confinement could not be set up, so the tool never ran; the reason, else null. */
  confinementFailure: string | null;
}

/**
 * One tool run: what it may reach, the ceilings it runs under (none: the service's own), and with
 * mountView ('netns' mode) a root of its own in which its cwd is the only folder of the host's
 * data it sees (confine.py's enter_mount_view).
 */
export type SandboxRunOptions = RunProcessOptions & { network: ToolNetwork; limits?: ToolLimits; mountView?: boolean };

export interface Sandbox {
  readonly mode: ConfinementMode;
  /** host:port at which a tool given network 'guard' reaches the egress guard. */
  readonly guardAuthority: string;
  /** Runs a tool: confined in 'netns' mode, as a plain process in 'off' mode. */
  run(opts: SandboxRunOptions): Promise<SandboxedResult>;
  /** Starts a sandbox like a tool's and looks inside: its own namespace, only lo, the guard answering. */
  check(): Promise<ConfinementStatus>;
}

export function readHostNetns(): string {
  return readlinkSync('/proc/self/ns/net');
}

export function createSandbox(deps: SandboxDeps): Sandbox {
  if (deps.mode === 'off') {
    if (deps.guardAuthority === null) throw new Error("confinement 'off' needs the guard on TCP");
    return {
      mode: 'off',
      guardAuthority: deps.guardAuthority,
      async run({ network: _network, mountView: _mountView, limits, ...opts }) {
        if (limits === undefined) return { ...(await deps.run(opts)), confinementFailure: null };
        const result = await deps.run({
          ...opts,
          command: deps.prlimit ?? 'prlimit',
          args: [...prlimitArgs(limits), opts.command, ...opts.args],
        });
        const notFound = result.notFound || (result.exitCode === 127 && PRLIMIT_NOT_FOUND.test(result.stderrTail));
        return { ...result, notFound, confinementFailure: null };
      },
      check: () => Promise.resolve({ mode: 'off', ok: true }),
    };
  }
  const guardSocket = deps.guardSocket;
  if (guardSocket === null) throw new Error("confinement 'netns' needs the guard on a Unix socket");

  const wrap = (network: ToolNetwork, inner: string[], limits?: ToolLimits, mountView = false): string[] => [
    '--user',
    '--map-root-user',
    '--net',
    '--pid',
    '--fork',
    '--kill-child',
    ...(mountView ? ['--mount'] : []),
    '--',
    deps.python,
    // Isolated and without site: no PYTHON* variable or user site-packages can change the script.
    '-I',
    '-S',
    deps.confineScript ?? CONFINE_SCRIPT,
    '--host-netns',
    deps.hostNetns,
    ...(network === 'guard' ? ['--bridge', `${BRIDGE_PORT}=${guardSocket}`] : []),
    ...(limits ? ['--limits', confineLimitsArgument(limits)] : []),
    ...(mountView ? ['--mount-view', ...(deps.viewReadOnly ?? []).flatMap((folder) => ['--read-only', folder])] : []),
    ...inner,
  ];

  return {
    mode: 'netns',
    guardAuthority: `127.0.0.1:${BRIDGE_PORT}`,
    async run({ network, limits, mountView, command, args, ...opts }) {
      const result = await deps.run({
        ...opts,
        command: deps.unshare,
        args: wrap(network, ['--lifeline', '--', command, ...args], limits, mountView),
        // The lifeline: confine.py ends the sandbox when this pipe closes, i.e. when we die.
        keepStdinOpen: true,
      });
      return interpretSandboxed(result);
    },
    async check() {
      const result = await deps.run({
        command: deps.unshare,
        args: wrap('guard', ['--check'], undefined, deps.viewReadOnly !== undefined),
        cwd: os.tmpdir(),
        timeoutMs: 10_000,
        killGraceMs: 500,
        stdoutCaptureBytes: 64 * 1024,
      });
      const interpreted = interpretSandboxed(result);
      if (interpreted.notFound)
        return { mode: 'netns', ok: false, reason: `${deps.unshare} or ${deps.python} is not installed` };
      if (interpreted.confinementFailure !== null)
        return { mode: 'netns', ok: false, reason: interpreted.confinementFailure };
      if (result.exitCode !== 0)
        return {
          mode: 'netns',
          ok: false,
          reason: `the sandbox check exited with ${result.exitCode ?? result.signal}`,
        };
      let report: { netns?: string; interfaces?: string[]; bridge?: string };
      try {
        report = JSON.parse(result.stdout) as typeof report;
      } catch {
        return { mode: 'netns', ok: false, reason: 'the sandbox check printed no report' };
      }
      if (report.netns === deps.hostNetns)
        return { mode: 'netns', ok: false, reason: 'the sandbox shares the service network namespace' };
      if (JSON.stringify(report.interfaces) !== '["lo"]')
        return { mode: 'netns', ok: false, reason: 'the sandbox has interfaces besides lo' };
      // The guard answers a request without credentials with 407: the bridge reaches it.
      if (!/^HTTP\/1\.1 407\b/.test(report.bridge ?? ''))
        return {
          mode: 'netns',
          ok: false,
          reason: `the egress guard is not reachable from the sandbox (${report.bridge ?? 'no answer'})`,
        };
      return { mode: 'netns', ok: true };
    },
  };
}

/** Tells a sandbox that failed to start (or a tool that could not be started) from a tool that ran and failed. */
export function interpretSandboxed(result: RunProcessResult): SandboxedResult {
  const ownLine = result.stderrTail.split('\n').find((line) => line.startsWith(MARKER));
  if (result.notFound) return { ...result, notFound: false, confinementFailure: 'unshare is not installed' };
  if (result.exitCode === NOT_FOUND && ownLine) return { ...result, notFound: true, confinementFailure: null };
  if (result.exitCode === SETUP_FAILED && ownLine) {
    return { ...result, confinementFailure: ownLine.slice(MARKER.length).trim() };
  }
  const unshareLine = UNSHARE_FAILURE.exec(result.stderrTail);
  if (result.exitCode !== 0 && unshareLine) return { ...result, confinementFailure: unshareLine[0] };
  return { ...result, confinementFailure: null };
}
