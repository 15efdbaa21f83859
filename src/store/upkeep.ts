import type { Database } from '../db/database.js';
import type { Logger } from '../logger.js';
import path from 'node:path';
import { createCommitReserve } from './commit-reserve.js';
import type { ContentStore } from './content-store.js';
import { createStoreSpace, type StatFs } from './free-space.js';
import { createSizeCap } from './size-cap.js';
import { createUsageRecorder } from './usage.js';

/** The part of the configuration (src/config.ts) the store's upkeep uses. */
export interface StoreUpkeepConfig {
  artifactRoot: string;
  storeMinFreeBytes: number;
  artifactCapBytes: number;
  evictionIntervalMs: number;
  database: { kind: 'sqlite'; path: string } | { kind: 'postgres' };
}

export interface StoreUpkeepDeps {
  database: Database;
  store: ContentStore;
  statfs: StatFs;
  /** Opens a log of uses recorded elsewhere (nginx's), drained before each flush of uses; absent: none. */
  openUsageLog: ((onUse: (contentId: string, atMs: number) => void) => { drain(): number }) | undefined;
  onEvicted: (evicted: { artifacts: number; bytes: number }) => void;
  nodeId: string;
  now: () => number;
  log: Logger;
  onStop: (stop: () => void | Promise<void>) => void;
}

/**
 * What keeps the store within its bounds: free space on the artifact root's volume (eviction keeps
 * STORE_MIN_FREE_BYTES of it, and a node with less takes no job and says so in /healthz), the uses
 * of artifacts (served by the app, or by nginx through its usage log), and eviction by size cap,
 * with room kept beside a SQLite database for its commits (./commit-reserve.ts).
 */
export function createStoreUpkeep(config: StoreUpkeepConfig, deps: StoreUpkeepDeps) {
  const { database, store, nodeId, now, log } = deps;
  const space = createStoreSpace({
    root: config.artifactRoot,
    minFreeBytes: config.storeMinFreeBytes,
    statfs: deps.statfs,
    now,
    onShort: () => {
      log.warn(
        { free_bytes: space.freeBytes(), min_free_bytes: config.storeMinFreeBytes },
        "the artifact root's volume has less free than one job can need: taking no job, evicting",
      );
      sizeCap.request();
    },
    onRoom: () =>
      log.info(
        { free_bytes: space.freeBytes(), min_free_bytes: config.storeMinFreeBytes },
        "the artifact root's volume has room for a job again: taking jobs",
      ),
  });
  const usageLog = deps.openUsageLog?.((cid, at) => usage.touch(cid, at));
  const usage = createUsageRecorder({
    database,
    now,
    onError: (err) => log.error({ err }, 'recording uses failed'),
    collect: usageLog && (() => void usageLog.drain()),
  });
  deps.onStop(() => usage.stop());
  const sizeCap = createSizeCap({
    database,
    store,
    capBytes: config.artifactCapBytes,
    space,
    reserve:
      config.database.kind === 'sqlite'
        ? createCommitReserve(path.join(path.dirname(config.database.path), 'commit-reserve.bin'))
        : undefined,
    log,
    nodeId,
    now,
    flushUsage: () => usage.flush(),
    intervalMs: config.evictionIntervalMs,
    onEvicted: (result) => deps.onEvicted({ artifacts: result.evictedArtifacts, bytes: result.evictedBytes }),
  });
  deps.onStop(() => sizeCap.stop());
  return { space, usage, sizeCap };
}
export type StoreUpkeep = ReturnType<typeof createStoreUpkeep>;
