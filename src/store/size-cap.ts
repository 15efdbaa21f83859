import type { Database } from '../db/database.js';
import { giveBackLease, takeLease } from '../db/leases.js';
import type { Logger } from '../logger.js';
import type { ContentStore } from './content-store.js';
import { evictToCap, readStoreTotals, removeUnrecorded, type EvictionResult } from './eviction.js';
import type { CommitReserve } from './commit-reserve.js';
import type { StoreSpace } from './free-space.js';
import { dropExpiredPins } from './pins.js';

/**
 * Keeps the store within ARTIFACT_CAP_BYTES and, given `space`, STORE_MIN_FREE_BYTES free on its
 * volume (./free-space.ts): eviction runs after each store, on a timer, and when a node finds too
 * little space to take a job (StoreSpace's onShort); one run at a time in this process, and one
 * node at a time across nodes (the 'evictor' lease; a node that finds it taken leaves the work to
 * its holder). A request during a run schedules one more run after it. Each run first writes this
 * node's uses still pending in memory, so content served since the last flush is not taken for
 * cold, and removes the files a run before it evicted but could not remove (./eviction.ts:
 * `filesLeft`; a node that stops first leaves them to start-up reconciliation).
 */
export interface SizeCap {
  request(): void;
  run(): Promise<EvictionResult>;
  start(): void;
  stop(): Promise<void>;
}

const EVICTOR_LEASE = 'evictor';
const EVICTOR_LEASE_MS = 10 * 60 * 1000;
const NOTHING: EvictionResult = { evictedArtifacts: 0, evictedBytes: 0, evictedContentIds: [], filesLeft: [] };

export function createSizeCap(deps: {
  database: Database;
  store: ContentStore;
  capBytes: number;
  space?: Pick<StoreSpace, 'freeBytes' | 'minFreeBytes'>;
  reserve?: CommitReserve;
  log: Logger;
  nodeId: string;
  now: () => number;
  /** Writes pending use touches (UsageRecorder.flush). */
  flushUsage: () => Promise<unknown>;
  onEvicted?: (result: EvictionResult) => void;
  intervalMs?: number;
}): SizeCap {
  let current: Promise<EvictionResult> | undefined;
  let again = false;
  let timer: NodeJS.Timeout | undefined;
  /** Whether the last run left the volume short of its free space: said once per stretch. */
  let stuck = false;
  /** Evicted content whose files are still to be removed. */
  let filesLeft: string[] = [];

  /** Removes the files left by an earlier run; false if they are still left. */
  async function removeFilesLeft(): Promise<boolean> {
    if (filesLeft.length === 0) return true;
    try {
      await removeUnrecorded({ database: deps.database, store: deps.store, contentIds: filesLeft, now: deps.now });
      deps.log.info({ contents: filesLeft.length }, 'removed the files of evicted content left by an earlier run');
      filesLeft = [];
      return true;
    } catch (err) {
      deps.log.error({ err, contents: filesLeft.length }, 'the files of evicted content could not be removed yet');
      return false;
    }
  }

  /** After a run: the volume still short of free space means eviction cannot make room (logged once until it can). */
  async function noteStillShort(): Promise<void> {
    const free = deps.space?.freeBytes() ?? null;
    const short = deps.space !== undefined && free !== null && free < deps.space.minFreeBytes;
    if (short && !stuck) {
      deps.log.warn(
        {
          free_bytes: free,
          min_free_bytes: deps.space!.minFreeBytes,
          stored_bytes: (await readStoreTotals(deps.database)).bytes,
        },
        "eviction cannot make room for a job: what is left of the store is too little or being stored, and files that are not the store's fill the artifact root's volume",
      );
    }
    stuck = short;
  }

  async function once(): Promise<EvictionResult> {
    const started = performance.now();
    await deps.flushUsage();
    if (!(await takeLease(deps.database, EVICTOR_LEASE, deps.nodeId, deps.now(), EVICTOR_LEASE_MS))) return NOTHING;
    try {
      await dropExpiredPins(deps.database, deps.now());
      // Until they are gone the space they take is not free: evicting more would not make up for it.
      if (!(await removeFilesLeft())) return NOTHING;
      const result = await evictToCap({
        database: deps.database,
        store: deps.store,
        capBytes: deps.capBytes,
        now: deps.now,
        space: deps.space,
        reserve: deps.reserve,
      });
      if (result.evictedArtifacts > 0) {
        deps.log.info(
          {
            evicted_artifacts: result.evictedArtifacts,
            evicted_bytes: result.evictedBytes,
            free_bytes: deps.space?.freeBytes() ?? null,
            ms: Math.round(performance.now() - started),
          },
          'store over its cap or short of free space: evicted the least recently used content',
        );
        deps.onEvicted?.(result);
      }
      if (result.filesLeft.length > 0) {
        filesLeft = result.filesLeft;
        deps.log.error(
          { err: result.filesError, contents: filesLeft.length },
          'evicted content whose files could not be removed: removing them on the next run',
        );
      }
      await noteStillShort();
      return result;
    } finally {
      await giveBackLease(deps.database, EVICTOR_LEASE, deps.nodeId);
    }
  }

  const cap: SizeCap = {
    request() {
      if (current) {
        again = true;
        return;
      }
      void cap.run().catch((err: unknown) => deps.log.error({ err }, 'eviction failed'));
    },
    run() {
      if (current) {
        again = true;
        return current;
      }
      current = once()
        .finally(() => {
          current = undefined;
        })
        .then((result) => {
          if (again) {
            again = false;
            cap.request();
          }
          return result;
        });
      return current;
    },
    start() {
      timer = setInterval(() => cap.request(), deps.intervalMs ?? 60_000);
      timer.unref();
      cap.request();
    },
    async stop() {
      if (timer) clearInterval(timer);
      again = false;
      await current?.catch(() => {});
    },
  };
  return cap;
}
