/**
 * A real database (SQLite in the temp folder by default, or a fresh PostgreSQL database) and a
 * real artifact root in a temp folder, for unit tests of the store: `addArtifact` writes a file
 * at its content address and records its cache row, the way a finished job does. The store pins
 * content in the database, as the service's does. Made inside a test, and closed (database,
 * temp folder) when that test ends.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { onTestFinished } from 'vitest';
import type { DatabaseKind } from '../../src/db/database.js';
import { setAlias } from '../../src/store/aliases.js';
import { recordCacheEntry, SOURCE_WAV_KIND, WAVEFORM_PEAKS_KIND } from '../../src/store/cache-entries.js';
import { createContentStore, type ContentStore } from '../../src/store/content-store.js';
import { AUDIO_ARTIFACT_NAME, PEAKS_ARTIFACT_NAME } from '../../src/store/layout.js';
import { createDatabasePins } from '../../src/store/pins.js';
import { openTestDatabase, type TestDatabase } from './test-database.js';

export interface StoreFixture {
  dir: string;
  database: TestDatabase;
  store: ContentStore;
  /** Writes `bytes` random bytes as a stored artifact used at `usedAt`, with a URL alias. */
  addArtifact(bytes: number, usedAt: number, url?: string): Promise<string>;
  /** Writes `bytes` bytes as the content's peaks.json, with its cache row used at `usedAt`. */
  addPeaks(contentId: string, bytes: number, usedAt: number): Promise<void>;
  /** Sum of the sizes of the files under the artifact root's content folders. */
  bytesOnDisk(): Promise<number>;
  contentIdsOnDisk(): Promise<string[]>;
}

export async function createStoreFixture(
  kind: DatabaseKind = 'sqlite',
  /**
   * `database`: one of `kind` opened by the caller (closed with the fixture), instead of a fresh
   * test database; `parent`: where the fixture's folder (its artifact root) is made, instead of the
   * system's temp folder.
   */
  opts: { now?: () => number; database?: TestDatabase; parent?: string } = {},
): Promise<StoreFixture> {
  const dir = await mkdtemp(path.join(opts.parent ?? tmpdir(), 'sf-store-'));
  const database = opts.database ?? (await openTestDatabase(kind));
  onTestFinished(async () => {
    await database.close();
    await rm(dir, { recursive: true, force: true });
  });
  let holders = 0;
  const store = createContentStore(
    path.join(dir, 'artifacts'),
    createDatabasePins({ database, holder: () => `test:${++holders}`, now: opts.now ?? Date.now }),
    'test-node',
  );
  await mkdir(store.root, { recursive: true });

  async function walk(): Promise<Array<{ contentId: string; size: number }>> {
    const found: Array<{ contentId: string; size: number }> = [];
    for (const shard of await readdir(store.root)) {
      if (!/^[0-9a-f]{2}$/.test(shard)) continue;
      for (const contentId of await readdir(path.join(store.root, shard))) {
        for (const name of await readdir(path.join(store.root, shard, contentId))) {
          found.push({ contentId, size: (await stat(path.join(store.root, shard, contentId, name))).size });
        }
      }
    }
    return found;
  }

  return {
    dir,
    database,
    store,
    async addArtifact(bytes, usedAt, url) {
      const data = randomBytes(bytes);
      const contentId = createHash('sha256').update(data).digest('hex');
      const file = store.pathOf(contentId, AUDIO_ARTIFACT_NAME);
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(file, data);
      await recordCacheEntry(
        database,
        {
          contentId,
          name: AUDIO_ARTIFACT_NAME,
          kind: SOURCE_WAV_KIND,
          bytes,
          contentType: 'audio/wav',
          sampleRate: 44100,
          channels: 2,
          durationS: 1,
        },
        usedAt,
      );
      if (url) await setAlias(database, 'url', url, contentId, usedAt);
      return contentId;
    },
    async addPeaks(contentId, bytes, usedAt) {
      await writeFile(store.pathOf(contentId, PEAKS_ARTIFACT_NAME), Buffer.alloc(bytes, 0x20));
      await recordCacheEntry(
        database,
        {
          contentId,
          name: PEAKS_ARTIFACT_NAME,
          kind: WAVEFORM_PEAKS_KIND,
          bytes,
          contentType: 'application/json',
          sampleRate: null,
          channels: null,
          durationS: null,
        },
        usedAt,
      );
    },
    async bytesOnDisk() {
      return (await walk()).reduce((sum, file) => sum + file.size, 0);
    },
    async contentIdsOnDisk() {
      return (await walk()).map((file) => file.contentId).sort();
    },
  };
}
