import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { watchForStall } from '../../src/jobs/fetch/download.js';

describe('watchForStall', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'performance'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('aborts with download_stalled once a window passes with fewer than minBytes gained', () => {
    const watch = watchForStall({ windowMs: 10_000, minBytes: 1000 });
    watch.progress(5000);
    vi.advanceTimersByTime(10_000);
    expect(watch.signal.aborted).toBe(false);
    // 50 bytes a second from now on: 500 in 10 s, short of the 1000 a window needs.
    for (let s = 1; s <= 5; s++) {
      vi.advanceTimersByTime(2000);
      watch.progress(5000 + 100 * s);
    }
    vi.advanceTimersByTime(10_000);
    expect(watch.signal.aborted).toBe(true);
    expect(watch.signal.reason).toEqual({
      code: 'download_stalled',
      message: 'The download gained fewer than 1000 bytes in 10 s and was stopped.',
      detail: null,
      httpStatus: null,
    });
    watch.stop();
  });

  it('control: a download that gains minBytes in every window is never stopped', () => {
    const watch = watchForStall({ windowMs: 10_000, minBytes: 1000 });
    let bytes = 0;
    for (let s = 0; s < 120; s++) {
      bytes += 150;
      watch.progress(bytes);
      vi.advanceTimersByTime(1000);
    }
    expect(watch.signal.aborted).toBe(false);
    watch.stop();
  });

  it('with minBytes 0, only a window without a single byte stops it', () => {
    const watch = watchForStall({ windowMs: 10_000, minBytes: 0 });
    for (let s = 0; s < 30; s++) {
      watch.progress(s);
      vi.advanceTimersByTime(1000);
    }
    expect(watch.signal.aborted).toBe(false);
    vi.advanceTimersByTime(12_000);
    expect(watch.signal.aborted).toBe(true);
    watch.stop();
  });
});
