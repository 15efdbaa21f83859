import fs from 'node:fs/promises';
import path from 'node:path';
import { and, eq, notInArray } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { parseWavHeader } from '../tools/wav.js';
import { SOURCE_WAV_KIND } from './cache-entries.js';
import { sha256File, type ContentStore } from './content-store.js';
import { clearEvicted, markEvicted } from './evicted.js';
import { AUDIO_ARTIFACT_NAME, isContentId } from './layout.js';
import { pinnedAmong } from './pins.js';

/**
 * Start-up reconciliation of the store with its cache rows:
 *  - a file with no row is adopted when its bytes hash to its content id and it is a WAV the
 *    service made (a crash between store and commit), else removed;
 *  - a row whose file is gone is dropped (its content marked evicted, ./evicted.ts);
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
  const rows = new Set(
    (
      await deps.database.db.select({ contentId: cacheEntries.contentId, name: cacheEntries.name }).from(cacheEntries)
    ).map((row) => `${row.contentId}/${row.name}`),
  );
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
      const names = await fs.readdir(contentDir).catch(() => [] as string[]);
      if (
        names.some((name) => !rows.has(`${contentId}/${name}`)) &&
        (await pinnedAmong(deps.database, [contentId], deps.now())).size > 0
      ) {
        for (const name of names) seen.add(`${contentId}/${name}`);
        continue;
      }
      for (const name of names) {
        const key = `${contentId}/${name}`;
        if (rows.has(key)) {
          seen.add(key);
        } else if (await adopt(deps, contentId, name)) {
          seen.add(key);
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
    await deps.database.transaction(async (q) => {
      for (const key of missing) {
        const [contentId, name] = key.split('/') as [string, string];
        await q.db
          .delete(q.t.cacheEntries)
          .where(and(eq(q.t.cacheEntries.contentId, contentId), eq(q.t.cacheEntries.name, name)));
      }
      // Their jobs' records say the content is gone, as after an eviction.
      await markEvicted(q, [...new Set(missing.map((key) => key.split('/')[0]!))], deps.now());
    });
    counts.rowsDropped = missing.length;
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
    const handle = await fs.open(file, 'r');
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
