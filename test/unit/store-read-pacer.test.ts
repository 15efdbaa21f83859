import { describe, expect, it } from 'vitest';
import { createReadPacer } from '../../src/store/read-pacer.js';

/**
 * The scrub's read rate limit on a clock the test moves: sleeping advances it by exactly the
 * time slept, and reading takes whatever time the test says.
 */
function fakeTime() {
  let now = 1_000_000;
  const sleeps: number[] = [];
  return {
    now: () => now,
    advance: (ms: number) => void (now += ms),
    sleeps,
    sleep: (ms: number, signal?: AbortSignal) => {
      if (signal?.aborted) return Promise.reject(signal.reason as Error);
      sleeps.push(ms);
      now += ms;
      return Promise.resolve();
    },
  };
}

const MiB = 1024 * 1024;

describe('read pacer', () => {
  it('holds instant reads to the rate: 10 MiB at 1 MiB/s take 9 s after a first chunk of burst', async () => {
    const time = fakeTime();
    const pacer = createReadPacer({ bytesPerSecond: MiB, burstBytes: MiB, now: time.now, sleep: time.sleep });
    const start = time.now();
    for (let i = 0; i < 10; i++) await pacer.take(MiB);
    expect(time.now() - start).toBeCloseTo(9000, 6);
    // The first chunk is the burst; every later one waits its own second.
    expect(time.sleeps.length).toBe(9);
    for (const ms of time.sleeps) expect(ms).toBeCloseTo(1000, 6);
  });

  it('never lets more than the rate plus one burst through in any stretch of time', async () => {
    const time = fakeTime();
    const rate = 4 * MiB;
    const burst = 256 * 1024;
    const pacer = createReadPacer({ bytesPerSecond: rate, burstBytes: burst, now: time.now, sleep: time.sleep });
    // Reads of varying size and speed: [time when each read's bytes were counted, bytes].
    const taken: Array<[number, number]> = [];
    const sizes = [64, 1024, 300, 4096, 7, 512, 2048, 100].map((k) => k * 1024);
    for (let i = 0; i < 200; i++) {
      const bytes = sizes[i % sizes.length]!;
      time.advance(i % 7 === 0 ? 50 : 1); // a read takes 1 ms, sometimes 50
      await pacer.take(bytes);
      taken.push([time.now(), bytes]);
    }
    for (let from = 0; from < taken.length; from++) {
      let bytes = 0;
      for (let to = from; to < taken.length; to++) {
        bytes += taken[to]![1];
        // Bytes released in [release of `from`, release of `to`]: the first one came with the allowance saved before it.
        const elapsedS = (taken[to]![0] - taken[from]![0]) / 1000;
        expect(bytes).toBeLessThanOrEqual(rate * elapsedS + burst + taken[from]![1] + 1);
      }
    }
    // And on the whole, close to the rate: reads that fast wait, they do not crawl.
    const totalBytes = taken.reduce((sum, [, bytes]) => sum + bytes, 0);
    const totalS = (taken.at(-1)![0] - taken[0]![0]) / 1000;
    expect(totalBytes / totalS).toBeGreaterThan(rate * 0.95);
    expect(totalBytes / totalS).toBeLessThanOrEqual(rate * 1.1);
  });

  it('a reader slower than the rate never waits', async () => {
    const time = fakeTime();
    const pacer = createReadPacer({ bytesPerSecond: MiB, burstBytes: 512 * 1024, now: time.now, sleep: time.sleep });
    for (let i = 0; i < 20; i++) {
      time.advance(600); // 512 KiB per 600 ms: below 1 MiB/s
      await pacer.take(512 * 1024);
    }
    expect(time.sleeps).toEqual([]);
  });

  it('saves up at most one burst while idle: after an hour off, the second chunk waits again', async () => {
    const time = fakeTime();
    const pacer = createReadPacer({ bytesPerSecond: MiB, burstBytes: MiB, now: time.now, sleep: time.sleep });
    await pacer.take(MiB);
    time.advance(3600 * 1000);
    await pacer.take(MiB);
    expect(time.sleeps).toEqual([]);
    await pacer.take(MiB);
    expect(time.sleeps).toHaveLength(1);
    expect(time.sleeps[0]).toBeCloseTo(1000, 6);
  });

  it('a wait ends when its signal aborts', async () => {
    const time = fakeTime();
    const pacer = createReadPacer({ bytesPerSecond: 1024, burstBytes: 1024, now: time.now, sleep: time.sleep });
    const abort = new AbortController();
    await pacer.take(1024, abort.signal);
    abort.abort();
    await expect(pacer.take(1024, abort.signal)).rejects.toThrow();
  });

  it('control: without the pacer the same reads would have gone at once', async () => {
    const time = fakeTime();
    const pacer = createReadPacer({ bytesPerSecond: 1e15, burstBytes: MiB, now: time.now, sleep: time.sleep });
    for (let i = 0; i < 10; i++) await pacer.take(MiB);
    expect(time.sleeps.every((ms) => ms < 1e-3)).toBe(true);
  });

  it('refuses a rate that is not positive', () => {
    const time = fakeTime();
    expect(() => createReadPacer({ bytesPerSecond: 0, burstBytes: 1, now: time.now, sleep: time.sleep })).toThrow(
      RangeError,
    );
  });
});
