import { describe, expect, it } from 'vitest';
import { keptUntilChange } from '../../src/db/read-cache.js';

/** The kept read's rules, on a counted read and a mark the test moves (the real one: job-view.test.ts). */
describe('keptUntilChange', () => {
  function counted(onRead: (key: string) => void = () => {}) {
    const reads: string[] = [];
    const read = (key: string) => {
      reads.push(key);
      onRead(key);
      return Promise.resolve(key === 'missing' ? undefined : { key, parts: [{ n: reads.length }] });
    };
    return { reads, read };
  }

  it('answers from what it kept until the mark moves', async () => {
    let mark = 1;
    const { reads, read } = counted();
    const find = keptUntilChange({ changeMark: () => mark }, read, 10);
    const a = await find('a');
    expect(await find('a')).toBe(a);
    expect(reads).toEqual(['a']);
    mark++;
    const b = await find('a');
    expect(b).not.toBe(a);
    expect(reads).toEqual(['a', 'a']);
  });

  it('does not keep a value read while the mark moved (a write during the read)', async () => {
    let mark = 1;
    let writeDuringRead = true;
    const { reads, read } = counted(() => {
      if (writeDuringRead) mark++;
    });
    const find = keptUntilChange({ changeMark: () => mark }, read, 10);
    await find('a');
    await find('a');
    expect(reads).toEqual(['a', 'a']);
    // Control: the same reads with no write during them are kept.
    writeDuringRead = false;
    await find('a');
    await find('a');
    expect(reads).toEqual(['a', 'a', 'a']);
  });

  it('keeps no "not found", freezes what it keeps, and holds at most its capacity (oldest out first)', async () => {
    const { reads, read } = counted();
    const find = keptUntilChange({ changeMark: () => 1 }, read, 2);
    await find('missing');
    await find('missing');
    expect(reads).toEqual(['missing', 'missing']);

    const a = (await find('a'))!;
    expect(Object.isFrozen(a) && Object.isFrozen(a.parts) && Object.isFrozen(a.parts[0])).toBe(true);
    await find('b');
    await find('c');
    await find('c');
    await find('b');
    expect(reads.slice(2)).toEqual(['a', 'b', 'c']);
    await find('a');
    expect(reads.slice(2)).toEqual(['a', 'b', 'c', 'a']);
  });

  it('is the read itself where the database has no mark (PostgreSQL)', async () => {
    const { reads, read } = counted();
    const find = keptUntilChange({}, read, 10);
    expect(find).toBe(read);
    await find('a');
    await find('a');
    expect(reads).toEqual(['a', 'a']);
  });
});
