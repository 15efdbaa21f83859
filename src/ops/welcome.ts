import path from 'node:path';
import type { HealthReport } from '../http/schemas.js';

/** Where the API keys come from: API_KEYS, or the file the generated key is kept in. */
export type ApiKeySource = { kind: 'configured' } | { kind: 'file'; file: string; created: boolean };

/**
 * What the service says on standard error once it listens, in plain words for the person who
 * started it, beside the JSON log on standard output: the address to open, and where the API key
 * is (its file; never the key itself).
 */
export function welcomeText(opts: {
  /** The address the server listens on, as the socket reports it. */
  address: string;
  port: number;
  keys: ApiKeySource;
  /** ACCEL_REDIRECT_PREFIX is set: people reach the service through nginx. */
  behindNginx: boolean;
}): string {
  const lines = [`source-fetch is ready: open ${openUrl(opts.address, opts.port)} in a browser.`];
  if (opts.behindNginx) lines.push("Behind nginx, open nginx's address instead.");
  if (opts.keys.kind === 'configured') {
    lines.push('The API key is one of API_KEYS; the page asks for it once per tab.');
  } else {
    const file = path.resolve(opts.keys.file);
    const made = opts.keys.created ? 'was generated into' : 'is in';
    lines.push(`The API key ${made} ${file} (read it with: cat ${file}); the page asks for it once per tab.`);
  }
  return `${lines.join('\n')}\n`;
}

/** The page's URL: a wildcard address is reached as localhost; an IPv6 one in brackets. */
function openUrl(address: string, port: number): string {
  const host =
    address === '0.0.0.0' || address === '::' ? 'localhost' : address.includes(':') ? `[${address}]` : address;
  return `http://${host}:${port}/`;
}

/**
 * What the service says on standard error when the health check at start finds that it cannot
 * fetch (or store) yet, in plain words with what to do; null when it can. It still starts: the
 * API, the page and what is stored stay served, and /healthz says the same.
 */
export function cannotFetchText(
  report: HealthReport,
  settings: { ytdlp: string; ffmpeg: string; artifactRoot: string },
): string | null {
  const reasons: string[] = [];
  if (!report.downloader.present)
    reasons.push(
      report.downloader.path === null
        ? `yt-dlp was not found (${settings.ytdlp}): install it (apt-get install yt-dlp, or scripts/fetch-current-ytdlp.sh) or set YTDLP_PATH to it.`
        : `yt-dlp at ${report.downloader.path} does not run (its --version failed): set YTDLP_PATH to a working one.`,
    );
  if (!report.ffmpeg.present)
    reasons.push(
      `ffmpeg was not found (${settings.ffmpeg}): install it (apt-get install ffmpeg) or set FFMPEG_PATH to it.`,
    );
  if (!report.confinement.ok)
    reasons.push(
      `The tools cannot be confined to the egress guard (${report.confinement.reason ?? 'no reason given'}): see docs/threat-model.md; TOOL_CONFINEMENT=off runs them unconfined.`,
    );
  if (!report.database.ok) reasons.push('The database does not answer.');
  if (!report.artifact_root.writable) reasons.push(`The artifact root ${settings.artifactRoot} is not writable.`);
  for (const warning of report.warnings) if (warning.code === 'store_low_on_space') reasons.push(warning.message);
  if (reasons.length === 0) return null;
  const what = report.can_fetch ? 'It takes no job yet' : 'It cannot fetch yet';
  return `${what} (GET /healthz says so too):\n${reasons.map((reason) => `  ${reason}`).join('\n')}\n`;
}
