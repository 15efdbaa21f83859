import type { WavHeader } from '../tools/wav.js';
import { instantiateAudioKernels, type AudioKernels as Kernels } from './audio-kernels.js';
import { createFrameReader } from './wav-frames.js';

/**
 * EBU R128 loudness of a WAV (ITU-R BS.1770-4, EBU Tech 3341 and 3342), measured from its bytes as
 * they stream past: the conversion feeds it as ffmpeg writes the WAV (src/jobs/fetch/convert.ts; no
 * second decode: the converter's WAV is the decode). Results agree with ffmpeg's ebur128 filter,
 * whose rules it follows where the standards leave a choice:
 *
 * - K-weighting: the two biquads of BS.1770 (the high shelf, then the RLB high-pass), their
 *   coefficients computed for the file's sample rate by the bilinear transform of their analogue
 *   prototypes, as libebur128 does (at 48 kHz they are BS.1770's tables). Channels are weighted 1
 *   (mono or stereo: what the converter writes; other channel counts are not measured).
 * - Gating blocks: 400 ms, a new one every 100 ms (75 % overlap), counted from the file's first
 *   sample; a trailing part shorter than 100 ms ends no block. Integrated loudness: blocks at or
 *   above -70 LUFS, then those at or above the relative gate, -10 LU under their mean power.
 * - Loudness range: 3 s short-term blocks, a new one every 100 ms; those at or above -70 LUFS, then
 *   at or above -20 LU under their mean power; the 10th to the 95th percentile of their loudness.
 * - Memory is flat: the blocks' loudnesses go into histograms of 0.01 LU bins from -70 to +10 LUFS
 *   (8001 bins, as ffmpeg's), not a list. A block counts in the bin under its loudness and the
 *   gated mean uses each bin's lower edge, so the integrated loudness reads at most 0.01 LU low,
 *   0.005 LU on average, and the range's ends move by at most one bin each; the relative gates'
 *   thresholds themselves come from the exact powers.
 * - True peak: BS.1770-4 Annex 2's interpolator (48 taps, 4 phases of 12) at rates under 96 kHz,
 *   its half-sample phases only (2x) under 192 kHz, the samples alone above; the samples
 *   themselves count too. Computed in exact integers (the taps are multiples of 2^-13), and most
 *   of it skipped exactly: an interpolated value is at most (the sum of its phase's |taps|) x (the
 *   largest |sample| under the taps), so a run of samples whose bound cannot exceed the peak found
 *   so far needs no filtering.
 * - The per-sample loops (the K-weighting, the true peak) are WebAssembly with SIMD128, built from
 *   wasm/loudness-kernels.c (`npm run build:wasm`); the gating, here, sees one sum per 100 ms step.
 *   A step's sum is the same whatever the chunks its frames came in, so the results are too.
 *
 * A file with no block over the absolute gate (shorter than 400 ms, or quieter than -70 LUFS)
 * has an integrated loudness of -70 LUFS and a range of 0 LU, as ffmpeg says; digital silence
 * (no sample but 0) has no loudness at all: finish() returns null, as it does for a file that is
 * not a mono or stereo 16-bit PCM WAV.
 */
export interface Loudness {
  /** Integrated loudness, LUFS. */
  integratedLufs: number;
  /** Loudness range, LU. */
  rangeLu: number;
  /** True peak, the highest of the channels, dBTP. */
  truePeakDbtp: number;
}

export interface LoudnessMeter {
  /** The file's next bytes, from its first; a chunk may end anywhere (inside a sample or the header). */
  update(chunk: Buffer): void;
  finish(): Loudness | null;
}

const ABSOLUTE_GATE_LUFS = -70;
const INTEGRATED_RELATIVE_GATE_LU = -10;
const RANGE_RELATIVE_GATE_LU = -20;
const RANGE_LOW_PERCENT = 10;
const RANGE_HIGH_PERCENT = 95;
const HISTOGRAM_TOP_LUFS = 10;
const BINS_PER_LU = 100;
const BINS = (HISTOGRAM_TOP_LUFS - ABSOLUTE_GATE_LUFS) * BINS_PER_LU + 1;
/** Each bin's loudness (its lower edge) and power. */
const BIN_LOUDNESS = Float64Array.from({ length: BINS }, (_, i) => i / BINS_PER_LU + ABSOLUTE_GATE_LUFS);
const BIN_POWER = BIN_LOUDNESS.map((lufs) => power(lufs));
/** 100 ms steps per momentary block (400 ms) and per short-term block (3 s). */
const MOMENTARY_STEPS = 4;
const SHORT_TERM_STEPS = 30;
/** Added to every block's summed power (as ffmpeg does), so that silence has a finite loudness far under the gate. */
const POWER_FLOOR = 1e-12;
/** The kernels' true peak is an integer in units of 2^-28 full scale (see loudness-kernels.c). */
const PEAK_UNIT = 2 ** -28;

function loudnessOf(meanPower: number): number {
  return -0.691 + 10 * Math.log10(meanPower);
}

function power(lufs: number): number {
  return 10 ** ((lufs + 0.691) / 10);
}

function binOf(lufs: number): number {
  return Math.min(BINS - 1, Math.max(0, Math.trunc((lufs - ABSOLUTE_GATE_LUFS) * BINS_PER_LU)));
}

/** K-weighting's two biquads for a sample rate (libebur128's derivation): b0 b1 b2 a1 a2 of the shelf, a1 a2 of the high-pass. */
function kWeighting(sampleRate: number): Float64Array {
  let f0 = 1681.974450955533;
  const gain = 3.999843853973347;
  let q = 0.7071752369554196;
  let k = Math.tan((Math.PI * f0) / sampleRate);
  const vh = 10 ** (gain / 20);
  const vb = vh ** 0.4996667741545416;
  const a0 = 1 + k / q + k * k;
  const b0 = (vh + (vb * k) / q + k * k) / a0;
  const b1 = (2 * (k * k - vh)) / a0;
  const b2 = (vh - (vb * k) / q + k * k) / a0;
  const a1 = (2 * (k * k - 1)) / a0;
  const a2 = (1 - k / q + k * k) / a0;
  f0 = 38.13547087602444;
  q = 0.5003270373238773;
  k = Math.tan((Math.PI * f0) / sampleRate);
  const r0 = 1 + k / q + k * k;
  // The second stage's numerator is 1, -2, 1.
  return Float64Array.of(b0, b1, b2, a1, a2, (2 * (k * k - 1)) / r0, (1 - k / q + k * k) / r0);
}

/** A gate's histogram of block loudnesses, with the exact sum of the blocks' powers. */
class GatedBlocks {
  readonly counts = new Float64Array(BINS);
  powerSum = 0;
  blocks = 0;

  add(meanPower: number): void {
    const lufs = loudnessOf(meanPower);
    if (!(lufs >= ABSOLUTE_GATE_LUFS)) return;
    this.counts[binOf(lufs)]!++;
    this.powerSum += meanPower;
    this.blocks++;
  }

  /** The first bin at or above the relative gate, `gateLu` under the blocks' mean power. */
  gateBin(gateLu: number): number {
    return binOf(loudnessOf(this.powerSum / this.blocks || POWER_FLOOR) + gateLu);
  }

  integrated(): number {
    if (this.blocks === 0) return ABSOLUTE_GATE_LUFS;
    let count = 0;
    let sum = 0;
    for (let i = this.gateBin(INTEGRATED_RELATIVE_GATE_LU); i < BINS; i++) {
      count += this.counts[i]!;
      sum += this.counts[i]! * BIN_POWER[i]!;
    }
    return count > 0 ? loudnessOf(sum / count) : ABSOLUTE_GATE_LUFS;
  }

  range(): number {
    if (this.blocks === 0) return 0;
    const gate = this.gateBin(RANGE_RELATIVE_GATE_LU);
    let kept = 0;
    for (let i = gate; i < BINS; i++) kept += this.counts[i]!;
    if (kept === 0) return 0;
    let low = BIN_LOUDNESS[gate]!;
    const lowRank = Math.trunc((RANGE_LOW_PERCENT * kept) / 100 + 0.5);
    for (let i = gate, seen = 0; i < BINS; i++) {
      seen += this.counts[i]!;
      if (seen >= lowRank) {
        low = BIN_LOUDNESS[i]!;
        break;
      }
    }
    let high = low;
    const highRank = Math.trunc((RANGE_HIGH_PERCENT * kept) / 100 + 0.5);
    for (let i = BINS - 1, above = kept; i >= 0; i--) {
      above -= this.counts[i]!;
      if (above < highRank) {
        high = BIN_LOUDNESS[i]!;
        break;
      }
    }
    return high - low;
  }
}

/** The interpolator's phases for a sample rate: 4x under 96 kHz, 2x (whole and half samples) under 192 kHz, else none. */
function phasesFor(sampleRate: number): number {
  return sampleRate < 96_000 ? 4 : sampleRate < 192_000 ? 2 : 0;
}

export function createLoudnessMeter(): LoudnessMeter {
  let kernels: Kernels | undefined;
  /** The kernels' input, frames interleaved; `maxFrames` of them at a time. */
  let input = new Int16Array(0);
  let maxFrames = 0;
  let channels = 0;
  let stepFrames = 0;
  /** Frames still to go in the current 100 ms step. */
  let stepLeft = 0;
  /** The last SHORT_TERM_STEPS steps' sums, a ring, and how many steps have ended. */
  const steps = new Float64Array(SHORT_TERM_STEPS);
  let stepsEnded = 0;
  const momentary = new GatedBlocks();
  const shortTerm = new GatedBlocks();

  /** A 100 ms step ended with `sum`: the blocks that end with it. */
  function endStep(sum: number): void {
    steps[stepsEnded % SHORT_TERM_STEPS] = sum;
    stepsEnded++;
    stepLeft = stepFrames;
    if (stepsEnded >= MOMENTARY_STEPS) {
      let block = POWER_FLOOR;
      for (let back = 1; back <= MOMENTARY_STEPS; back++) block += steps[(stepsEnded - back) % SHORT_TERM_STEPS]!;
      momentary.add(block / (MOMENTARY_STEPS * stepFrames));
    }
    if (stepsEnded >= SHORT_TERM_STEPS) {
      let block = POWER_FLOOR;
      for (let i = 0; i < SHORT_TERM_STEPS; i++) block += steps[i]!;
      shortTerm.add(block / (SHORT_TERM_STEPS * stepFrames));
    }
  }

  /** Frames already in the kernels' input: weighed step by step, then their true peak. */
  function measure(k: Kernels, frames: number): void {
    for (let f = 0; f < frames;) {
      const stop = Math.min(frames, f + stepLeft);
      k.weigh(f, stop);
      stepLeft -= stop - f;
      f = stop;
      if (stepLeft === 0) endStep(k.take_step_sum());
    }
    k.true_peak(frames);
  }

  const reader = createFrameReader({
    begin(header: WavHeader) {
      if (header.channels !== 1 && header.channels !== 2) return false;
      channels = header.channels;
      stepFrames = Math.round(header.sampleRate / 10);
      stepLeft = stepFrames;
      const k = instantiateAudioKernels();
      maxFrames = k.max_frames();
      input = new Int16Array(k.memory.buffer, k.input_buffer(), maxFrames * channels);
      k.configure(channels, phasesFor(header.sampleRate), ...kWeighting(header.sampleRate));
      kernels = k;
      return true;
    },
    frames(values) {
      const k = kernels!;
      for (let at = 0; at < values.length; at += maxFrames * channels) {
        const part = values.subarray(at, at + maxFrames * channels);
        input.set(part);
        measure(k, part.length / channels);
      }
    },
  });

  return {
    update(chunk) {
      reader.update(chunk);
    },
    finish() {
      const peak = kernels?.peak() ?? 0;
      if (!reader.accepted || peak === 0) return null;
      return {
        integratedLufs: momentary.integrated(),
        rangeLu: shortTerm.range(),
        truePeakDbtp: 20 * Math.log10(peak * PEAK_UNIT),
      };
    },
  };
}
