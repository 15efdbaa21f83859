/**
 * Group commit's waiting half: writes that are already committed (in SQLite's WAL, not yet on
 * disk) wait here until one sync of the log covers them. A write is covered only by a sync that
 * starts after it, so a caller arriving while a sync is under way waits for the next one; every
 * caller that arrives meanwhile shares that next one. One sync at a time, and never an idle one.
 * A failed sync fails exactly the writes it was to cover; the next group tries again.
 */
export interface GroupSync {
  /** Resolves once a sync that started after this call has finished. */
  durable(): Promise<void>;
  /** Resolves when no sync is under way or waited for. */
  settled(): Promise<void>;
}

export function createGroupSync(sync: () => Promise<void>): GroupSync {
  let inFlight: Promise<void> | null = null;
  let next: { promise: Promise<void>; resolve: () => void; reject: (err: unknown) => void } | null = null;

  const start = (): void => {
    const group = next!;
    next = null;
    inFlight = sync()
      .then(group.resolve, group.reject)
      .finally(() => {
        inFlight = null;
        if (next) start();
      });
  };

  return {
    durable() {
      if (!next) {
        let resolve!: () => void;
        let reject!: (err: unknown) => void;
        const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
        next = { promise, resolve, reject };
      }
      const waited = next.promise;
      if (!inFlight) start();
      return waited;
    },
    async settled() {
      while (inFlight) await inFlight;
    },
  };
}
