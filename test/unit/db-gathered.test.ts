import { describe, expect, it } from 'vitest';
import { gathered, gatheredReads } from '../../src/db/gathered.js';

/** The gathering rules, on a readMany the test answers by hand (the real ones: job-view.test.ts and job-submit.test.ts on PostgreSQL). */
describe('gatheredReads', () => {
  function held() {
    const calls: Array<{
      keys: string[];
      answer: (values: Record<string, { v: string }>) => void;
      fail: (err: Error) => void;
    }> = [];
    const readMany = (keys: string[]) =>
      new Promise<Map<string, { v: string }>>((resolve, reject) => {
        calls.push({ keys, answer: (values) => resolve(new Map(Object.entries(values))), fail: reject });
      });
    return { calls, readMany };
  }
  const settled = () => new Promise((resolve) => setImmediate(resolve));

  it('sends a read at once while there is room, and gathers those asked for meanwhile into one read, each key once', async () => {
    const { calls, readMany } = held();
    const find = gatheredReads(readMany, { concurrency: 2, maxKeys: 100 });
    const a = find('a');
    const b = find('b');
    expect(calls.map((c) => c.keys)).toEqual([['a'], ['b']]);
    const waiting = [find('c'), find('d'), find('c'), find('missing')];
    expect(calls).toHaveLength(2);

    calls[0]!.answer({ a: { v: 'a1' } });
    expect(await a).toEqual({ v: 'a1' });
    await settled();
    expect(calls.map((c) => c.keys)).toEqual([['a'], ['b'], ['c', 'd', 'missing']]);
    calls[2]!.answer({ c: { v: 'c1' }, d: { v: 'd1' } });
    const [c, d, cAgain, missing] = await Promise.all(waiting);
    expect([c, d, missing]).toEqual([{ v: 'c1' }, { v: 'd1' }, undefined]);
    // Shared by two askers: the same object, frozen. Asked for once: not frozen.
    expect(cAgain).toBe(c);
    expect(Object.isFrozen(c)).toBe(true);
    expect(Object.isFrozen(d)).toBe(false);
    calls[1]!.answer({ b: { v: 'b1' } });
    expect(await b).toEqual({ v: 'b1' });
  });

  it('never answers a read with a query sent before it was asked for', async () => {
    const { calls, readMany } = held();
    const find = gatheredReads(readMany, { concurrency: 1, maxKeys: 100 });
    const early = find('a');
    const late = find('a');
    const lateToo = find('a');
    // The early read is under way: the later ones wait for a query of their own.
    expect(calls.map((c) => c.keys)).toEqual([['a']]);
    calls[0]!.answer({ a: { v: 'before the write' } });
    expect(await early).toEqual({ v: 'before the write' });
    await settled();
    expect(calls.map((c) => c.keys)).toEqual([['a'], ['a']]);
    calls[1]!.answer({ a: { v: 'after the write' } });
    // Control: the two that waited together share that one query.
    expect(await late).toEqual({ v: 'after the write' });
    expect(await lateToo).toBe(await late);
  });

  it('fails only the askers of a failed query, goes on with the next, and sends at most maxKeys keys at once', async () => {
    const { calls, readMany } = held();
    const find = gatheredReads(readMany, { concurrency: 1, maxKeys: 2 });
    const first = find('a');
    const rest = ['b', 'c', 'd', 'e', 'f'].map((key) => find(key).catch((err: Error) => err.message));
    calls[0]!.fail(new Error('connection lost'));
    await expect(first).rejects.toThrow('connection lost');
    await settled();
    expect(calls[1]!.keys).toEqual(['b', 'c']);
    calls[1]!.fail(new Error('again'));
    await settled();
    expect(calls[2]!.keys).toEqual(['d', 'e']);
    calls[2]!.answer({ d: { v: 'd' }, e: { v: 'e' } });
    await settled();
    expect(calls[3]!.keys).toEqual(['f']);
    calls[3]!.answer({ f: { v: 'f' } });
    expect(await Promise.all(rest)).toEqual(['again', 'again', { v: 'd' }, { v: 'e' }, { v: 'f' }]);
    expect(calls).toHaveLength(4);
  });
});

describe('gathered', () => {
  it('answers each item its own result, in order, an item given twice included', async () => {
    const calls: number[][] = [];
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const double = gathered(
      async (items: number[]) => {
        calls.push(items);
        await held;
        return items.map((n) => n * 2);
      },
      { concurrency: 1, maxItems: 10 },
    );
    const first = double(1);
    const rest = [double(2), double(3), double(2)];
    release();
    expect(await first).toBe(2);
    expect(await Promise.all(rest)).toEqual([4, 6, 4]);
    expect(calls).toEqual([[1], [2, 3, 2]]);
  });
});
