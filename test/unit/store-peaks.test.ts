import { describe, expect, it } from 'vitest';
import {
  createPeaksAccumulator,
  MAX_PIXELS,
  MIN_SAMPLES_PER_PIXEL,
  samplesPerPixelFor,
  type WaveformPeaks,
} from '../../src/audio/peaks.js';

/** A 16-bit PCM WAV (a LIST chunk before the data, as some writers put) of the given frames. */
function wav(frames: number[][], opts: { rate?: number; bits?: number; format?: number; list?: boolean } = {}): Buffer {
  const { rate = 44100, bits = 16, format = 1, list = true } = opts;
  const channels = frames[0]?.length ?? 1;
  const fmt = Buffer.alloc(16);
  fmt.writeUInt16LE(format, 0);
  fmt.writeUInt16LE(channels, 2);
  fmt.writeUInt32LE(rate, 4);
  fmt.writeUInt32LE((rate * channels * bits) / 8, 8);
  fmt.writeUInt16LE((channels * bits) / 8, 12);
  fmt.writeUInt16LE(bits, 14);
  const samples = Buffer.alloc(frames.length * channels * 2);
  frames.flat().forEach((value, i) => samples.writeInt16LE(value, i * 2));
  const chunk = (id: string, body: Buffer) => {
    const head = Buffer.alloc(8);
    head.write(id, 0, 'latin1');
    head.writeUInt32LE(body.length, 4);
    return Buffer.concat([head, body, Buffer.alloc(body.length % 2)]);
  };
  const body = Buffer.concat([
    Buffer.from('WAVE', 'latin1'),
    chunk('fmt ', fmt),
    ...(list ? [chunk('LIST', Buffer.from('INFOISFT\x03\x00\x00\x00abc\x00', 'latin1'))] : []),
    chunk('data', samples),
  ]);
  const head = Buffer.alloc(8);
  head.write('RIFF', 0, 'latin1');
  head.writeUInt32LE(body.length, 4);
  return Buffer.concat([head, body]);
}

function peaksOf(file: Buffer, cuts: number[]): WaveformPeaks | null {
  const acc = createPeaksAccumulator();
  let at = 0;
  for (const cut of [...cuts, file.length]) {
    acc.update(file.subarray(at, cut));
    at = cut;
  }
  return acc.finish();
}

/** The expected data, computed plainly: min and max per channel of each block, high byte. */
function expectedData(frames: number[][], spp: number): number[] {
  const out: number[] = [];
  for (let start = 0; start < frames.length; start += spp) {
    const block = frames.slice(start, start + spp);
    for (let c = 0; c < block[0]!.length; c++) {
      const values = block.map((frame) => frame[c]!);
      out.push(Math.min(...values) >> 8, Math.max(...values) >> 8);
    }
  }
  return out;
}

/** Deterministic noise-like frames. */
function frames(count: number, channels: number): number[][] {
  let seed = 12345;
  const next = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return (seed % 65536) - 32768;
  };
  return Array.from({ length: count }, () => Array.from({ length: channels }, next));
}

/** Frames of noise whose level jumps every few hundred frames (1 to full scale), so blocks' extremes differ. */
function levelledNoise(count: number, channels: number, seed: number): number[][] {
  let state = seed;
  const next = () => (state = (state * 1103515245 + 12345) % 2147483648) / 2147483648;
  let level = 1;
  return Array.from({ length: count }, (_, i) => {
    if (i % 317 === 0) level = 1 + Math.floor(next() * 32767);
    // Now and then the extremes themselves, which the kernels' starting values must not hide.
    return Array.from({ length: channels }, () =>
      next() < 0.0005 ? (next() < 0.5 ? -32768 : 32767) : Math.round((next() * 2 - 1) * level),
    );
  });
}

/** `count` cut positions in (0, length), random sizes from 1 byte up, sorted. */
function randomCuts(length: number, count: number, seed: number): number[] {
  let state = seed;
  const cuts = new Set<number>();
  while (cuts.size < count) {
    state = (state * 1103515245 + 12345) % 2147483648;
    cuts.add(1 + (state % (length - 1)));
  }
  return [...cuts].sort((a, b) => a - b);
}

describe('waveform peaks accumulator', () => {
  it('stereo: min/max per channel per block, in audiowaveform version 2 form', () => {
    // A positive full-scale left, a negative half-scale right, then silence: the channels stay apart.
    const input = [...Array.from({ length: 40 }, () => [32767, -16384]), ...Array.from({ length: 40 }, () => [0, 0])];
    const peaks = peaksOf(wav(input), []);
    expect(peaks).toEqual({
      version: 2,
      channels: 2,
      sample_rate: 44100,
      samples_per_pixel: MIN_SAMPLES_PER_PIXEL,
      bits: 8,
      length: 3,
      // pixel 0: frames 0..31; pixel 1: 32..63 (8 loud, 24 silent); pixel 2: 64..79 (a partial block).
      data: [127, 127, -64, -64, 0, 127, -64, 0, 0, 0, 0, 0],
    });
  });

  it('mono, with chunks cut inside the header, inside samples and on odd offsets, gives what one chunk gives', () => {
    const input = frames(1000, 1);
    const file = wav(input, { rate: 22050 });
    const whole = peaksOf(file, []);
    expect(whole).toMatchObject({ channels: 1, sample_rate: 22050, length: Math.ceil(1000 / MIN_SAMPLES_PER_PIXEL) });
    expect(whole!.data).toEqual(expectedData(input, MIN_SAMPLES_PER_PIXEL));
    // Every cut position from 1 to 100 bytes (header, LIST chunk, first samples), and byte by byte.
    for (let cut = 1; cut < 100; cut++) expect(peaksOf(file, [cut, cut + 3, cut + 1001])).toEqual(whole);
    expect(
      peaksOf(
        file,
        Array.from({ length: file.length - 1 }, (_, i) => i + 1),
      ),
    ).toEqual(whole);
  });

  it('stereo, cut at odd boundaries that split frames and samples', () => {
    const input = frames(5000, 2);
    const file = wav(input, { list: false });
    const whole = peaksOf(file, []);
    expect(whole!.data).toEqual(expectedData(input, MIN_SAMPLES_PER_PIXEL));
    expect(peaksOf(file, [45, 47, 1001, 1002, 7777, 12345, 19999])).toEqual(whole);
    expect(peaksOf(file, [3, 44, 45, 46, 50, 51])).toEqual(whole);
  });

  it('ignores bytes after the data chunk (a trailing chunk)', () => {
    const input = frames(100, 2);
    const file = Buffer.concat([wav(input), Buffer.from('LIST\x04\x00\x00\x00\x7f\x7f\x7f\x7f', 'latin1')]);
    expect(peaksOf(file, [61])!.data).toEqual(expectedData(input, MIN_SAMPLES_PER_PIXEL));
  });

  it('chooses the resolution from the duration: at most MAX_PIXELS pixels, at least MIN_SAMPLES_PER_PIXEL frames each', () => {
    expect(samplesPerPixelFor(3 * 44100)).toBe(MIN_SAMPLES_PER_PIXEL);
    const threeHours = 3 * 3600 * 44100;
    expect(Math.ceil(threeHours / samplesPerPixelFor(threeHours))).toBeLessThanOrEqual(MAX_PIXELS);
    expect(Math.ceil(threeHours / samplesPerPixelFor(threeHours))).toBeGreaterThan(MAX_PIXELS - 1);
    // A file long enough to need more than the floor gets coarser pixels, its length bounded.
    const input = frames(MAX_PIXELS * MIN_SAMPLES_PER_PIXEL + 5000, 1);
    const peaks = peaksOf(wav(input), [100_000]);
    expect(peaks!.samples_per_pixel).toBe(samplesPerPixelFor(input.length));
    expect(peaks!.samples_per_pixel).toBeGreaterThan(MIN_SAMPLES_PER_PIXEL);
    expect(peaks!.length).toBeLessThanOrEqual(MAX_PIXELS);
    expect(peaks!.data).toEqual(expectedData(input, peaks!.samples_per_pixel));
  });

  it('gives no peaks for what is not a 16-bit PCM WAV', () => {
    expect(peaksOf(Buffer.from('<!doctype html><html>not audio at all</html>'), [5])).toBeNull();
    expect(peaksOf(wav(frames(10, 1), { format: 3, bits: 32 }), [])).toBeNull();
    expect(peaksOf(Buffer.alloc(0), [])).toBeNull();
    // Control: the same frames as 16-bit PCM do give peaks.
    expect(peaksOf(wav(frames(10, 1)), [])).not.toBeNull();
  });

  it('a file shorter than its header says gives the peaks of what it holds', () => {
    const input = frames(100, 1);
    const file = wav(input);
    const cut = file.subarray(0, file.length - 100); // the last 50 frames missing
    const peaks = peaksOf(cut, [])!;
    expect(peaks.data).toEqual(expectedData(input.slice(0, 50), MIN_SAMPLES_PER_PIXEL));
    expect(peaks.length).toBe(2);
  });

  it('the WebAssembly kernels give what a plain loop gives: random levels, odd chunk cuts, blocks ending mid-chunk', () => {
    // Block sizes that are not multiples of a vector (37 and 41 frames), chunks from a byte to
    // over the kernels' 16384-frame input, cut inside frames, samples and the header.
    for (const [count, channels] of [
      [365_432, 2],
      [405_000, 1],
      [5_003, 2],
      [777, 1],
    ] as const) {
      const input = levelledNoise(count, channels, count);
      const file = wav(input, { list: count % 2 === 0 });
      const spp = samplesPerPixelFor(count);
      const expected = expectedData(input, spp);
      for (const seed of [1, 2, 3]) {
        const cuts = randomCuts(file.length, seed === 1 ? 7 : 60, seed * count);
        const peaks = peaksOf(file, cuts)!;
        expect(peaks).toMatchObject({ channels, samples_per_pixel: spp, length: Math.ceil(count / spp) });
        expect(peaks.data).toEqual(expected);
      }
    }
    // Control: the blocks' extremes differ (the signal is no full-scale noise every block shares).
    const stereo = expectedData(levelledNoise(365_432, 2, 365_432), samplesPerPixelFor(365_432));
    expect(new Set(stereo).size).toBeGreaterThan(200);
  });

  it("more than two channels (not the converter's, a plain loop): min/max per channel", () => {
    const input = levelledNoise(1000, 3, 9);
    expect(peaksOf(wav(input), [101, 333])!.data).toEqual(expectedData(input, MIN_SAMPLES_PER_PIXEL));
  });
});
