import { Writable } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../src/logger.js';

function captured() {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n'))
        if (line) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { lines, log: createLogger('info', sink) };
}

describe('the logger', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("stamps each line with the clock's time in ISO 8601, the same text within a millisecond and the next one after", async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const { lines, log } = captured();
    vi.setSystemTime(Date.UTC(2026, 10, 25, 21, 0, 0, 123));
    log.info('a');
    log.info('b');
    vi.setSystemTime(Date.UTC(2026, 10, 25, 21, 0, 0, 124));
    log.info('c');
    vi.setSystemTime(Date.UTC(2027, 0, 1));
    log.info('d');
    await new Promise((resolve) => setImmediate(resolve));
    expect(lines.map((line) => [line.msg, line.time])).toEqual([
      ['a', '2026-11-25T21:00:00.123Z'],
      ['b', '2026-11-25T21:00:00.123Z'],
      ['c', '2026-11-25T21:00:00.124Z'],
      ['d', '2027-01-01T00:00:00.000Z'],
    ]);
  });
});
