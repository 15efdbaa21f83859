import { describe, expect, it } from 'vitest';
import { createGroupSync } from '../../src/db/group-sync.js';

/** A sync the test finishes by hand: each call is recorded and waits for finish(i) or fail(i). */
function heldSync() {
  const calls: Array<{ finish: () => void; fail: (err: Error) => void }> = [];
  let called: () => void = () => {};
  return {
    calls,
    sync: () =>
      new Promise<void>((resolve, reject) => {
        calls.push({ finish: resolve, fail: reject });
        called();
      }),
    /** Resolves once the sync has been called `n` times. */
    async calledTimes(n: number) {
      while (calls.length < n) await new Promise<void>((resolve) => (called = resolve));
    },
  };
}

const settledState = async (promise: Promise<unknown>) => {
  let state = 'pending';
  promise.then(
    () => (state = 'resolved'),
    () => (state = 'rejected'),
  );
  // Enough turns for any settled promise's reactions to run.
  for (let i = 0; i < 5; i++) await Promise.resolve();
  return state;
};

describe('group sync', () => {
  it('a write waits for a sync that started after it; writes arriving meanwhile share the next one', async () => {
    const held = heldSync();
    const group = createGroupSync(held.sync);
    const first = group.durable();
    await held.calledTimes(1);
    const later = [group.durable(), group.durable(), group.durable()];

    expect(await settledState(first)).toBe('pending');
    held.calls[0]!.finish();
    expect(await settledState(first)).toBe('resolved');
    // The first sync may have started before they committed: it does not cover them.
    expect(await Promise.all(later.map(settledState))).toEqual(['pending', 'pending', 'pending']);

    await held.calledTimes(2);
    held.calls[1]!.finish();
    await Promise.all(later);
    expect(held.calls).toHaveLength(2);
  });

  it('makes no sync while nobody waits, and a failed sync fails only its own group', async () => {
    const held = heldSync();
    const group = createGroupSync(held.sync);
    await group.settled();
    expect(held.calls).toHaveLength(0);

    const doomed = group.durable();
    await held.calledTimes(1);
    const next = group.durable();
    held.calls[0]!.fail(new Error('EIO'));
    await expect(doomed).rejects.toThrow('EIO');

    await held.calledTimes(2);
    held.calls[1]!.finish();
    await expect(next).resolves.toBeUndefined();
    await group.settled();
    expect(held.calls).toHaveLength(2);
  });
});
