import fs from 'node:fs/promises';
import { netscapeCookiesProblem } from './ytdlp-args.js';
import { cookiesRefusal } from './ytdlp-version.js';

/**
 * Why the operator's YTDLP_COOKIES_FILE must not be used, or null: a file that is not a Netscape
 * cookies file, or a yt-dlp (by its path and version) that would send the cookies to other hosts.
 * Checked at start so that a wrong file stops start-up; every job checks its own copy again.
 */
export async function cookiesFileRefusal(
  file: string,
  ytdlp: { path: string | null; configured: string; version: (path: string) => Promise<string | null> },
): Promise<string | null> {
  const problem = await fs
    .readFile(file, 'utf8')
    .then(netscapeCookiesProblem, (err: NodeJS.ErrnoException) => `it cannot be read (${err.code})`);
  if (problem !== null) return problem;
  return cookiesRefusal(
    ytdlp.path ?? `${ytdlp.configured}, not found`,
    ytdlp.path === null ? null : await ytdlp.version(ytdlp.path),
  );
}
