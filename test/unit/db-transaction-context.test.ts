import { describe, expect, it } from 'vitest';
import { createTransactionContext } from '../../src/db/transaction-context.js';

const tick = () => new Promise((resolve) => setImmediate(resolve));

/** Enabled only while a transaction is open; what the code inside and outside reads must not change for it. */
describe('the transaction context', () => {
  it('is the store inside a run, across awaits, and nothing outside', async () => {
    const context = createTransactionContext<string>();
    expect(context.current()).toBeUndefined();
    const seen: (string | undefined)[] = [];
    await context.run('tx-1', async () => {
      seen.push(context.current());
      await tick();
      seen.push(context.current());
      await Promise.all([tick().then(() => seen.push(context.current()))]);
    });
    expect(seen).toEqual(['tx-1', 'tx-1', 'tx-1']);
    expect(context.current()).toBeUndefined();
  });

  it('keeps overlapping runs apart, and one ending leaves the other its store', async () => {
    const context = createTransactionContext<string>();
    let endA!: () => void;
    const aMayEnd = new Promise<void>((resolve) => (endA = resolve));
    const a = context.run('a', async () => {
      await aMayEnd;
      return context.current();
    });
    const b = context.run('b', async () => {
      await tick();
      const before = context.current();
      endA();
      await a;
      await tick();
      return [before, context.current()];
    });
    expect(await a).toBe('a');
    expect(await b).toEqual(['b', 'b']);
    expect(context.current()).toBeUndefined();
  });

  it('runs again after every run ended, and work a run left behind reads no store once none is open', async () => {
    const context = createTransactionContext<string>();
    let leftBehind!: Promise<string | undefined>;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    await context.run('first', () => {
      leftBehind = released.then(() => context.current());
      return Promise.resolve();
    });
    release();
    expect(await leftBehind).toBeUndefined();
    // Control: the same work read inside an open run sees the store.
    expect(await context.run('second', async () => released.then(() => context.current()))).toBe('second');
  });
});
