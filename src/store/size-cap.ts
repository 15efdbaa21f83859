import type { Db } from '../db/client.js';
import type { Logger } from '../logger.js';
import type { ContentStore } from './content-store.js';
import { evictToCap, type EvictionResult } from './eviction.js';

/**
 * Keeps the store within ARTIFACT_CAP_BYTES: eviction runs after each store and on a timer,
 * one run at a time; a request during a run schedules one more run after it. Each run first
 * writes the uses still pending in memory, so content served since the last flush is not
 * taken for cold.
 */
export interface SizeCap {
  request(): void;
  run(): Promise<EvictionResult>;
  start(): void;
  stop(): Promise<void>;
}

export function createSizeCap(deps: {
  db: Db;
  store: ContentStore;
  capBytes: number;
  log: Logger;
  /** Writes pending use touches (UsageRecorder.flush). */
  flushUsage: () => void;
  onEvicted?: (result: EvictionResult) => void;
  intervalMs?: number;
}): SizeCap {
  let current: Promise<EvictionResult> | undefined;
  let again = false;
  let timer: NodeJS.Timeout | undefined;

  async function once(): Promise<EvictionResult> {
    const started = performance.now();
    deps.flushUsage();
    const result = await evictToCap({ db: deps.db, store: deps.store, capBytes: deps.capBytes });
    if (result.evictedArtifacts > 0) {
      deps.log.info(
        { evicted_artifacts: result.evictedArtifacts, evicted_bytes: result.evictedBytes, ms: Math.round(performance.now() - started) },
        'store over its cap: evicted the least recently used content',
      );
      deps.onEvicted?.(result);
    }
    return result;
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
