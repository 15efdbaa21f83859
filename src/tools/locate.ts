/**
 * Finding the external tools and asking their version, for start-up checks and the health check.
 */
import { constants } from 'node:fs';
import { access, realpath, stat } from 'node:fs/promises';
import { delimiter, isAbsolute, join, resolve } from 'node:path';
import { cookiesFileRefusal } from './cookies-file.js';
import { runProcess } from './process.js';

const VERSION_TIMEOUT_MS = 5000;

/**
 * Absolute path of an executable file, or null. A name with a "/" is a path (relative ones are
 * taken from the current folder); a bare name is looked up in `envPath` (a PATH value), where
 * empty and relative entries are skipped rather than searched in the current folder.
 */
export async function locateTool(nameOrPath: string, envPath: string): Promise<string | null> {
  if (nameOrPath === '') return null;
  if (nameOrPath.includes('/')) {
    const candidate = isAbsolute(nameOrPath) ? nameOrPath : resolve(nameOrPath);
    return (await isExecutableFile(candidate)) ? candidate : null;
  }
  for (const dir of envPath.split(delimiter)) {
    if (dir === '' || !isAbsolute(dir)) continue;
    const candidate = join(dir, nameOrPath);
    if (await isExecutableFile(candidate)) return candidate;
  }
  return null;
}

async function isExecutableFile(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return (await stat(path)).isFile();
  } catch {
    return false;
  }
}

/**
 * First non-empty line of what `path args` prints (e.g. `yt-dlp --version` → "2023.03.04",
 * `ffmpeg -version` → "ffmpeg version 5.1..."), or null if it fails, exits non-zero or takes
 * longer than 5 s.
 */
export async function toolVersion(path: string, args: string[]): Promise<string | null> {
  const result = await runProcess({
    command: path,
    args,
    timeoutMs: VERSION_TIMEOUT_MS,
    killGraceMs: 500,
    stdoutCaptureBytes: 64 * 1024,
  });
  if (result.exitCode !== 0) return null;
  const line = result.stdout.split(/\r?\n/).find((l) => l.trim() !== '');
  return line?.trim() ?? null;
}

export interface LocatedTools {
  /** The configured tools, yt-dlp by the real path found. */
  paths: { ytdlp: string; ffmpeg: string };
  /** yt-dlp's real path; null when it is not found. */
  ytdlpPath: string | null;
  /** Why YTDLP_COOKIES_FILE must not be used (./cookies-file.ts); null when it may, or is unset. */
  cookiesFileRefusal: string | null;
}

/**
 * The yt-dlp this process runs, found once and by its real path: a YTDLP_PATH that is a link
 * (.cache/yt-dlp/current, docs/yt-dlp.md) switched to a new version later changes nothing here
 * until a restart, so the resident sandbox, the jobs and /healthz all run the same version. A
 * YTDLP_COOKIES_FILE that must not be used is told, for start-up to stop.
 */
export async function locateTools(config: {
  tools: { ytdlp: string; ffmpeg: string };
  searchPath: string;
  ytdlpCookiesFile: string | undefined;
}): Promise<LocatedTools> {
  const found = await locateTool(config.tools.ytdlp, config.searchPath);
  const ytdlpPath = found === null ? null : await realpath(found);
  const cookiesRefusal =
    config.ytdlpCookiesFile === undefined
      ? null
      : await cookiesFileRefusal(config.ytdlpCookiesFile, {
          path: ytdlpPath,
          configured: config.tools.ytdlp,
          version: (tool) => toolVersion(tool, ['--version']),
        });
  return {
    paths: { ...config.tools, ytdlp: ytdlpPath ?? config.tools.ytdlp },
    ytdlpPath,
    cookiesFileRefusal: cookiesRefusal,
  };
}
