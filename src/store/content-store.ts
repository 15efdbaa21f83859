import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, existsSync, rmSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { artifactRelativePath, contentDirRelative } from './layout.js';

/**
 * Content-addressed files under the artifact root. A file's content id is the lowercase hex
 * SHA-256 of its bytes. Files enter atomically: copied or moved into <root>/.incoming, fsynced,
 * renamed onto their address, and the folder fsynced, so a crash leaves either nothing or the
 * whole file at its address, never a partial one. Identical bytes are stored once.
 *
 * A put pins its content id from the moment its hash is known until the caller releases it
 * (once the content is recorded, or given up): eviction never removes pinned content. Without
 * the pin, eviction of identical bytes stored earlier from another URL could remove the folder
 * the put is renaming into.
 */
export const INCOMING_DIR = '.incoming';

export interface StoredContent {
  contentId: string;
  bytes: number;
  /** True when the same bytes were already stored (from another URL, say). */
  reused: boolean;
  /** Ends the pin put() took; call it once, when the content is recorded or given up. */
  release(): void;
}

export interface ContentStore {
  readonly root: string;
  /**
   * Moves (or copies across file systems) `sourceFile` into the store under its content id.
   * When the same bytes are already stored, the source is left in place.
   */
  put(sourceFile: string, name: string): Promise<StoredContent>;
  /** True while a put of this content is under way or not yet released. */
  isPinned(contentId: string): boolean;
  /** Whether the file is stored; synchronous, for use inside a database transaction. */
  hasSync(contentId: string, name: string): boolean;
  /**
   * Removes a content id's folder; a reader that has a file open keeps reading it. Synchronous,
   * so that callers check "nothing refers to it" and remove with nothing in between.
   */
  removeSync(contentId: string): void;
  /** Removes one file of a content id. */
  removeArtifact(contentId: string, name: string): Promise<void>;
  pathOf(contentId: string, name: string): string;
  /** Removes leftovers of interrupted writes; called at start-up, before any job runs. */
  clearIncoming(): Promise<number>;
}

export async function sha256File(file: string): Promise<{ hex: string; bytes: number }> {
  const hash = createHash('sha256');
  let bytes = 0;
  await pipeline(createReadStream(file, { highWaterMark: 1024 * 1024 }), async function* (source) {
    for await (const chunk of source as AsyncIterable<Buffer>) {
      hash.update(chunk);
      bytes += chunk.length;
    }
  });
  return { hex: hash.digest('hex'), bytes };
}

async function fsyncPath(target: string, flags: string): Promise<void> {
  const handle = await fs.open(target, flags);
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export function createContentStore(root: string): ContentStore {
  const incoming = path.join(root, INCOMING_DIR);

  const pathOf = (contentId: string, name: string) => path.join(root, artifactRelativePath(contentId, name));
  /** Content id → number of puts holding it (the same bytes may be put by two jobs at once). */
  const pins = new Map<string, number>();

  function pin(contentId: string): () => void {
    pins.set(contentId, (pins.get(contentId) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = pins.get(contentId)! - 1;
      if (left === 0) pins.delete(contentId);
      else pins.set(contentId, left);
    };
  }

  async function stageFile(sourceFile: string): Promise<string> {
    await fs.mkdir(incoming, { recursive: true });
    const staged = path.join(incoming, `${Date.now()}-${randomBytes(8).toString('hex')}`);
    try {
      await fs.rename(sourceFile, staged);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
      await fs.copyFile(sourceFile, staged);
      await fs.rm(sourceFile, { force: true });
    }
    return staged;
  }

  return {
    root,
    pathOf,

    async put(sourceFile, name) {
      const { hex: contentId, bytes } = await sha256File(sourceFile);
      const release = pin(contentId);
      try {
        const target = pathOf(contentId, name);
        const existing = await fs.stat(target).catch(() => null);
        // Already stored: the source stays where it is (its owner removes it).
        if (existing?.isFile() && existing.size === bytes) return { contentId, bytes, reused: true, release };
        const staged = await stageFile(sourceFile);
        try {
          await fsyncPath(staged, 'r');
          const dir = path.join(root, contentDirRelative(contentId));
          await fs.mkdir(dir, { recursive: true });
          await fs.rename(staged, target);
          await fsyncPath(dir, 'r');
          await fsyncPath(path.dirname(dir), 'r');
        } catch (err) {
          await fs.rm(staged, { force: true });
          throw err;
        }
        return { contentId, bytes, reused: false, release };
      } catch (err) {
        release();
        throw err;
      }
    },

    isPinned(contentId) {
      return pins.has(contentId);
    },

    hasSync(contentId, name) {
      return existsSync(pathOf(contentId, name));
    },

    removeSync(contentId) {
      rmSync(path.join(root, contentDirRelative(contentId)), { recursive: true, force: true });
    },

    async removeArtifact(contentId, name) {
      await fs.rm(pathOf(contentId, name), { force: true });
    },

    async clearIncoming() {
      const entries = await fs.readdir(incoming).catch(() => [] as string[]);
      await Promise.all(entries.map((entry) => fs.rm(path.join(incoming, entry), { recursive: true, force: true })));
      return entries.length;
    },
  };
}
