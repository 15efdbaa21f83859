/**
 * Which yt-dlp an end-to-end test runs. The e2e project runs Debian stable's (`yt-dlp` on PATH);
 * the projects vitest.config.ts adds for a current yt-dlp run the fetch tests again with the
 * launcher it names in SOURCE_FETCH_TEST_YTDLP (scripts/fetch-current-ytdlp.sh unpacks it), which
 * startService passes on as YTDLP_PATH.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

/** The launcher a current-yt-dlp project runs, or undefined in the e2e project. */
export const CURRENT_YTDLP: string | undefined = process.env.SOURCE_FETCH_TEST_YTDLP || undefined;

/** The yt-dlp this test run's service runs: YTDLP_PATH as startService sets it. */
export const YTDLP_UNDER_TEST = CURRENT_YTDLP ?? 'yt-dlp';

/** Debian stable's yt-dlp (2023.03.04 on bookworm), which the e2e project runs. */
export const DEBIAN_YTDLP = '/usr/bin/yt-dlp';

/** What `yt-dlp --version` prints, e.g. "2023.03.04". */
export function ytdlpVersion(launcher: string): string {
  return execFileSync(launcher, ['--version'], { encoding: 'utf8', timeout: 30_000 }).trim();
}

/**
 * The current yt-dlps under test besides Debian's: SOURCE_FETCH_CURRENT_YTDLP, launchers
 * separated by ':' (.ci/run sets it: the newest Debian's archive offers, and the image's pin when
 * that is another version; empty for none); unset, .cache/yt-dlp/current/yt-dlp when
 * scripts/fetch-current-ytdlp.sh has put one there. vitest.config.ts gives each a project of the
 * fetch files, named after its folder, which the script names after the Debian version
 * ("e2e yt-dlp 2026.10.26-1"); unit tests of what depends on yt-dlp's code run with each too.
 */
export function currentYtDlps(): string[] {
  const named = process.env.SOURCE_FETCH_CURRENT_YTDLP;
  if (named !== undefined) return named.split(':').filter((launcher) => launcher !== '');
  const fetched = path.resolve(import.meta.dirname, '../../.cache/yt-dlp/current/yt-dlp');
  return existsSync(fetched) ? [fetched] : [];
}
