import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Waits for a state, not for time: calls `probe` every 20 ms until it gives a value other than
 * undefined and returns that value; throws, naming `what`, once `timeoutMs` has passed.
 *
 *   const job = await until('bytes downloaded', async () => {
 *     const seen = await svc.getJob(id);
 *     return (seen.progress?.bytes_done ?? 0) > 0 ? seen : undefined;
 *   });
 */
export async function until<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}
