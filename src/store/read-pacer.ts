/**
 * Keeps a reader at or below `bytesPerSecond` on average: after each read of n bytes, `take(n)`
 * waits until that many bytes are allowed. The bytes allowed grow with time at the rate, and at
 * most `burstBytes` of allowance is saved up while the reader is idle or slower than the rate, so
 * that no stretch of time sees more than its share plus one burst. A reader slower than the rate
 * (a slow disk) never waits.
 *
 * The clock and the sleep are given, so tests drive time themselves.
 */
export interface ReadPacer {
  /** Counts `bytes` read, and resolves once the rate allows them; rejects when `signal` aborts the wait. */
  take(bytes: number, signal?: AbortSignal): Promise<void>;
}

export interface ReadPacerDeps {
  bytesPerSecond: number;
  /** At least the largest read: the allowance of a read counted when it ends, which a reader slower than the rate has earned while reading. */
  burstBytes: number;
  /** Milliseconds, monotonic. */
  now: () => number;
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
}

export function createReadPacer(deps: ReadPacerDeps): ReadPacer {
  if (!(deps.bytesPerSecond > 0)) throw new RangeError('bytesPerSecond must be positive');
  const msPerByte = 1000 / deps.bytesPerSecond;
  const burstMs = deps.burstBytes * msPerByte;
  /** When the bytes taken so far are all allowed. */
  let allowedAt = -Infinity;
  return {
    async take(bytes, signal) {
      const now = deps.now();
      allowedAt = Math.max(allowedAt, now - burstMs) + bytes * msPerByte;
      const wait = allowedAt - now;
      if (wait > 0) await deps.sleep(wait, signal);
    },
  };
}
