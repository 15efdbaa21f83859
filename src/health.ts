import { constants } from 'node:fs';
import fs from 'node:fs/promises';
import type { HealthReport } from './http/schemas.js';
import type { Logger } from './logger.js';
import type { ConfinementStatus } from './sandbox/sandbox.js';
import type { StoreSpace } from './store/free-space.js';

/**
 * The health check: can this service fetch right now? It needs the downloader and ffmpeg,
 * tools confined to the egress guard (unless the operator turned that off), a working database
 * and a writable artifact root. A node whose artifact root's volume has less free than one job
 * can need (STORE_MIN_FREE_BYTES, src/store/free-space.ts) takes no job, and says `degraded`
 * with a `store_low_on_space` warning: the other nodes, or the operator, must take over. The
 * warning says why: eviction is making room (the store holds at least what is short), or cannot
 * (the store holds less: files that are not the store's fill the volume, for the operator to
 * remove). Either way the node takes jobs again by itself once there is room.
 * Tool look-ups are cached briefly, so a monitoring probe every second does not spawn processes
 * every second.
 *
 * A downloader older than DOWNLOADER_MAX_AGE_DAYS (by the date its version names) is reported
 * as a warning, not as `degraded` or `unavailable`: it still fetches direct links, and what it
 * no longer handles shows up as jobs failing. `degraded` stays the sign of tools running
 * unconfined, a security matter that an old Debian package on every node would drown out.
 */
export const DOWNLOADER_MAX_AGE_DAYS = 90;
const DAY_MS = 24 * 3600 * 1000;

/**
 * The release date a yt-dlp version names: `2023.03.04`, or a nightly's `2024.08.06.232710`.
 * Null for anything else.
 */
export function releaseDateOf(version: string | null): Date | null {
  const m = /^(\d{4})\.(\d{1,2})\.(\d{1,2})(?:\.\d+)?(?:\s|$)/.exec(version?.trim() ?? '');
  if (!m) return null;
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const date = new Date(Date.UTC(year, month - 1, day));
  // Date.UTC rolls over (month 13, day 32); a real date reads back the same.
  return date.getUTCFullYear() === year && date.getUTCMonth() === month - 1 && date.getUTCDate() === day ? date : null;
}
export interface HealthDeps {
  tools: { ytdlp: string; ffmpeg: string };
  /** Starts a sandbox like a job's and looks inside (src/sandbox). */
  checkConfinement: () => Promise<ConfinementStatus>;
  locate: (nameOrPath: string) => Promise<string | null>;
  version: (path: string, args: string[]) => Promise<string | null>;
  pingDatabase: () => Promise<boolean>;
  /** How long the database has to answer a ping before it reads as down (default 2 s). */
  pingTimeoutMs?: number;
  databaseKind: 'sqlite' | 'postgres';
  nodeId: string;
  artifactRoot: string;
  /** Free space on the artifact root's volume and what one job needs; absent: statfs here, no minimum. */
  storeSpace?: Pick<StoreSpace, 'freeBytes' | 'minFreeBytes'>;
  /** Bytes of content the store's accounting counts, what eviction can free (its totals); absent: not known. */
  storedBytes?: () => Promise<number>;
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
  const pingTimeoutMs = deps.pingTimeoutMs ?? 2000;
  let pingInFlight: Promise<boolean> | undefined;

  /**
   * Whether the database answers within pingTimeoutMs. A ping the driver never settles (a server
   * that refuses this node can leave one waiting) reads as down, and is shared by every check
   * until it settles, so polling /healthz during an outage does not pile up pings.
   */
  function databaseAnswers(): Promise<boolean> {
    pingInFlight ??= deps
      .pingDatabase()
      .catch(() => false)
      .finally(() => {
        pingInFlight = undefined;
      });
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), pingTimeoutMs);
    });
    return Promise.race([pingInFlight, late]).finally(() => clearTimeout(timer));
  }
  let cached: { at: number; ytdlp: ToolState; ffmpeg: ToolState; confinement: ConfinementStatus } | undefined;

  /**
   * The version each tool file printed, by path, with the file it was read from. A file that is
   * still the same one is not run again: `yt-dlp --version` costs a Python start (0.4 s here, and
   * past its 5 s time-out under heavy load, which read as yt-dlp missing), and /healthz is polled.
   * A file replaced or changed (an upgrade) is asked again; a failed answer is never kept.
   */
  const versions = new Map<string, { file: string; version: string }>();

  async function tool(nameOrPath: string, versionArgs: string[]): Promise<ToolState> {
    const found = await deps.locate(nameOrPath);
    if (!found) return { present: false, path: null, version: null };
    const file = await fileIdentity(found);
    const known = versions.get(found);
    if (file !== null && known?.file === file) return { present: true, path: found, version: known.version };
    const version = await deps.version(found, versionArgs);
    if (version !== null && file !== null) versions.set(found, { file, version });
    return { present: version !== null, path: found, version };
  }

  async function tools() {
    if (!cached || deps.now() - cached.at > cacheMs) {
      const [ytdlp, ffmpeg, confinement] = await Promise.all([
        tool(deps.tools.ytdlp, ['--version']),
        tool(deps.tools.ffmpeg, ['-version']),
        deps.checkConfinement(),
      ]);
      cached = { at: deps.now(), ytdlp, ffmpeg, confinement };
    }
    return cached;
  }

  function downloaderHealth(ytdlp: ToolState) {
    const released = releaseDateOf(ytdlp.version);
    const ageDays = released === null ? null : Math.max(0, Math.floor((deps.now() - released.getTime()) / DAY_MS));
    return {
      ...ytdlp,
      released_on: released === null ? null : released.toISOString().slice(0, 10),
      age_days: ageDays,
      outdated: ageDays !== null && ageDays > DOWNLOADER_MAX_AGE_DAYS,
    };
  }

  return async () => {
    const { ytdlp, ffmpeg, confinement } = await tools();
    const downloader = downloaderHealth(ytdlp);
    const databaseOk = await databaseAnswers();
    const writable = await fs.access(deps.artifactRoot, constants.W_OK).then(
      () => true,
      () => false,
    );
    const freeBytes = deps.storeSpace
      ? deps.storeSpace.freeBytes()
      : await fs.statfs(deps.artifactRoot).then(
          (s) => s.bavail * s.bsize,
          () => null,
        );
    const minFreeBytes = deps.storeSpace?.minFreeBytes ?? 0;
    const canStore = freeBytes === null || freeBytes >= minFreeBytes;
    const storedBytes = databaseOk && deps.storedBytes ? await withinTimeout(deps.storedBytes(), pingTimeoutMs) : null;
    const canFetch = ytdlp.present && ffmpeg.present && confinement.ok && databaseOk && writable;
    const warnings: HealthReport['warnings'] = [];
    if (downloader.outdated) {
      warnings.push({
        code: 'downloader_outdated',
        message: `yt-dlp ${downloader.version} is ${downloader.age_days} days old (more than ${DOWNLOADER_MAX_AGE_DAYS}): sites change, install a current release (docs/yt-dlp.md).`,
      });
    }
    if (!canStore) {
      warnings.push({
        code: 'store_low_on_space',
        message: `The artifact root's volume has ${freeBytes} bytes free, less than one job can need (STORE_MIN_FREE_BYTES, ${minFreeBytes}): this node takes no job until there is room. ${lowOnSpaceReason(minFreeBytes - freeBytes, storedBytes)}`,
      });
    }
    return {
      // Fetching works, but with the tools unconfined, or this node takes no job (no room to store
      // one): states to be seen, not failures of the service.
      status: !canFetch ? 'unavailable' : confinement.mode === 'off' || !canStore ? 'degraded' : 'ok',
      can_fetch: canFetch,
      downloader,
      ffmpeg,
      node_id: deps.nodeId,
      database: { ok: databaseOk, kind: deps.databaseKind },
      artifact_root: {
        writable,
        free_bytes: freeBytes,
        min_free_bytes: minFreeBytes,
        can_store: canStore,
        stored_bytes: storedBytes,
      },
      confinement: {
        mode: confinement.mode,
        ok: confinement.ok,
        reason: confinement.ok ? (confinement.mode === 'off' ? 'TOOL_CONFINEMENT=off' : null) : confinement.reason,
      },
      warnings,
    };
  };
}

/** Why a node is short of room: whether evicting the store's content can make up the `shortBytes`. */
function lowOnSpaceReason(shortBytes: number, storedBytes: number | null): string {
  if (storedBytes === null) return 'Eviction frees what it can of the store; the operator may free the rest.';
  if (storedBytes >= shortBytes)
    return `Eviction is making room: the store holds ${storedBytes} bytes of content, ${shortBytes} must go.`;
  return `Eviction cannot make room: the store holds ${storedBytes} bytes of content and ${shortBytes} must be freed; files that are not the store's fill the volume, and only the operator can remove them.`;
}

/** Which file `file` is, and as written: null when it cannot be read. */
async function fileIdentity(file: string): Promise<string | null> {
  const stat = await fs.stat(file, { bigint: true }).catch(() => null);
  return stat && `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeNs}:${stat.ctimeNs}`;
}

/** What `answer` settles to, or null once `ms` have passed first or when it fails. */
async function withinTimeout<T>(answer: Promise<T>, ms: number): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), ms);
  });
  return Promise.race([answer.catch(() => null), late]).finally(() => clearTimeout(timer));
}

/** The downloader as the metrics show it (src/metrics.ts MetricsSources), each scrape from a health check. */
export function downloaderMetrics(checkHealth: () => Promise<HealthReport>) {
  return {
    downloaderPresent: async () => (await checkHealth()).downloader.present,
    downloaderRelease: async () => {
      const { version, released_on: releasedOn } = (await checkHealth()).downloader;
      return version !== null && releasedOn !== null ? { version, releasedAtMs: Date.parse(releasedOn) } : null;
    },
  };
}

/**
 * The health check at start, in the log: its warnings each on a line, then its outcome (a warning
 * when the node cannot fetch); `tell` gets the report, for the plain words on standard error.
 */
export function logFirstHealthCheck(
  checkHealth: () => Promise<HealthReport>,
  log: Pick<Logger, 'info' | 'warn' | 'error'>,
  tell: (report: HealthReport) => void = () => {},
): void {
  void checkHealth().then(
    (report) => {
      for (const warning of report.warnings) log.warn({ code: warning.code }, warning.message);
      const outcome = {
        status: report.status,
        downloader: report.downloader.version,
        warnings: report.warnings.length,
      };
      if (report.can_fetch) log.info(outcome, 'first health check');
      else log.warn(outcome, 'first health check');
      tell(report);
    },
    (err: unknown) => log.error({ err }, 'the first health check failed'),
  );
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
