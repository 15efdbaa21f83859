import path from 'node:path';
import type { Logger } from '../logger.js';
import { toolFolders } from './mount-view.js';
import { createResidentSandbox, type ResidentSandbox } from './resident.js';
import { createSandbox, readHostNetns, type ConfinementStatus, type SandboxDeps } from './sandbox.js';

/** The part of the configuration (src/config.ts) confinement uses. */
export interface ConfinementConfig {
  confinement: {
    mode: SandboxDeps['mode'];
    unshare: string;
    python: string;
    prlimit: string;
    resident: boolean;
    mountView: boolean;
  };
  tools: { ytdlp: string; ffmpeg: string };
  dataDir: string;
}

export interface ConfinementDeps {
  /** yt-dlp's real path, as found at start; null when not found. */
  ytdlpPath: string | null;
  /** Finds a configured tool (a name on the search path, or a path). */
  locate: (tool: string) => Promise<string | null>;
  guard: { socketPath: string | null; authority: string | null };
  /** The private folder of the resident sandbox's socket; null: the data dir. */
  runtimeDir: string | null;
  run: SandboxDeps['run'];
  /** The resident sandbox's first start is over, ready or not. */
  onSettled: () => void;
  log: Logger;
  onStop: (stop: () => void | Promise<void>) => void;
}

export interface Confinement {
  sandbox: ResidentSandbox;
  /** As last checked: at start, then with every health check. */
  status(): ConfinementStatus;
  check(): Promise<ConfinementStatus>;
}

/**
 * The sandbox the tools run in. Fail closed: without confinement nothing is fetched (submissions
 * 503, workers idle), unless the operator chose TOOL_CONFINEMENT=off. Checked again with every
 * health check.
 */
export async function startConfinement(config: ConfinementConfig, deps: ConfinementDeps): Promise<Confinement> {
  const { log } = deps;
  const hostNetns = readHostNetns();
  // What a tool run's mount view shows besides the system: the tools' own folders.
  const viewReadOnly = await toolFolders([
    await deps.locate(config.tools.ytdlp),
    await deps.locate(config.tools.ffmpeg),
    config.confinement.python,
  ]);
  const sandbox = createResidentSandbox({
    spawned: createSandbox({
      mode: config.confinement.mode,
      unshare: config.confinement.unshare,
      python: config.confinement.python,
      prlimit: config.confinement.prlimit,
      ...(config.confinement.mountView ? { viewReadOnly } : {}),
      guardSocket: deps.guard.socketPath,
      guardAuthority: deps.guard.authority,
      hostNetns,
      run: deps.run,
    }),
    ytdlpPath: deps.ytdlpPath,
    python: config.confinement.python,
    socketPath: path.join(deps.runtimeDir ?? config.dataDir, 'resident.sock'),
    hostNetns,
    guardSocket: deps.guard.socketPath,
    enabled: config.confinement.resident,
    viewReadOnly,
    log,
    onSettled: deps.onSettled,
  });
  let status: ConfinementStatus = await sandbox.check();
  if (config.confinement.mode === 'off') {
    log.warn('TOOL_CONFINEMENT=off: yt-dlp and ffmpeg run unconfined and can connect around the egress guard');
  } else if (!status.ok) {
    log.error(
      { reason: status.reason },
      'the tools cannot be confined: fetching is refused until this is fixed (see TOOL_CONFINEMENT)',
    );
  }
  // In the background: tools are started on their own until the resident sandbox is ready.
  await sandbox.start();
  deps.onStop(() => sandbox.stop());
  return {
    sandbox,
    status: () => status,
    check: async () => (status = await sandbox.check()),
  };
}
