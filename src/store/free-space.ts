/**
 * Free space on the artifact root's volume, against what one job can need (STORE_MIN_FREE_BYTES:
 * by default MAX_DOWNLOAD_BYTES + MAX_OUTPUT_BYTES, its download and its WAV). Eviction keeps at
 * least that much free (./eviction.ts); a node with less takes no job (the worker pool's
 * canClaim) and says `degraded` in /healthz, since a job it took could not be stored. Counted as
 * an unprivileged writer sees it (statfs's bavail: blocks reserved for root are not free to it).
 *
 * statfs is given (the composition root passes node's statfsSync), so tests can drive it.
 * Synchronous: it is one system call, asked for whenever a worker looks for a job.
 */
export type StatFs = (dir: string) => { bavail: number | bigint; bsize: number | bigint };

export interface StoreSpace {
  readonly minFreeBytes: number;
  /** Bytes free on the volume now; null when the volume cannot be asked (the root is missing, say). */
  freeBytes(): number | null;
  /**
   * Whether one more job's output fits with STORE_MIN_FREE_BYTES to spare. When not, `onShort` is
   * called (at most once per `shortNoticeMs`): eviction may free space; when it fits again, `onRoom`. An unknown free space does
   * not stop jobs: /healthz reports an artifact root it cannot write to on its own.
   */
  canStoreJob(): boolean;
}

export function createStoreSpace(deps: {
  root: string;
  minFreeBytes: number;
  statfs: StatFs;
  now: () => number;
  onShort?: () => void;
  /** Called when a job fits again after onShort: the node takes jobs again. */
  onRoom?: () => void;
  shortNoticeMs?: number;
}): StoreSpace {
  const noticeMs = deps.shortNoticeMs ?? 5000;
  let noticedAt = -Infinity;
  let short = false;
  const space: StoreSpace = {
    minFreeBytes: deps.minFreeBytes,
    freeBytes() {
      try {
        const stats = deps.statfs(deps.root);
        return Number(stats.bavail) * Number(stats.bsize);
      } catch {
        return null;
      }
    },
    canStoreJob() {
      const free = space.freeBytes();
      if (free === null || free >= deps.minFreeBytes) {
        if (short) deps.onRoom?.();
        short = false;
        return true;
      }
      short = true;
      const now = deps.now();
      if (now - noticedAt >= noticeMs) {
        noticedAt = now;
        deps.onShort?.();
      }
      return false;
    },
  };
  return space;
}
