import { createHash, randomBytes } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { openRegularFile } from '../tools/regular-file.js';
import { artifactRelativePath, contentDirRelative } from './layout.js';

/**
 * Content-addressed files under the artifact root, which may be a folder shared by many nodes (a
 * POSIX volume with atomic rename). A file's content id is the lowercase hex SHA-256 of its bytes.
 * Files enter atomically: copied or moved into <root>/.incoming under a name no other node uses,
 * fsynced, renamed onto their address, and the folder fsynced, so a crash leaves either nothing or
 * the whole file at its address, never a partial one. A put flushes its file to disk while it
 * hashes it (a move keeps the file's inode, so that flush is the staged file's): the disk's write
 * overlaps the hash instead of following it. Identical bytes are stored once; two nodes storing
 * them at once both rename complete, identical files onto the address.
 *
 * A put reads its source through one descriptor, opened as a tool's output is
 * (../tools/regular-file.ts: a regular file, no link followed, never blocking): the bytes hashed
 * are the bytes flushed, and the file moved in is checked to be that file (same inode), so only
 * a regular file whose bytes hash to its address ever enters the store.
 *
 * A put pins its content id (through `pins`, which the database keeps for every node) from the
 * moment its hash is known until the caller releases it (once the content is recorded, or given
 * up): eviction never removes pinned content. Without the pin, eviction of identical bytes stored
 * earlier from another URL could remove the folder the put is renaming into.
 */
export const INCOMING_DIR = '.incoming';
/** Staged files older than this are leftovers of a node that died while storing. */
const STALE_INCOMING_MS = 60 * 60 * 1000;

export interface ContentPins {
  /** Pins a content id: `holder` names the pin (its row, for pins in the database), `unpin` ends it. */
  pin(contentId: string): Promise<{ holder: string; unpin: () => Promise<void> }>;
}

export interface StoredContent {
  contentId: string;
  bytes: number;
  /** True when the same bytes were already stored (from another URL, say). */
  reused: boolean;
  /** The holder of put()'s pin, so that the transaction that records the content can end it too. */
  pin: string;
  /** Ends the pin put() took; call it when the content is recorded or given up (later calls do nothing). */
  release(): Promise<void>;
}

export interface ContentStore {
  readonly root: string;
  /**
   * Moves (or copies across file systems) `sourceFile` into the store under its content id.
   * When the same bytes are already stored, the source is left in place. A put that throws has
   * added nothing, but for EnteredButFailed (its file at its address, still pinned).
   */
  put(sourceFile: string, name: string, observer?: ByteObserver): Promise<StoredContent>;
  /**
   * Stores `bytes` as the file `name` of a content id already stored (a file derived from it, such
   * as its waveform peaks), atomically like put. Call while the content is pinned (between put
   * and release). A file already there is left as it is. Returns the size of the file stored.
   */
  putDerived(contentId: string, name: string, bytes: Buffer): Promise<number>;
  /** Whether the file is stored; synchronous, for use inside a database transaction. */
  hasSync(contentId: string, name: string): boolean;
  /**
   * Removes a content id's folder, or only its file `name`; a reader that has a file open keeps
   * reading it. Synchronous, so that callers check "nothing refers to it" and remove with nothing
   * in between.
   */
  removeSync(contentId: string, name?: string): void;
  pathOf(contentId: string, name: string): string;
  /**
   * Removes leftovers of interrupted writes: those staged by a writer that `isGone` says is dead,
   * and any old enough that no live node can still be writing it.
   */
  clearIncoming(now: number, isGone: (writer: string) => boolean): Promise<number>;
}

/**
 * A put that failed after its file reached its address (a flush of the folder refused, say): the
 * file is there, whole but not known durable. `stored` still pins it, for the caller to take back
 * what it added (it may not remove bytes another put holds, or a row names).
 */
export class EnteredButFailed extends Error {
  constructor(
    readonly stored: StoredContent,
    cause: unknown,
  ) {
    super('the stored file could not be made durable', { cause });
  }
}

/** Sees a file's bytes in order as they are hashed (the one read of them), e.g. a peaks accumulator. */
export interface ByteObserver {
  update(chunk: Buffer): void;
}

const HASH_CHUNK_BYTES = 1024 * 1024;

/** The SHA-256 of a regular file (../tools/regular-file.ts), and its size. */
export async function sha256File(file: string, observer?: ByteObserver): Promise<{ hex: string; bytes: number }> {
  const handle = await openRegularFile(file);
  try {
    return await sha256Of(handle, observer);
  } finally {
    await handle.close();
  }
}

/** The SHA-256 of an open file's bytes, from its first, and their count. */
async function sha256Of(handle: fs.FileHandle, observer?: ByteObserver): Promise<{ hex: string; bytes: number }> {
  const hash = createHash('sha256');
  // Two buffers, read into again and again (a file of any size allocates nothing more): the next
  // chunk is read on libuv's pool while this thread hashes the current one.
  let current = Buffer.allocUnsafe(HASH_CHUNK_BYTES);
  let next = Buffer.allocUnsafe(HASH_CHUNK_BYTES);
  let bytes = 0;
  let reading: Promise<{ bytesRead: number }> | undefined = handle.read(current, 0, HASH_CHUNK_BYTES, 0);
  try {
    for (;;) {
      const { bytesRead } = await reading;
      reading = undefined;
      if (bytesRead === 0) break;
      const chunk = current.subarray(0, bytesRead);
      bytes += bytesRead;
      reading = handle.read(next, 0, HASH_CHUNK_BYTES, bytes);
      hash.update(chunk);
      observer?.update(chunk);
      [current, next] = [next, current];
    }
  } finally {
    // A read still under way writes into a buffer of ours and uses the descriptor: it ends first.
    await reading?.catch(() => undefined);
  }
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

/** Thrown by enter() for a failure after the rename: the file is at its address. */
class AtItsAddress extends Error {
  constructor(readonly reason: unknown) {
    super('failed after the rename');
  }
}

/** A staged file's name: its writer (a node id), then a time and a random part. */
const STAGED_NAME = /^(.+)\.\d+\.[0-9a-f]{24}$/;

/**
 * `writer` names this node in the files it stages, so that a node starting where a dead one was
 * can remove that one's leftovers at once, while a live neighbour's stay.
 */
export function createContentStore(root: string, pins: ContentPins, writer: string): ContentStore {
  const incoming = path.join(root, INCOMING_DIR);

  const pathOf = (contentId: string, name: string) => path.join(root, artifactRelativePath(contentId, name));

  async function pin(contentId: string): Promise<{ holder: string; release: () => Promise<void> }> {
    const { holder, unpin } = await pins.pin(contentId);
    let released = false;
    return {
      holder,
      release: async () => {
        if (released) return;
        released = true;
        await unpin();
      },
    };
  }

  /**
   * The file in .incoming, and whether it is the source moved (its inode, so its flush, unchanged)
   * or a copy. `source` is the descriptor the put hashed: a file moved in must be that one (a path
   * swapped since is refused), and a copy is made from it.
   */
  async function stageFile(
    sourceFile: string,
    source: fs.FileHandle,
    identity: { dev: number; ino: number },
  ): Promise<{ staged: string; moved: boolean }> {
    await fs.mkdir(incoming, { recursive: true });
    const staged = path.join(incoming, `${writer}.${Date.now()}.${randomBytes(12).toString('hex')}`);
    try {
      await fs.rename(sourceFile, staged);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
      // A copy cut short (a full volume, say) leaves no partial file behind.
      // The file the descriptor holds, whatever is at its path now (Linux's /proc/self/fd).
      await fs.copyFile(`/proc/self/fd/${source.fd}`, staged).catch(async (copyErr: unknown) => {
        await fs.rm(staged, { force: true });
        throw copyErr;
      });
      await fs.rm(sourceFile, { force: true });
      return { staged, moved: false };
    }
    const moved = await fs.lstat(staged);
    if (moved.dev !== identity.dev || moved.ino !== identity.ino) {
      await fs.rm(staged, { force: true });
      throw new Error('the file to store was replaced while it was being stored');
    }
    return { staged, moved: true };
  }

  /**
   * Moves a staged file onto its address: fsynced first (unless `flushed`, the flush of its bytes
   * already under way), its folder after, and the shard folder that holds it unless the content's
   * folder was there already (`folderKnown`).
   */
  async function enter(
    staged: string,
    contentId: string,
    target: string,
    { folderKnown = false, flushed }: { folderKnown?: boolean; flushed?: Promise<void> } = {},
  ): Promise<void> {
    const dir = path.join(root, contentDirRelative(contentId));
    try {
      await (flushed ?? fsyncPath(staged, 'r'));
      await fs.mkdir(dir, { recursive: true });
      await fs.rename(staged, target);
    } catch (err) {
      await fs.rm(staged, { force: true });
      throw err;
    }
    try {
      await fsyncPath(dir, 'r');
      if (!folderKnown) await fsyncPath(path.dirname(dir), 'r');
    } catch (err) {
      throw new AtItsAddress(err);
    }
  }

  return {
    root,
    pathOf,

    async put(sourceFile, name, observer) {
      const source = await openRegularFile(sourceFile);
      try {
        const { dev, ino } = await source.stat();
        const flushed = source.sync();
        // Awaited when the file is moved in; a put that fails or finds the bytes stored lets it end alone.
        flushed.catch(() => {});
        const { hex: contentId, bytes } = await sha256Of(source, observer);
        const { holder, release } = await pin(contentId);
        try {
          const target = pathOf(contentId, name);
          const existing = await fs.lstat(target).catch(() => null);
          // Already stored: the source stays where it is (its owner removes it).
          if (existing?.isFile() && existing.size === bytes)
            return { contentId, bytes, reused: true, pin: holder, release };
          const { staged, moved } = await stageFile(sourceFile, source, { dev, ino });
          await enter(staged, contentId, target, moved ? { flushed } : {});
          return { contentId, bytes, reused: false, pin: holder, release };
        } catch (err) {
          // Still pinned: the caller takes back what this put added.
          if (err instanceof AtItsAddress)
            throw new EnteredButFailed({ contentId, bytes, reused: false, pin: holder, release }, err.reason);
          await release();
          throw err;
        }
      } finally {
        // Waits for the flush, should it still be under way.
        await source.close();
      }
    },

    async putDerived(contentId, name, bytes) {
      const target = pathOf(contentId, name);
      const existing = await fs.stat(target).catch(() => null);
      if (existing?.isFile()) return existing.size;
      await fs.mkdir(incoming, { recursive: true });
      const staged = path.join(incoming, `${writer}.${Date.now()}.${randomBytes(12).toString('hex')}`);
      try {
        await fs.writeFile(staged, bytes, { flag: 'wx' });
      } catch (err) {
        await fs.rm(staged, { force: true });
        throw err;
      }
      // The content's WAV is there (pinned): its folder's entry is durable already. The caller
      // knows whether the file was there before, and takes it back if it was not.
      await enter(staged, contentId, target, { folderKnown: true }).catch((err: unknown) => {
        throw err instanceof AtItsAddress ? err.reason : err;
      });
      return bytes.length;
    },

    hasSync(contentId, name) {
      return existsSync(pathOf(contentId, name));
    },

    removeSync(contentId, name) {
      const target = name === undefined ? path.join(root, contentDirRelative(contentId)) : pathOf(contentId, name);
      rmSync(target, { recursive: true, force: true });
    },

    async clearIncoming(now, isGone) {
      let removed = 0;
      for (const entry of await fs.readdir(incoming).catch(() => [] as string[])) {
        const file = path.join(incoming, entry);
        const stagedBy = STAGED_NAME.exec(entry)?.[1];
        if (stagedBy === undefined || !isGone(stagedBy)) {
          const info = await fs.stat(file).catch(() => null);
          // Its writer may be staging it right now: only what is long abandoned goes.
          if (!info || now - info.mtimeMs < STALE_INCOMING_MS) continue;
        }
        await fs.rm(file, { recursive: true, force: true });
        removed++;
      }
      return removed;
    },
  };
}
