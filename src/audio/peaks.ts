import type { WavHeader } from '../tools/wav.js';
import { instantiateAudioKernels, type AudioKernels } from './audio-kernels.js';
import { createFrameReader } from './wav-frames.js';

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
 * The per-sample loop, for the converter's mono and stereo, is WebAssembly with SIMD128 (the min
 * and max of 8 samples at a time, in wasm/loudness-kernels.c, the loudness meter's module), so
 * that it costs a small part of the SHA-256 it rides on.
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
  let header: WavHeader | null = null;
  let channels = 0;
  let samplesPerPixel = 0;
  /** min, max per channel per pixel. */
  let data = new Int8Array(0);
  let pixel = 0;
  let frameInPixel = 0;
  let mins = new Int32Array(0);
  let maxs = new Int32Array(0);

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

  /** More than 2 channels (not the converter's): frame by frame, the pixel's extremes in the arrays. */
  function anyFrames(values: Int16Array): void {
    for (let i = 0; i < values.length;) {
      for (let c = 0; c < channels; c++, i++) {
        const value = values[i]!;
        if (value < mins[c]!) mins[c] = value;
        if (value > maxs[c]!) maxs[c] = value;
      }
      if (++frameInPixel === samplesPerPixel) emitPixel();
    }
  }

  /** Mono and stereo, the converter's: the WebAssembly kernels, MAX_FRAMES frames at a time through their input. */
  let kernels: AudioKernels | undefined;
  let input = new Int16Array(0);
  let output = new Int8Array(0);
  let maxFrames = 0;

  /** The pixels the kernels' last call ended, into the data. */
  function takePixels(ended: number): void {
    data.set(output.subarray(0, ended * channels * 2), pixel * channels * 2);
    pixel += ended;
  }

  function kernelFrames(k: AudioKernels, values: Int16Array): void {
    for (let at = 0; at < values.length; at += maxFrames * channels) {
      const part = values.subarray(at, at + maxFrames * channels);
      input.set(part);
      takePixels(k.peaks(part.length / channels));
    }
  }

  const reader = createFrameReader({
    begin(h) {
      header = h;
      channels = h.channels;
      const frames = Math.floor(h.dataBytes / (2 * channels));
      samplesPerPixel = samplesPerPixelFor(frames);
      data = new Int8Array(Math.ceil(frames / samplesPerPixel) * channels * 2);
      if (channels <= 2) {
        const k = instantiateAudioKernels();
        // The kernels refuse only what this never asks (other channel counts, blocks under 32 frames): no peaks then.
        if (!k.peaks_configure(channels, samplesPerPixel)) return false;
        maxFrames = k.max_frames();
        input = new Int16Array(k.memory.buffer, k.input_buffer(), maxFrames * channels);
        output = new Int8Array(
          k.memory.buffer,
          k.peaks_output(),
          (Math.ceil(maxFrames / samplesPerPixel) + 1) * channels * 2,
        );
        kernels = k;
      } else {
        mins = new Int32Array(channels);
        maxs = new Int32Array(channels);
        resetPixel();
      }
      return true;
    },
    frames(values) {
      if (kernels) kernelFrames(kernels, values);
      else anyFrames(values);
    },
  });

  return {
    update(chunk) {
      reader.update(chunk);
    },
    finish() {
      if (!reader.accepted || !header) return null;
      if (kernels) takePixels(kernels.peaks_flush());
      else if (frameInPixel > 0) emitPixel();
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

/** The peaks as the bytes of peaks.json. */
export function peaksJsonBytes(peaks: WaveformPeaks): Buffer {
  return Buffer.from(JSON.stringify(peaks));
}
