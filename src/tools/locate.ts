/**
 * Finding the external tools and asking their version, for start-up checks and the health check.
 */
import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import { delimiter, isAbsolute, join, resolve } from 'node:path';
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
