import { constants } from 'node:fs';
import fs from 'node:fs/promises';
import type { HealthReport } from './http/schemas.js';
import type { ConfinementStatus } from './sandbox/sandbox.js';

/**
 * The health check: can this service fetch right now? It needs the downloader and ffmpeg,
 * tools confined to the egress guard (unless the operator turned that off), a working database
 * and a writable artifact root. ffprobe is still reported, but no job runs it any more (the
 * conversion itself tells what is not audio), so it is not needed to fetch.
 * Tool look-ups are cached briefly, so a monitoring probe every second does not spawn processes
 * every second.
 */
export interface HealthDeps {
  tools: { ytdlp: string; ffmpeg: string; ffprobe: string };
  /** Starts a sandbox like a job's and looks inside (src/sandbox). */
  checkConfinement: () => Promise<ConfinementStatus>;
  locate: (nameOrPath: string) => Promise<string | null>;
  version: (path: string, args: string[]) => Promise<string | null>;
  pingDatabase: () => Promise<boolean>;
  databaseKind: 'sqlite' | 'postgres';
  nodeId: string;
  artifactRoot: string;
  now: () => number;
  cacheMs?: number;
}

interface ToolState {
  present: boolean;
  path: string | null;
  version: string | null;
}

export function createHealthCheck(deps: HealthDeps): () => Promise<HealthReport> {
  const cacheMs = deps.cacheMs ?? 5000;
  let cached: { at: number; ytdlp: ToolState; ffmpeg: ToolState; ffprobe: ToolState; confinement: ConfinementStatus } | undefined;

  async function tool(nameOrPath: string, versionArgs: string[]): Promise<ToolState> {
    const found = await deps.locate(nameOrPath);
    if (!found) return { present: false, path: null, version: null };
    const version = await deps.version(found, versionArgs);
    return { present: version !== null, path: found, version };
  }

  async function tools() {
    if (!cached || deps.now() - cached.at > cacheMs) {
      const [ytdlp, ffmpeg, ffprobe, confinement] = await Promise.all([
        tool(deps.tools.ytdlp, ['--version']),
        tool(deps.tools.ffmpeg, ['-version']),
        tool(deps.tools.ffprobe, ['-version']),
        deps.checkConfinement(),
      ]);
      cached = { at: deps.now(), ytdlp, ffmpeg, ffprobe, confinement };
    }
    return cached;
  }

  return async () => {
    const { ytdlp, ffmpeg, ffprobe, confinement } = await tools();
    const databaseOk = await deps.pingDatabase().catch(() => false);
    const writable = await fs.access(deps.artifactRoot, constants.W_OK).then(
      () => true,
      () => false,
    );
    const freeBytes = await fs.statfs(deps.artifactRoot).then(
      (s) => s.bavail * s.bsize,
      () => null,
    );
    const canFetch = ytdlp.present && ffmpeg.present && confinement.ok && databaseOk && writable;
    return {
      // Fetching works, but with the tools unconfined: a state to be seen, not a failure.
      status: !canFetch ? 'unavailable' : confinement.mode === 'off' ? 'degraded' : 'ok',
      can_fetch: canFetch,
      downloader: ytdlp,
      ffmpeg,
      ffprobe,
      node_id: deps.nodeId,
      database: { ok: databaseOk, kind: deps.databaseKind },
      artifact_root: { writable, free_bytes: freeBytes },
      confinement: {
        mode: confinement.mode,
        ok: confinement.ok,
        reason: confinement.ok ? (confinement.mode === 'off' ? 'TOOL_CONFINEMENT=off' : null) : confinement.reason,
      },
    };
  };
}
