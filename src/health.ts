import { constants } from 'node:fs';
import fs from 'node:fs/promises';
import type { HealthReport } from './http/schemas.js';

/**
 * The health check: can this service fetch right now? It needs the downloader, ffmpeg and
 * ffprobe (every job probes its download), a working database and a writable artifact root.
 * Tool look-ups are cached briefly, so a monitoring probe every second does not spawn processes
 * every second.
 */
export interface HealthDeps {
  tools: { ytdlp: string; ffmpeg: string; ffprobe: string };
  locate: (nameOrPath: string) => Promise<string | null>;
  version: (path: string, args: string[]) => Promise<string | null>;
  pingDatabase: () => boolean;
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
  let cached: { at: number; ytdlp: ToolState; ffmpeg: ToolState; ffprobe: ToolState } | undefined;

  async function tool(nameOrPath: string, versionArgs: string[]): Promise<ToolState> {
    const found = await deps.locate(nameOrPath);
    if (!found) return { present: false, path: null, version: null };
    const version = await deps.version(found, versionArgs);
    return { present: version !== null, path: found, version };
  }

  async function tools() {
    if (!cached || deps.now() - cached.at > cacheMs) {
      const [ytdlp, ffmpeg, ffprobe] = await Promise.all([
        tool(deps.tools.ytdlp, ['--version']),
        tool(deps.tools.ffmpeg, ['-version']),
        tool(deps.tools.ffprobe, ['-version']),
      ]);
      cached = { at: deps.now(), ytdlp, ffmpeg, ffprobe };
    }
    return cached;
  }

  return async () => {
    const { ytdlp, ffmpeg, ffprobe } = await tools();
    let databaseOk = false;
    try {
      databaseOk = deps.pingDatabase();
    } catch {
      databaseOk = false;
    }
    const writable = await fs.access(deps.artifactRoot, constants.W_OK).then(
      () => true,
      () => false,
    );
    const freeBytes = await fs.statfs(deps.artifactRoot).then(
      (s) => s.bavail * s.bsize,
      () => null,
    );
    const canFetch = ytdlp.present && ffmpeg.present && ffprobe.present && databaseOk && writable;
    return {
      status: canFetch ? 'ok' : 'unavailable',
      can_fetch: canFetch,
      downloader: ytdlp,
      ffmpeg,
      ffprobe,
      database: { ok: databaseOk },
      artifact_root: { writable, free_bytes: freeBytes },
    };
  };
}
