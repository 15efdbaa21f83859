import { parseWavHeader, type WavHeader } from '../tools/wav.js';

/**
 * Waveform peaks of a WAV, computed from its bytes as they stream past (the store's hash loop
 * feeds them: no second read), in BBC audiowaveform's JSON format (version 2), which peaks.js,
 * waveform-data and wavesurfer.js read as it is:
 *   {"version":2,"channels":C,"sample_rate":R,"samples_per_pixel":N,"bits":8,"length":L,
 *    "data":[c0min,c0max,c1min,c1max,... per pixel]}
 *
 * Resolution: `samples_per_pixel` is chosen from the duration (the header's data size) so that the
 * whole file is at most MAX_PIXELS pixels, but never finer than MIN_SAMPLES_PER_PIXEL: a 3-hour
 * file still gets MAX_PIXELS pixels (about a second each, several screens wide), a 3-second one
 * a few thousand (under a millisecond each). The pixel count, so memory and the JSON's size, is
 * bounded whatever the length.
 *
 * 8 bits per value (-128..127, the 16-bit sample's high byte): a waveform is drawn at most a few
 * hundred pixels tall, so 8 bits lose nothing visible and halve the JSON of 16.
 *
 * Only what the converter writes is read: integer PCM, 16 bits. Any other WAV, or bytes that are
 * not a WAV, give no peaks (finish() returns null); a file shorter than its header says gives the
 * peaks of what it holds.
 */
export const PEAKS_BITS = 8;
export const MAX_PIXELS = 10_000;
export const MIN_SAMPLES_PER_PIXEL = 32;
/** More than the largest peaks.json: MAX_PIXELS pixels of two channels, each value at most "-128,". */
export const MAX_PEAKS_JSON_BYTES = MAX_PIXELS * 2 * 2 * 5 + 1024;
/** A header that has not reached its data chunk within this many bytes is not the converter's. */
const MAX_HEADER_BYTES = 64 * 1024;
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

export interface WaveformPeaks {
  version: 2;
  channels: number;
  sample_rate: number;
  samples_per_pixel: number;
  bits: number;
  length: number;
  data: number[];
}

export interface PeaksAccumulator {
  /** The file's next bytes, from its first; a chunk may end anywhere (inside a sample or the header). */
  update(chunk: Buffer): void;
  /** The peaks of everything pushed, or null when the bytes are not a 16-bit PCM WAV. */
  finish(): WaveformPeaks | null;
}

/** Samples per pixel for a file of `frames` frames: at most MAX_PIXELS pixels, at least MIN_SAMPLES_PER_PIXEL frames each. */
export function samplesPerPixelFor(frames: number): number {
  return Math.max(MIN_SAMPLES_PER_PIXEL, Math.ceil(frames / MAX_PIXELS));
}

export function createPeaksAccumulator(): PeaksAccumulator {
  let headerBytes: Buffer[] = [];
  let headerLength = 0;
  let failed = false;
  let header: WavHeader | null = null;
  /** Bytes of the data chunk still to come. */
  let dataLeft = 0;
  let channels = 0;
  let samplesPerPixel = 0;
  /** min, max per channel per pixel. */
  let data = new Int8Array(0);
  let pixel = 0;
  let frameInPixel = 0;
  let channel = 0;
  let mins = new Int32Array(0);
  let maxs = new Int32Array(0);
  /** A sample's first byte, when a chunk ended between its two. */
  let carry: number | null = null;
  /** Where a chunk's samples are copied when they do not start on an even address. */
  let aligned = Buffer.alloc(0);

  function resetPixel(): void {
    mins.fill(0x7fff);
    maxs.fill(-0x8000);
    frameInPixel = 0;
  }

  function emitPixel(): void {
    const base = pixel * channels * 2;
    for (let c = 0; c < channels; c++) {
      // The high byte of each 16-bit extreme: an arithmetic shift, as audiowaveform does.
      data[base + 2 * c] = mins[c]! >> 8;
      data[base + 2 * c + 1] = maxs[c]! >> 8;
    }
    pixel++;
    resetPixel();
  }

  function sample(value: number): void {
    if (value < mins[channel]!) mins[channel] = value;
    if (value > maxs[channel]!) maxs[channel] = value;
    if (++channel === channels) {
      channel = 0;
      if (++frameInPixel === samplesPerPixel) emitPixel();
    }
  }

  /**
   * Whole pixels in a loop of their own per channel count, the extremes in local variables: it runs
   * once per sample of the file. Samples before the first frame boundary and after the last one
   * go one by one.
   */
  function frames(values: Int16Array): void {
    let i = 0;
    const n = values.length;
    while (i < n && channel !== 0) sample(values[i++]!);
    const end = i + Math.floor((n - i) / channels) * channels;
    if (channels === 1) i = monoFrames(values, i, end);
    else if (channels === 2) i = stereoFrames(values, i, end);
    while (i < n) sample(values[i++]!);
  }

  function monoFrames(values: Int16Array, from: number, end: number): number {
    let i = from;
    while (i < end) {
      const stop = Math.min(end, i + (samplesPerPixel - frameInPixel));
      let min = mins[0]!;
      let max = maxs[0]!;
      for (let j = i; j < stop; j++) {
        const value = values[j]!;
        if (value < min) min = value;
        if (value > max) max = value;
      }
      mins[0] = min;
      maxs[0] = max;
      frameInPixel += stop - i;
      i = stop;
      if (frameInPixel === samplesPerPixel) emitPixel();
    }
    return i;
  }

  function stereoFrames(values: Int16Array, from: number, end: number): number {
    // A frame is one 32-bit word when it starts on a 4-byte address (the usual case: the data
    // chunk and the store's reads start on one): one read per frame instead of two.
    const words =
      (values.byteOffset + from * 2) % 4 === 0
        ? new Int32Array(values.buffer, values.byteOffset + from * 2, (end - from) / 2)
        : null;
    let i = from;
    while (i < end) {
      const stop = Math.min(end, i + 2 * (samplesPerPixel - frameInPixel));
      let leftMin = mins[0]!;
      let leftMax = maxs[0]!;
      let rightMin = mins[1]!;
      let rightMax = maxs[1]!;
      if (words) {
        for (let j = (i - from) / 2, last = (stop - from) / 2; j < last; j++) {
          const frame = words[j]!;
          const left = (frame << 16) >> 16;
          const right = frame >> 16;
          if (left < leftMin) leftMin = left;
          if (left > leftMax) leftMax = left;
          if (right < rightMin) rightMin = right;
          if (right > rightMax) rightMax = right;
        }
      } else {
        for (let j = i; j < stop; j += 2) {
          const left = values[j]!;
          const right = values[j + 1]!;
          if (left < leftMin) leftMin = left;
          if (left > leftMax) leftMax = left;
          if (right < rightMin) rightMin = right;
          if (right > rightMax) rightMax = right;
        }
      }
      mins[0] = leftMin;
      maxs[0] = leftMax;
      mins[1] = rightMin;
      maxs[1] = rightMax;
      frameInPixel += (stop - i) / 2;
      i = stop;
      if (frameInPixel === samplesPerPixel) emitPixel();
    }
    return i;
  }

  function samples(bytes: Buffer): void {
    let start = 0;
    if (carry !== null && bytes.length > 0) {
      sample(((bytes[0]! << 24) >> 16) | carry);
      start = 1;
      carry = null;
    }
    const whole = (bytes.length - start) & ~1;
    if (whole > 0) {
      let view = bytes.subarray(start, start + whole);
      if (!LITTLE_ENDIAN) {
        for (let i = 0; i < whole; i += 2) sample(view.readInt16LE(i));
      } else {
        if (view.byteOffset % 2 !== 0) {
          if (aligned.length < whole) aligned = Buffer.alloc(whole);
          view.copy(aligned, 0, 0, whole);
          view = aligned.subarray(0, whole);
        }
        frames(new Int16Array(view.buffer, view.byteOffset, whole / 2));
      }
    }
    if (start + whole < bytes.length) carry = bytes[bytes.length - 1]!;
  }

  function begin(h: WavHeader): boolean {
    if (h.audioFormat !== 1 || h.bitsPerSample !== 16) return false;
    header = h;
    channels = h.channels;
    dataLeft = h.dataBytes;
    const frames = Math.floor(h.dataBytes / (2 * channels));
    samplesPerPixel = samplesPerPixelFor(frames);
    data = new Int8Array(Math.ceil(frames / samplesPerPixel) * channels * 2);
    mins = new Int32Array(channels);
    maxs = new Int32Array(channels);
    resetPixel();
    return true;
  }

  function takeData(chunk: Buffer): void {
    if (dataLeft <= 0) return;
    const part = chunk.length > dataLeft ? chunk.subarray(0, dataLeft) : chunk;
    dataLeft -= part.length;
    samples(part);
  }

  return {
    update(chunk) {
      if (failed || chunk.length === 0) return;
      if (header) return takeData(chunk);
      headerBytes.push(chunk);
      headerLength += chunk.length;
      const start = Buffer.concat(headerBytes, headerLength);
      let parsed: WavHeader;
      try {
        parsed = parseWavHeader(start);
      } catch {
        // Not yet the whole header, or not a WAV: wait for more, up to a bound.
        if (headerLength >= MAX_HEADER_BYTES || (headerLength >= 12 && !looksLikeWav(start))) failed = true;
        return;
      }
      headerBytes = [];
      if (!begin(parsed)) {
        failed = true;
        return;
      }
      takeData(start.subarray(parsed.dataOffset));
    },
    finish() {
      if (failed || !header) return null;
      if (frameInPixel > 0) emitPixel();
      return {
        version: 2,
        channels,
        sample_rate: header.sampleRate,
        samples_per_pixel: samplesPerPixel,
        bits: PEAKS_BITS,
        length: pixel,
        data: Array.from(data.subarray(0, pixel * channels * 2)),
      };
    },
  };
}

function looksLikeWav(start: Buffer): boolean {
  return start.toString('latin1', 0, 4) === 'RIFF' && start.toString('latin1', 8, 12) === 'WAVE';
}

/** The peaks as the bytes of peaks.json. */
export function peaksJsonBytes(peaks: WaveformPeaks): Buffer {
  return Buffer.from(JSON.stringify(peaks));
}
