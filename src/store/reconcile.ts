import fs from 'node:fs/promises';
import path from 'node:path';
import { and, eq, notInArray } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { openRegularFile } from '../tools/regular-file.js';
import { parseWavHeader } from '../tools/wav.js';
import { SOURCE_WAV_KIND, WAVEFORM_PEAKS_KIND } from './cache-entries.js';
import { sha256File, type ContentStore } from './content-store.js';
import { clearEvicted, evictedAt, markEvicted } from './evicted.js';
import { removeUnrecorded } from './eviction.js';
import { AUDIO_ARTIFACT_NAME, isContentId, PEAKS_ARTIFACT_NAME } from './layout.js';
import { MAX_PEAKS_JSON_BYTES } from '../audio/peaks.js';
import { pinnedAmong } from './pins.js';

/**
 * Start-up reconciliation of the store with its cache rows:
 *  - the files of content marked evicted (./evicted.ts) whose WAV has no row are removed: its
 *    eviction committed, and the node stopped before it removed them (./eviction.ts);
 *  - else a file with no row is adopted when its bytes hash to its content id and it is a WAV the
 *    service made (a crash between store and commit), else removed; a peaks.json with no row is
 *    adopted beside its content's WAV (with the WAV's last use) when it reads as peaks, else removed;
 *  - a row whose file is gone is dropped; a WAV's with every other row and file of its content
 *    (its content marked evicted, ./evicted.ts), a peaks.json's alone (the WAV stays, without peaks);
 *  - aliases to content that has no row are cleared.
 * Content pinned by a put (on this or another node sharing the store) is left alone: its row is
 * on its way. The caller makes sure one node at a time runs it.
 */
export interface ReconcileCounts {
  adopted: number;
  filesRemoved: number;
  rowsDropped: number;
  aliasesCleared: number;
}

export async function reconcileStore(deps: {
  database: Database;
  store: ContentStore;
  now: () => number;
}): Promise<ReconcileCounts> {
  const { cacheEntries, aliases } = deps.database.t;
  const counts: ReconcileCounts = { adopted: 0, filesRemoved: 0, rowsDropped: 0, aliasesCleared: 0 };
  /** Each row's last use, by `<content id>/<name>`. */
  const lastUse = new Map(
    (
      await deps.database.db
        .select({ contentId: cacheEntries.contentId, name: cacheEntries.name, lastUsedAt: cacheEntries.lastUsedAt })
        .from(cacheEntries)
    ).map((row) => [`${row.contentId}/${row.name}`, Number(row.lastUsedAt)]),
  );
  const rows = new Set(lastUse.keys());
  const seen = new Set<string>();

  for (const shard of await fs.readdir(deps.store.root).catch(() => [] as string[])) {
    if (!/^[0-9a-f]{2}$/.test(shard)) continue;
    const shardDir = path.join(deps.store.root, shard);
    for (const contentId of await fs.readdir(shardDir).catch(() => [] as string[])) {
      const contentDir = path.join(shardDir, contentId);
      if (!isContentId(contentId) || !contentId.startsWith(shard)) {
        await fs.rm(contentDir, { recursive: true, force: true });
        counts.filesRemoved++;
        continue;
      }
      // The WAV first: a peaks.json is adopted only beside a WAV that has its row.
      const names = (await fs.readdir(contentDir).catch(() => [] as string[])).sort(
        (a, b) => Number(b === AUDIO_ARTIFACT_NAME) - Number(a === AUDIO_ARTIFACT_NAME),
      );
      if (names.some((name) => !rows.has(`${contentId}/${name}`))) {
        if ((await pinnedAmong(deps.database, [contentId], deps.now())).size > 0) {
          for (const name of names) seen.add(`${contentId}/${name}`);
          continue;
        }
        if (
          !rows.has(`${contentId}/${AUDIO_ARTIFACT_NAME}`) &&
          (await evictedAt(deps.database, [contentId])).size > 0
        ) {
          const removed = await removeUnrecorded({ ...deps, contentIds: [contentId] });
          if (removed.length > 0) counts.filesRemoved += names.length;
          continue;
        }
      }
      for (const name of names) {
        const key = `${contentId}/${name}`;
        if (rows.has(key)) {
          seen.add(key);
        } else if (
          name === PEAKS_ARTIFACT_NAME
            ? await adoptPeaks(deps, contentId, lastUse.get(`${contentId}/${AUDIO_ARTIFACT_NAME}`))
            : await adopt(deps, contentId, name)
        ) {
          seen.add(key);
          if (name === AUDIO_ARTIFACT_NAME) lastUse.set(key, 0);
          counts.adopted++;
        } else {
          await fs.rm(path.join(contentDir, name), { recursive: true, force: true });
          counts.filesRemoved++;
        }
      }
      await fs.rmdir(contentDir).catch(() => {}); // only if now empty
    }
  }

  const missing = [...rows].filter((key) => !seen.has(key));
  if (missing.length > 0) {
    // A content whose WAV is gone goes whole; a file derived from it can go alone.
    const goneContents = [
      ...new Set(missing.filter((key) => key.endsWith(`/${AUDIO_ARTIFACT_NAME}`)).map((key) => key.split('/')[0]!)),
    ];
    counts.rowsDropped = await deps.database.transaction(async (q) => {
      let dropped = 0;
      for (const key of missing) {
        const [contentId, name] = key.split('/') as [string, string];
        const gone = await q.db
          .delete(q.t.cacheEntries)
          .where(and(eq(q.t.cacheEntries.contentId, contentId), eq(q.t.cacheEntries.name, name)))
          .returning({ name: q.t.cacheEntries.name });
        dropped += gone.length;
      }
      for (const contentId of goneContents) {
        const rest = await q.db
          .delete(q.t.cacheEntries)
          .where(eq(q.t.cacheEntries.contentId, contentId))
          .returning({ name: q.t.cacheEntries.name });
        dropped += rest.length;
        deps.store.removeSync(contentId);
      }
      // Their jobs' records say the content is gone, as after an eviction.
      await markEvicted(q, goneContents, deps.now());
      return dropped;
    });
  }
  const cleared = await deps.database.db
    .delete(aliases)
    .where(
      notInArray(aliases.contentId, deps.database.db.select({ contentId: cacheEntries.contentId }).from(cacheEntries)),
    )
    .returning({ key: aliases.key });
  counts.aliasesCleared = cleared.length;
  return counts;
}

async function adopt(
  deps: { database: Database; store: ContentStore; now: () => number },
  contentId: string,
  name: string,
): Promise<boolean> {
  if (name !== AUDIO_ARTIFACT_NAME) return false;
  const file = deps.store.pathOf(contentId, name);
  try {
    const { hex, bytes } = await sha256File(file);
    if (hex !== contentId) return false;
    const handle = await openRegularFile(file);
    let header;
    try {
      const buf = Buffer.alloc(64 * 1024);
      const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
      header = parseWavHeader(buf.subarray(0, bytesRead));
    } finally {
      await handle.close();
    }
    const at = deps.now();
    await deps.database.db
      .insert(deps.database.t.cacheEntries)
      .values({
        contentId,
        name,
        kind: SOURCE_WAV_KIND,
        bytes,
        contentType: 'audio/wav',
        sampleRate: header.sampleRate,
        channels: header.channels,
        durationS: header.durationS,
        createdAt: at,
        // Adopted content is the coldest: it was never served under this row.
        lastUsedAt: 0,
      })
      .onConflictDoNothing();
    await clearEvicted(deps.database, contentId);
    return true;
  } catch {
    return false;
  }
}

/** A peaks.json beside a WAV that has its row (`wavLastUse`): recorded with the WAV's last use, so they stay one content. */
async function adoptPeaks(
  deps: { database: Database; store: ContentStore; now: () => number },
  contentId: string,
  wavLastUse: number | undefined,
): Promise<boolean> {
  if (wavLastUse === undefined) return false;
  const file = deps.store.pathOf(contentId, PEAKS_ARTIFACT_NAME);
  try {
    const { size } = await fs.stat(file);
    if (size > MAX_PEAKS_JSON_BYTES) return false;
    const peaks = JSON.parse(await fs.readFile(file, 'utf8')) as { version?: unknown; data?: unknown };
    if (peaks.version !== 2 || !Array.isArray(peaks.data)) return false;
    await deps.database.db
      .insert(deps.database.t.cacheEntries)
      .values({
        contentId,
        name: PEAKS_ARTIFACT_NAME,
        kind: WAVEFORM_PEAKS_KIND,
        bytes: size,
        contentType: 'application/json',
        sampleRate: null,
        channels: null,
        durationS: null,
        createdAt: deps.now(),
        lastUsedAt: wavLastUse,
      })
      .onConflictDoNothing();
    return true;
  } catch {
    return false;
  }
}
