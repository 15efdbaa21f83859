import { describe, expect, it } from 'vitest';
import { MAX_RETRY_DELAY_MS, nextAttemptAt } from '../../src/webhooks/retry-schedule.js';

/** When a failed callback is tried again. */
describe('the callback retry schedule', () => {
  const schedule = { baseMs: 5_000, retryForMs: 86_400_000 };

  it('doubles the delay after each failure, up to an hour', () => {
    const delays = [1, 2, 3, 4, 10, 11, 30].map((failures) => nextAttemptAt(schedule, failures, 0, 0, () => 0));
    expect(delays).toEqual([5_000, 10_000, 20_000, 40_000, 2_560_000, MAX_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS]);
  });

  it('comes back up to a quarter earlier at random, never later', () => {
    expect(nextAttemptAt(schedule, 3, 1_000, 0, () => 0)).toBe(21_000);
    expect(nextAttemptAt(schedule, 3, 1_000, 0, () => 0.5)).toBe(18_500);
    expect(nextAttemptAt(schedule, 3, 1_000, 0, () => 0.999999)).toBe(16_000);
  });

  it('gives up when the next attempt would start past the bound after the job ended', () => {
    const bounded = { baseMs: 1_000, retryForMs: 10_000 };
    // Job ended at 100; the bound is 10 100.
    expect(nextAttemptAt(bounded, 4, 2_100, 100, () => 0)).toBe(10_100);
    expect(nextAttemptAt(bounded, 4, 2_101, 100, () => 0)).toBeNull();
    // Jitter can bring an attempt back within the bound, never push it out.
    expect(nextAttemptAt(bounded, 4, 2_101, 100, () => 0.5)).toBe(9_101);
  });
});
