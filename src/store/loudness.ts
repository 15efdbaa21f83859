import type { WavHeader } from '../tools/wav.js';
import { createFrameReader } from './wav-frames.js';

/**
 * EBU R128 loudness of a WAV (ITU-R BS.1770-4, EBU Tech 3341 and 3342), measured from its bytes as
 * they stream past: the store's hash loop feeds it, as it feeds the peaks (no second read, no
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
 *   themselves count too. Most of its cost is avoided exactly: an interpolated value is at most
 *   (the sum of its phase's |taps|) x (the largest |sample| under the taps), so a run of samples
 *   whose bound cannot exceed the peak found so far needs no filtering.
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
const SAMPLE_SCALE = 1 / 32768;

function loudnessOf(meanPower: number): number {
  return -0.691 + 10 * Math.log10(meanPower);
}

function power(lufs: number): number {
  return 10 ** ((lufs + 0.691) / 10);
}

function binOf(lufs: number): number {
  return Math.min(BINS - 1, Math.max(0, Math.trunc((lufs - ABSOLUTE_GATE_LUFS) * BINS_PER_LU)));
}

/**
 * BS.1770-4 Annex 2's interpolation filter, its four phases of 12 taps. Phase 3 is phase 0
 * reversed, and phase 2 is phase 1 reversed: the filter is symmetric.
 */
const PHASE_0 = [
  0.001708984375, 0.010986328125, -0.0196533203125, 0.033203125, -0.0594482421875, 0.1373291015625, 0.97216796875,
  -0.102294921875, 0.047607421875, -0.026611328125, 0.014892578125, -0.00830078125,
];
const PHASE_1 = [
  -0.0291748046875, 0.029296875, -0.0517578125, 0.089111328125, -0.16650390625, 0.465087890625, 0.77978515625,
  -0.2003173828125, 0.1015625, -0.0582275390625, 0.0330810546875, -0.0189208984375,
];
const TAPS = 12;
const HISTORY = TAPS - 1;
const reversed = (taps: number[]) => [...taps].reverse();
const absSum = (taps: number[]) => taps.reduce((sum, tap) => sum + Math.abs(tap), 0);
/**
 * The pairs (phase 0, phase 3) and (phase 1, phase 2) through sums and differences of the samples
 * symmetric about the window's middle: for taps h and the window a, Σ h[k]·a[k] and
 * Σ h[11-k]·a[k] are (S + D)/2 and (S - D)/2, where S = Σ_{k<6} (h[k] + h[11-k])·(a[k] + a[11-k])
 * and D = Σ_{k<6} (h[k] - h[11-k])·(a[k] - a[11-k]); the larger magnitude of the two is
 * (|S| + |D|)/2. Half the multiplications of the four phases' dot products.
 */
const even = (taps: number[], k: number) => taps[k]! + taps[TAPS - 1 - k]!;
const odd = (taps: number[], k: number) => taps[k]! - taps[TAPS - 1 - k]!;
const [E00, E01, E02, E03, E04, E05] = [0, 1, 2, 3, 4, 5].map((k) => even(PHASE_0, k)) as Six;
const [O00, O01, O02, O03, O04, O05] = [0, 1, 2, 3, 4, 5].map((k) => odd(PHASE_0, k)) as Six;
const [E10, E11, E12, E13, E14, E15] = [0, 1, 2, 3, 4, 5].map((k) => even(PHASE_1, k)) as Six;
const [O10, O11, O12, O13, O14, O15] = [0, 1, 2, 3, 4, 5].map((k) => odd(PHASE_1, k)) as Six;
type Six = [number, number, number, number, number, number];
/** Samples per run for the pruning bound. */
const RUN = 32;

interface Oversampling {
  /** The phases computed (for 2x: the ones at whole and half samples), as tap arrays. */
  phases: number[][];
  /** The largest sum of |taps| among them: the bound's factor. */
  bound: number;
}

function oversamplingFor(sampleRate: number): Oversampling {
  const phases =
    sampleRate < 96_000
      ? [PHASE_0, PHASE_1, reversed(PHASE_1), reversed(PHASE_0)]
      : sampleRate < 192_000
        ? [PHASE_0, reversed(PHASE_1)]
        : [];
  return { phases, bound: Math.max(1, ...phases.map(absSum)) };
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

export function createLoudnessMeter(): LoudnessMeter {
  let channels = 0;
  let stepFrames = 0;
  let coefficients = kWeighting(48_000);
  let oversampling = oversamplingFor(48_000);
  /** Per channel (left, right): x1 x2 (input), y1 y2 (after the shelf), z1 z2 (after the high-pass). */
  const filterState = new Float64Array(12);
  /** Frames still to go in the current 100 ms step, and the step's weighted sum of squares so far. */
  let stepLeft = 0;
  let stepSum = 0;
  /** The last SHORT_TERM_STEPS steps' sums, a ring, and how many steps have ended. */
  const steps = new Float64Array(SHORT_TERM_STEPS);
  let stepsEnded = 0;
  const momentary = new GatedBlocks();
  const shortTerm = new GatedBlocks();
  /** The largest |sample| and the largest interpolated magnitude seen, in full scale. */
  let peak = 0;
  /** Per channel, the last HISTORY samples (full scale) before the current array, and the samples themselves. */
  let history = new Float64Array(0);
  let window = new Float64Array(0);
  let runMaxima = new Float64Array(0);

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

  /** K-weighted sums of squares of `values` (interleaved), handed on step by step. */
  function weigh(values: Int16Array): void {
    const frames = values.length / channels;
    const weighFrames = channels === 2 ? weighStereo : weighMono;
    for (let f = 0; f < frames;) {
      const stop = Math.min(frames, f + stepLeft);
      stepSum += weighFrames(values, f, stop, coefficients, filterState);
      stepLeft -= stop - f;
      f = stop;
      if (stepLeft === 0) {
        endStep(stepSum);
        stepSum = 0;
      }
    }
  }

  /**
   * The true peak over `values`, channel by channel: the channel's samples after its last
   * HISTORY ones (the window), the largest |sample| of each run of RUN window entries, then the
   * filter over the runs whose bound could exceed the peak so far. The peak stays in a local
   * variable throughout (a closure's number would be boxed at every store).
   */
  function truePeak(values: Int16Array): void {
    const frames = values.length / channels;
    const length = HISTORY + frames;
    const runs = Math.ceil(length / RUN);
    if (window.length < length) {
      window = new Float64Array(length);
      runMaxima = new Float64Array(runs + 1);
    }
    let best = peak;
    for (let c = 0; c < channels; c++) {
      window.set(history.subarray(c * HISTORY, (c + 1) * HISTORY));
      best = Math.max(best, fillWindow(values, c, channels, window, length, runMaxima, runs));
      runMaxima[runs] = 0;
      best = filterRuns(window, frames, runMaxima, oversampling, best);
      history.set(window.subarray(length - HISTORY, length), c * HISTORY);
    }
    peak = best;
  }

  const reader = createFrameReader({
    begin(header: WavHeader) {
      if (header.channels !== 1 && header.channels !== 2) return false;
      channels = header.channels;
      stepFrames = Math.round(header.sampleRate / 10);
      stepLeft = stepFrames;
      coefficients = kWeighting(header.sampleRate);
      oversampling = oversamplingFor(header.sampleRate);
      history = new Float64Array(HISTORY * channels);
      return true;
    },
    frames(values) {
      weigh(values);
      truePeak(values);
    },
  });

  return {
    update(chunk) {
      reader.update(chunk);
    },
    finish() {
      if (!reader.accepted || peak === 0) return null;
      return {
        integratedLufs: momentary.integrated(),
        rangeLu: shortTerm.range(),
        truePeakDbtp: 20 * Math.log10(peak),
      };
    },
  };
}

/** The largest magnitude among `peak` and the four phases' outputs from..to-1 over `w`. */
function interpolatedPeak4(w: Float64Array, from: number, to: number, peak: number): number {
  let twice = 2 * peak;
  for (let o = from; o < to; o++) {
    const a0 = w[o]!;
    const a1 = w[o + 1]!;
    const a2 = w[o + 2]!;
    const a3 = w[o + 3]!;
    const a4 = w[o + 4]!;
    const a5 = w[o + 5]!;
    const a6 = w[o + 6]!;
    const a7 = w[o + 7]!;
    const a8 = w[o + 8]!;
    const a9 = w[o + 9]!;
    const a10 = w[o + 10]!;
    const a11 = w[o + 11]!;
    const s0 = a0 + a11;
    const s1 = a1 + a10;
    const s2 = a2 + a9;
    const s3 = a3 + a8;
    const s4 = a4 + a7;
    const s5 = a5 + a6;
    const d0 = a0 - a11;
    const d1 = a1 - a10;
    const d2 = a2 - a9;
    const d3 = a3 - a8;
    const d4 = a4 - a7;
    const d5 = a5 - a6;
    const even0 = E00 * s0 + E01 * s1 + E02 * s2 + E03 * s3 + E04 * s4 + E05 * s5;
    const odd0 = O00 * d0 + O01 * d1 + O02 * d2 + O03 * d3 + O04 * d4 + O05 * d5;
    const even1 = E10 * s0 + E11 * s1 + E12 * s2 + E13 * s3 + E14 * s4 + E15 * s5;
    const odd1 = O10 * d0 + O11 * d1 + O12 * d2 + O13 * d3 + O14 * d4 + O15 * d5;
    twice = Math.max(twice, Math.abs(even0) + Math.abs(odd0), Math.abs(even1) + Math.abs(odd1));
  }
  return twice / 2;
}

/** The same for any set of phases, tap by tap. */
function interpolatedPeak(w: Float64Array, from: number, to: number, peak: number, phases: number[][]): number {
  let result = peak;
  for (let o = from; o < to; o++) {
    for (const taps of phases) {
      let sum = 0;
      for (let k = 0; k < TAPS; k++) sum += taps[k]! * w[o + k]!;
      result = Math.max(result, Math.abs(sum));
    }
  }
  return result;
}

/**
 * The K-weighting of stereo frames from..to-1 of `values`, every filter state in local variables
 * (`state`: per channel x1 x2 y1 y2 z1 z2); returns their sum of squares. The hot loops are
 * functions of their own, run to the end each call, so that the compiler sees all their paths.
 */
function weighStereo(values: Int16Array, from: number, to: number, k: Float64Array, state: Float64Array): number {
  const [b0, b1, b2, a1, a2, c1, c2] = [k[0]!, k[1]!, k[2]!, k[3]!, k[4]!, k[5]!, k[6]!];
  let [lx1, lx2, ly1, ly2, lz1, lz2] = [state[0]!, state[1]!, state[2]!, state[3]!, state[4]!, state[5]!];
  let [rx1, rx2, ry1, ry2, rz1, rz2] = [state[6]!, state[7]!, state[8]!, state[9]!, state[10]!, state[11]!];
  let sum = 0;
  for (let i = 2 * from, end = 2 * to; i < end; i += 2) {
    const lx = values[i]! * SAMPLE_SCALE;
    const rx = values[i + 1]! * SAMPLE_SCALE;
    const ly = b0 * lx + b1 * lx1 + b2 * lx2 - a1 * ly1 - a2 * ly2;
    const ry = b0 * rx + b1 * rx1 + b2 * rx2 - a1 * ry1 - a2 * ry2;
    const lz = ly - 2 * ly1 + ly2 - c1 * lz1 - c2 * lz2;
    const rz = ry - 2 * ry1 + ry2 - c1 * rz1 - c2 * rz2;
    lx2 = lx1;
    lx1 = lx;
    ly2 = ly1;
    ly1 = ly;
    lz2 = lz1;
    lz1 = lz;
    rx2 = rx1;
    rx1 = rx;
    ry2 = ry1;
    ry1 = ry;
    rz2 = rz1;
    rz1 = rz;
    sum += lz * lz + rz * rz;
  }
  state[0] = lx1;
  state[1] = lx2;
  state[2] = ly1;
  state[3] = ly2;
  state[4] = lz1;
  state[5] = lz2;
  state[6] = rx1;
  state[7] = rx2;
  state[8] = ry1;
  state[9] = ry2;
  state[10] = rz1;
  state[11] = rz2;
  return sum;
}

/** The same for mono frames. */
function weighMono(values: Int16Array, from: number, to: number, k: Float64Array, state: Float64Array): number {
  const [b0, b1, b2, a1, a2, c1, c2] = [k[0]!, k[1]!, k[2]!, k[3]!, k[4]!, k[5]!, k[6]!];
  let [x1, x2, y1, y2, z1, z2] = [state[0]!, state[1]!, state[2]!, state[3]!, state[4]!, state[5]!];
  let sum = 0;
  for (let i = from; i < to; i++) {
    const x = values[i]! * SAMPLE_SCALE;
    const y = b0 * x + b1 * x1 + b2 * x2 - a1 * y1 - a2 * y2;
    const z = y - 2 * y1 + y2 - c1 * z1 - c2 * z2;
    x2 = x1;
    x1 = x;
    y2 = y1;
    y1 = y;
    z2 = z1;
    z1 = z;
    sum += z * z;
  }
  state[0] = x1;
  state[1] = x2;
  state[2] = y1;
  state[3] = y2;
  state[4] = z1;
  state[5] = z2;
  return sum;
}

/**
 * Channel `channel` of `values` into `window` after its first HISTORY entries (the samples before
 * them, already there), in full scale, and the largest |sample| of each run of RUN entries of the
 * window into `runMaxima`; returns the largest of all.
 */
function fillWindow(
  values: Int16Array,
  channel: number,
  channels: number,
  window: Float64Array,
  length: number,
  runMaxima: Float64Array,
  runs: number,
): number {
  let max = 0;
  for (let w = 0; w < HISTORY; w++) max = Math.max(max, Math.abs(window[w]!));
  let all = 0;
  for (let r = 0, w = HISTORY, i = channel; r < runs; r++) {
    for (const end = Math.min(length, (r + 1) * RUN); w < end; w++, i += channels) {
      const x = values[i]! * SAMPLE_SCALE;
      window[w] = x;
      max = Math.max(max, Math.abs(x));
    }
    runMaxima[r] = max;
    all = Math.max(all, max);
    max = 0;
  }
  return all;
}

/**
 * The largest of `peak` and the interpolated values of outputs 0..frames-1 over `window` (output o
 * filters window[o .. o + HISTORY], so the outputs of run r reach into run r + 1), skipping every
 * run whose bound cannot exceed the largest so far.
 */
function filterRuns(
  window: Float64Array,
  frames: number,
  runMaxima: Float64Array,
  o: Oversampling,
  peak: number,
): number {
  let best = peak;
  for (let r = 0; r * RUN < frames; r++) {
    if (o.bound * Math.max(runMaxima[r]!, runMaxima[r + 1]!) <= best) continue;
    const from = r * RUN;
    const to = Math.min(frames, from + RUN);
    best =
      o.phases.length === 4
        ? interpolatedPeak4(window, from, to, best)
        : interpolatedPeak(window, from, to, best, o.phases);
  }
  return best;
}
