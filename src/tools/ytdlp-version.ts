/**
 * What a yt-dlp's version (what `yt-dlp --version` prints, see ./locate.ts toolVersion) says it can
 * be trusted with. yt-dlp's versions are release dates: `2023.03.04`, or a nightly's
 * `2024.08.06.232710` (the build's time of day after the date).
 */

/**
 * The first release that keeps cookies to their own domains (CVE-2023-35934, GHSA-v8mc-9377-rwjj).
 * Before it, a cookie loaded from a cookies file was turned into a Cookie header for the format's
 * host, which yt-dlp then sent on every redirect hop and to every fragment, whatever host they
 * were on.
 */
export const COOKIES_SAFE_SINCE = '2023.07.06';

/** [year, month, day, build] of a yt-dlp version, or null for anything else. */
export function parseYtDlpVersion(version: string | null): [number, number, number, number] | null {
  const m = /^(\d{4})\.(\d{1,2})\.(\d{1,2})(?:\.(\d+))?$/.exec(version?.trim() ?? '');
  if (!m) return null;
  return [Number(m[1]), Number(m[2]), Number(m[3]), m[4] === undefined ? 0 : Number(m[4])];
}

/** Whether `version` is `since` or later; false when either is not a yt-dlp version. */
export function isAtLeast(version: string | null, since: string): boolean {
  const a = parseYtDlpVersion(version);
  const b = parseYtDlpVersion(since);
  if (a === null || b === null) return false;
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) return a[i]! > b[i]!;
  }
  return true;
}

/**
 * Why YTDLP_COOKIES_FILE must not be given to this yt-dlp, or null when it may. A version that
 * cannot be read (yt-dlp missing, failing, or printing something else) cannot be trusted either.
 * Names yt-dlp's path, never the cookies file's.
 */
export function cookiesRefusal(ytdlpPath: string, version: string | null): string | null {
  if (isAtLeast(version, COOKIES_SAFE_SINCE)) return null;
  const fix = `install a current yt-dlp (docs/yt-dlp.md), or unset YTDLP_COOKIES_FILE`;
  const why = `yt-dlp before ${COOKIES_SAFE_SINCE} sends a cookies file's cookies to other hosts than theirs, on redirects and to fragments (CVE-2023-35934)`;
  if (version === null) return `the version of yt-dlp (${ytdlpPath}) cannot be read, and ${why}: ${fix}`;
  if (parseYtDlpVersion(version) === null)
    return `yt-dlp (${ytdlpPath}) names no release date as its version (${JSON.stringify(version)}), and ${why}: ${fix}`;
  return `yt-dlp ${version} (${ytdlpPath}) is older than ${COOKIES_SAFE_SINCE}: it sends a cookies file's cookies to other hosts than theirs, on redirects and to fragments (CVE-2023-35934): ${fix}`;
}
