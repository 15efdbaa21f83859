import { describe, expect, it } from 'vitest';
import { ifRangeAllows, isNotModified } from '../../src/delivery/conditional.js';
import { parseRange } from '../../src/delivery/range.js';
import { httpDate } from '../../src/delivery/conditional.js';
import { contentDisposition, contentTypeOf } from '../../src/delivery/representation.js';

describe('Range', () => {
  it.each([
    [undefined, 1000, { kind: 'none' }],
    ['bytes=0-99', 1000, { kind: 'range', start: 0, end: 99 }],
    ['bytes=500-', 1000, { kind: 'range', start: 500, end: 999 }],
    ['bytes=900-5000', 1000, { kind: 'range', start: 900, end: 999 }],
    ['bytes=-100', 1000, { kind: 'range', start: 900, end: 999 }],
    ['bytes=-5000', 1000, { kind: 'range', start: 0, end: 999 }],
    ['Bytes = 1-2', 1000, { kind: 'range', start: 1, end: 2 }],
    ['bytes=1000-', 1000, { kind: 'unsatisfiable' }],
    ['bytes=-0', 1000, { kind: 'unsatisfiable' }],
    ['bytes=0-', 0, { kind: 'unsatisfiable' }],
    // Ignored (whole file): several ranges, bad syntax, other units, reversed bounds.
    ['bytes=0-1,5-6', 1000, { kind: 'none' }],
    ['bytes=5-1', 1000, { kind: 'none' }],
    ['bytes=-', 1000, { kind: 'none' }],
    ['items=0-1', 1000, { kind: 'none' }],
    ['bytes=a-b', 1000, { kind: 'none' }],
    ['bytes=99999999999999999999-', 1000, { kind: 'none' }],
  ])('%s of %i bytes', (header, size, expected) => {
    expect(parseRange(header, size)).toEqual(expected);
  });
});

describe('conditional requests', () => {
  const v = { etag: '"abc"', mtimeMs: Date.parse('2026-01-01T00:00:00.500Z') };
  const h = (headers: Record<string, string>) => new Headers(headers);

  it('If-None-Match compares weakly, takes lists and *', () => {
    expect(isNotModified(h({ 'if-none-match': '"abc"' }), v)).toBe(true);
    expect(isNotModified(h({ 'if-none-match': 'W/"abc"' }), v)).toBe(true);
    expect(isNotModified(h({ 'if-none-match': '"x", "abc"' }), v)).toBe(true);
    expect(isNotModified(h({ 'if-none-match': '*' }), v)).toBe(true);
    expect(isNotModified(h({ 'if-none-match': '"abcd"' }), v)).toBe(false);
    expect(isNotModified(h({ 'if-none-match': 'abc' }), v)).toBe(false);
  });

  it('If-Modified-Since counts only without If-None-Match, to the second', () => {
    expect(isNotModified(h({ 'if-modified-since': 'Thu, 01 Jan 2026 00:00:00 GMT' }), v)).toBe(true);
    expect(isNotModified(h({ 'if-modified-since': 'Wed, 31 Dec 2025 23:59:59 GMT' }), v)).toBe(false);
    expect(isNotModified(h({ 'if-modified-since': 'Thu, 01 Jan 2026 00:00:00 GMT', 'if-none-match': '"x"' }), v)).toBe(
      false,
    );
    expect(isNotModified(h({ 'if-modified-since': 'yesterday' }), v)).toBe(false);
  });

  it('If-Range needs a strong match of the ETag or the exact date', () => {
    expect(ifRangeAllows(null, v)).toBe(true);
    expect(ifRangeAllows('"abc"', v)).toBe(true);
    expect(ifRangeAllows('W/"abc"', v)).toBe(false);
    expect(ifRangeAllows('"other"', v)).toBe(false);
    expect(ifRangeAllows('Thu, 01 Jan 2026 00:00:00 GMT', v)).toBe(true);
    expect(ifRangeAllows('Thu, 01 Jan 2026 00:00:01 GMT', v)).toBe(false);
    expect(ifRangeAllows('garbage', v)).toBe(false);
  });
});

describe('representation headers', () => {
  it('types by extension', () => {
    expect(contentTypeOf('audio.wav')).toBe('audio/wav');
    expect(contentTypeOf('AUDIO.WAV')).toBe('audio/wav');
    expect(contentTypeOf('features.json')).toBe('application/json');
    expect(contentTypeOf('stems.bin')).toBe('application/octet-stream');
    expect(contentTypeOf('README')).toBe('application/octet-stream');
  });

  it('Content-Disposition carries an ASCII fallback and the exact name (RFC 6266, RFC 8187)', () => {
    expect(contentDisposition('audio.wav')).toBe(`inline; filename="audio.wav"; filename*=UTF-8''audio.wav`);
    expect(contentDisposition(`my "song" é's (1).wav`)).toBe(
      `inline; filename="my _song_ _'s (1).wav"; filename*=UTF-8''my%20%22song%22%20%C3%A9%27s%20%281%29.wav`,
    );
  });

  it('Content-Disposition and HTTP dates stay right when names and times alternate (they are remembered)', () => {
    const names = Array.from({ length: 300 }, (_, i) => `track ${i}.wav`);
    for (const round of [0, 1]) {
      for (const name of names) {
        expect(contentDisposition(name), `${name} in round ${round}`).toBe(
          `inline; filename="${name}"; filename*=UTF-8''${encodeURIComponent(name)}`,
        );
      }
    }
    for (const ms of [0, 1_700_000_000_000, 0, 1_700_000_000_000, 1_700_000_001_000]) {
      expect(httpDate(ms)).toBe(new Date(ms).toUTCString());
    }
  });
});
