import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, renameSync, rmdirSync, rmSync, type BigIntStats } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { and, asc, eq, sql } from 'drizzle-orm';
import type { Database, Queryable } from '../db/database.js';
import type { Logger } from '../logger.js';
import { TOOL_FILE_FLAGS } from '../tools/regular-file.js';
import { cacheEntryFor } from './cache-entries.js';
import type { ContentStore } from './content-store.js';
import { markEvicted } from './evicted.js';
import { AUDIO_ARTIFACT_NAME, contentDirRelative } from './layout.js';
import { lockContent, pinnedAmong } from './pins.js';
import type { ReadPacer } from './read-pacer.js';

/**
 * One scrub pass over the store: every WAV that has a cache row is read whole (paced by `pacer`,
 * through one buffer) and its SHA-256 compared with its content id. Files derived from a WAV (its
 * peaks.json) have no hash of their own to check: they go with their WAV.
 *
 *  - corrupt (the bytes hash to something else): its content's rows go, with its aliases (so the
 *    next submission of its URL downloads it again), and the content is marked evicted (its jobs'
 *    records say it is gone); the WAV moves out of its address into `quarantineDir`, kept for an
 *    operator to look at, and the files derived from it are removed (drawn from corrupt bytes,
 *    and made again with them). Delivery then finds no file: 404.
 *  - missing (a row whose file is gone) and unreadable (a read error of that file alone): only
 *    reported. A submission stores a missing file again; start-up reconciliation drops its row.
 *    A volume that is not mounted looks like every file missing, and must not empty the index.
 *
 * Nothing is reported or moved on a read alone: the finding is checked again under the content's
 * 'remove' lock (./pins.ts), as eviction removes content, and only there acted on. There:
 *  - a row gone meanwhile was evicted while it was read: nothing to report;
 *  - a file that is not the one read (another inode, size or change time: replaced by a put,
 *    written to in place) is read again;
 *  - pinned content is being stored by a put on some node, which may be reusing this very file:
 *    a corrupt one is reported but left in place (`deferred`) for the next pass, a missing one
 *    is on its way and read again.
 * The file leaves its address last, still under the lock, so no put can pin the content and
 * find the corrupt file there, and no born-done job can take it up.
 */
export type ScrubProblem = 'corrupt' | 'missing' | 'unreadable';

export interface ScrubFinding {
  contentId: string;
  name: string;
  problem: ScrubProblem;
  /** corrupt: the SHA-256 of the bytes read. */
  sha256: string | null;
  /** unreadable: the error code of the read. */
  error: string | null;
  /** quarantined: moved to quarantineDir; deferred: corrupt but pinned, left for the next pass; none: reported only. */
  action: 'quarantined' | 'deferred' | 'none';
  /** Where under the quarantine folder: `<content id>.<unix ms>/<name>`. */
  quarantinedAs: string | null;
}

/** What a pass has done so far; counts are exact, `findings` lists the first MAX_FINDINGS_LISTED. */
export interface ScrubProgress {
  /** Artifacts read whole and compared. */
  checked: number;
  bytesRead: number;
  corrupt: number;
  /** Corrupt artifacts moved to the quarantine folder. */
  moved: number;
  missing: number;
  unreadable: number;
  findings: ScrubFinding[];
}

export const MAX_FINDINGS_LISTED = 1000;
/** Where a corrupt file waits inside the artifact root when the quarantine folder is on another file system. */
export const QUARANTINE_STAGING_DIR = '.quarantine';
const BATCH_ROWS = 100;
/** Reads of one artifact whose file changed each time before it was given up for this pass. */
const MAX_READS = 3;
/** Errors that concern the file read alone; any other (EMFILE, say) ends the pass. */
const UNREADABLE = new Set(['EIO', 'EISDIR', 'ELOOP', 'EACCES', 'EPERM', 'EINVAL', 'ENXIO', 'ESTALE']);

const FINDING_MESSAGES = {
  quarantined:
    'store scrub: a stored file does not hash to its content id: moved to the quarantine folder, its row and aliases dropped',
  deferred:
    'store scrub: a stored file does not hash to its content id, but a job is storing that content now: left for the next pass',
  missing: 'store scrub: a cache row names a file that is gone',
  unreadable: 'store scrub: a stored file cannot be read',
  corrupt: 'store scrub: a stored file does not hash to its content id',
} as const;

export function emptyProgress(): ScrubProgress {
  return { checked: 0, bytesRead: 0, corrupt: 0, moved: 0, missing: 0, unreadable: 0, findings: [] };
}

export interface ScrubDeps {
  database: Database;
  store: Pick<ContentStore, 'root' | 'pathOf'>;
  quarantineDir: string;
  /** Wall-clock milliseconds: pins' expiry, evicted marks, quarantine names. */
  now: () => number;
  pacer: ReadPacer;
  /** The one read buffer of the pass. */
  buffer: Buffer;
  signal: AbortSignal;
  log: Logger;
  onRead?: (bytes: number) => void;
  onChecked?: () => void;
  onFinding?: (finding: ScrubFinding) => void;
  /** Awaited before each artifact (the scrubber renews its lease there). */
  beforeEach?: () => Promise<void>;
}

/** Checks every artifact with a cache row, in (content id, name) order, into `progress`. */
export async function scrubStore(deps: ScrubDeps, progress: ScrubProgress): Promise<void> {
  let cursor: { contentId: string; name: string } | undefined;
  for (;;) {
    const rows = await rowsAfter(deps.database, cursor);
    if (rows.length === 0) return;
    for (const row of rows) {
      deps.signal.throwIfAborted();
      await deps.beforeEach?.();
      await checkArtifact(deps, row, progress);
      cursor = row;
    }
  }
}

function rowsAfter(q: Queryable, cursor: { contentId: string; name: string } | undefined) {
  const { cacheEntries } = q.t;
  return q.db
    .select({ contentId: cacheEntries.contentId, name: cacheEntries.name })
    .from(cacheEntries)
    .where(
      and(
        eq(cacheEntries.name, AUDIO_ARTIFACT_NAME),
        cursor
          ? sql`(${cacheEntries.contentId}, ${cacheEntries.name}) > (${cursor.contentId}, ${cursor.name})`
          : undefined,
      ),
    )
    .orderBy(asc(cacheEntries.contentId), asc(cacheEntries.name))
    .limit(BATCH_ROWS);
}

/**
 * What reading an artifact found: its SHA-256 (null when what is at its path is a link, a FIFO, a
 * socket or a device: corrupt, never followed nor read), missing, or a read that failed (a folder
 * where the file should be, say).
 */
type ReadOutcome =
  | { kind: 'read'; sha256: string | null; file: BigIntStats }
  | { kind: 'missing' }
  | { kind: 'unreadable'; code: string };

async function checkArtifact(
  deps: ScrubDeps,
  row: { contentId: string; name: string },
  progress: ScrubProgress,
): Promise<void> {
  const file = deps.store.pathOf(row.contentId, row.name);
  for (let reads = 1; ; reads++) {
    const read = await readArtifact(deps, file, progress);
    if (read.kind === 'read' && read.sha256 === row.contentId) {
      progress.checked++;
      deps.onChecked?.();
      return;
    }
    const settled = await settle(deps, row, file, read);
    if (settled === 'gone') return;
    if (settled === 'changed') {
      if (reads < MAX_READS) continue;
      deps.log.warn(
        { content_id: row.contentId, name: row.name },
        'store scrub: the file changed, or was being stored, each time it was read; left for the next pass',
      );
      return;
    }
    if (read.kind === 'read') {
      progress.checked++;
      deps.onChecked?.();
    }
    const finding: ScrubFinding = {
      contentId: row.contentId,
      name: row.name,
      problem: read.kind === 'read' ? 'corrupt' : read.kind,
      sha256: read.kind === 'read' ? read.sha256 : null,
      error: read.kind === 'unreadable' ? read.code : null,
      action: settled === 'found' ? 'none' : settled === 'deferred' ? 'deferred' : 'quarantined',
      quarantinedAs: typeof settled === 'object' ? settled.quarantinedAs : null,
    };
    if (typeof settled === 'object' && settled.staged) await leaveStaging(deps, settled.staged, settled.quarantinedAs);
    record(deps, progress, finding);
    return;
  }
}

function record(deps: ScrubDeps, progress: ScrubProgress, finding: ScrubFinding): void {
  progress[finding.problem]++;
  if (finding.action === 'quarantined') progress.moved++;
  if (progress.findings.length < MAX_FINDINGS_LISTED) progress.findings.push(finding);
  deps.onFinding?.(finding);
  const fields = {
    content_id: finding.contentId,
    name: finding.name,
    problem: finding.problem,
    sha256: finding.sha256,
    error: finding.error,
    action: finding.action,
    quarantined_to: finding.quarantinedAs && path.join(deps.quarantineDir, finding.quarantinedAs),
  };
  deps.log.error(fields, FINDING_MESSAGES[finding.action === 'none' ? finding.problem : finding.action]);
}

/**
 * Hashes the file through the pass's buffer, paced; its identity is taken from the open descriptor.
 * Opened as a tool's output is (../tools/regular-file.ts): what is not a regular file is corrupt.
 */
async function readArtifact(deps: ScrubDeps, file: string, progress: ScrubProgress): Promise<ReadOutcome> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, TOOL_FILE_FLAGS);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const found = code === 'ELOOP' || code === 'ENXIO' ? lstatOrNull(file) : null;
    if (found !== null) return { kind: 'read', sha256: null, file: found };
    return failedRead(err);
  }
  try {
    const stats = await handle.stat({ bigint: true });
    if (!stats.isFile() && !stats.isDirectory()) return { kind: 'read', sha256: null, file: stats };
    const hash = createHash('sha256');
    for (;;) {
      deps.signal.throwIfAborted();
      const { bytesRead } = await handle.read(deps.buffer, 0, deps.buffer.length, null);
      if (bytesRead === 0) break;
      hash.update(deps.buffer.subarray(0, bytesRead));
      progress.bytesRead += bytesRead;
      deps.onRead?.(bytesRead);
      await deps.pacer.take(bytesRead, deps.signal);
    }
    return { kind: 'read', sha256: hash.digest('hex'), file: stats };
  } catch (err) {
    return failedRead(err);
  } finally {
    await handle.close();
  }
}

function failedRead(err: unknown): ReadOutcome {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT' || code === 'ENOTDIR') return { kind: 'missing' };
  if (code !== undefined && UNREADABLE.has(code)) return { kind: 'unreadable', code };
  throw err;
}

type Settled = 'gone' | 'changed' | 'deferred' | 'found' | { quarantinedAs: string; staged: string | null };

/** The read's finding checked again, and for a corrupt file acted on, under the content's lock. */
function settle(
  deps: ScrubDeps,
  row: { contentId: string; name: string },
  file: string,
  read: ReadOutcome,
): Promise<Settled> {
  const { contentId, name } = row;
  return deps.database.transaction(async (q): Promise<Settled> => {
    await lockContent(q, [contentId], 'remove');
    if (!(await cacheEntryFor(q, contentId, name))) return 'gone';
    const onDisk = lstatOrNull(file);
    const pinned = (await pinnedAmong(q, [contentId], deps.now())).size > 0;
    if (read.kind === 'missing') return onDisk !== null || pinned ? 'changed' : 'found';
    if (read.kind === 'unreadable') return 'found';
    if (onDisk === null || !sameFile(onDisk, read.file)) return 'changed';
    if (pinned) return 'deferred';

    const { cacheEntries, aliases } = q.t;
    await q.db.delete(cacheEntries).where(eq(cacheEntries.contentId, contentId));
    await q.db.delete(aliases).where(eq(aliases.contentId, contentId));
    await markEvicted(q, [contentId], deps.now());
    // Last: a failure here takes the rows back with the transaction.
    const moved = moveAside(deps, contentId, name, file);
    // What is left in the folder was derived from the corrupt WAV.
    rmSync(path.join(deps.store.root, contentDirRelative(contentId)), { recursive: true, force: true });
    return moved;
  });
}

/**
 * Renames the file into the quarantine folder; when that is on another file system, into the
 * artifact root's staging folder first (a rename, so it leaves its address at once), to be copied
 * over after the transaction (leaveStaging).
 */
function moveAside(
  deps: ScrubDeps,
  contentId: string,
  name: string,
  file: string,
): { quarantinedAs: string; staged: string | null } {
  const quarantinedAs = `${contentId}.${deps.now()}/${name}`;
  const target = path.join(deps.quarantineDir, quarantinedAs);
  mkdirSync(path.dirname(target), { recursive: true });
  try {
    renameSync(file, target);
    return { quarantinedAs, staged: null };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
  }
  rmdirSync(path.dirname(target));
  const staged = path.join(deps.store.root, QUARANTINE_STAGING_DIR, quarantinedAs);
  mkdirSync(path.dirname(staged), { recursive: true });
  renameSync(file, staged);
  return { quarantinedAs, staged };
}

/** Copies a staged file into the quarantine folder and removes it; on failure it stays staged (logged). */
async function leaveStaging(deps: ScrubDeps, staged: string, quarantinedAs: string): Promise<void> {
  const target = path.join(deps.quarantineDir, quarantinedAs);
  try {
    await fs.mkdir(path.dirname(target), { recursive: true });
    await fs.copyFile(staged, target);
    await fs.rm(path.dirname(staged), { recursive: true, force: true });
  } catch (err) {
    deps.log.error(
      { err, staged, target },
      'store scrub: a quarantined file could not be copied to the quarantine folder; it stays where it was staged',
    );
  }
}

function lstatOrNull(file: string): BigIntStats | null {
  try {
    return lstatSync(file, { bigint: true });
  } catch {
    return null;
  }
}

/** The same file, unchanged: same inode, size, and modification and change times. */
function sameFile(a: BigIntStats, b: BigIntStats): boolean {
  return a.dev === b.dev && a.ino === b.ino && a.size === b.size && a.mtimeNs === b.mtimeNs && a.ctimeNs === b.ctimeNs;
}
