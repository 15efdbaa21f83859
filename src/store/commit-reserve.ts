import { rmSync, writeFileSync } from 'node:fs';

/**
 * Room kept on the SQLite database's volume for the commits that free space. Eviction removes a
 * content's rows before its files (./eviction.ts), so its commit needs room for its WAL frames
 * before any unlink has freed some: on a volume filled to its last block (the database and the
 * store on one, as by default) it would be refused, and nothing could ever free space. A file of
 * `bytes` beside the database is that room: an eviction refused for lack of space lets it go and
 * commits again; it is written anew once the evicted files are gone (or the next time, when there
 * is still no room for it). On PostgreSQL the database's volume is not this node's: no reserve.
 */
export interface CommitReserve {
  /** Frees the reserve; false when there was none to free (released, never written). */
  release(): boolean;
  /** Writes the reserve again, if it is not there and the volume has room for it. */
  restore(): void;
}

/** Far more than the WAL frames of an eviction batch (200 rows' deletes, their index and totals pages). */
export const COMMIT_RESERVE_BYTES = 4 * 1024 * 1024;

export function createCommitReserve(file: string, bytes = COMMIT_RESERVE_BYTES): CommitReserve {
  let held = false;
  const reserve: CommitReserve = {
    release() {
      if (!held) return false;
      rmSync(file, { force: true });
      held = false;
      return true;
    },
    restore() {
      if (held) return;
      try {
        // Written, not truncated: a hole would take no space.
        writeFileSync(file, Buffer.alloc(bytes));
        held = true;
      } catch {
        // No room yet: nothing of it stays, so it takes nothing from what is free.
        rmSync(file, { force: true });
      }
    },
  };
  reserve.restore();
  return reserve;
}
