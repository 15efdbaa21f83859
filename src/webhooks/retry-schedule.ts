/**
 * When a failed callback is tried again: after base × 2^(n−1) for the n-th failure, capped at
 * MAX_RETRY_DELAY_MS and shortened by up to a quarter at random (so deliveries that failed
 * together, say while their receiver was down, do not all come back at once), and never later
 * than `retryForMs` after the job ended: past that the delivery fails for good.
 */
export const MAX_RETRY_DELAY_MS = 3600_000;

export interface RetrySchedule {
  baseMs: number;
  /** How long after the job's end attempts may still start. */
  retryForMs: number;
}

/**
 * The time of the next attempt after `failures` failed ones (the last at `now`), or null when it
 * would fall past the bound.
 */
export function nextAttemptAt(
  schedule: RetrySchedule,
  failures: number,
  now: number,
  jobEndedAt: number,
  random: () => number = Math.random,
): number | null {
  const exponential = schedule.baseMs * 2 ** Math.min(failures - 1, 40);
  const delay = Math.min(exponential, MAX_RETRY_DELAY_MS) * (1 - 0.25 * random());
  const at = now + Math.round(delay);
  return at <= jobEndedAt + schedule.retryForMs ? at : null;
}
