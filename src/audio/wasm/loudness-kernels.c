/*
 * The store's per-sample audio loops, as WebAssembly with SIMD128: the loudness meter's
 * (src/audio/loudness.ts) K-weighting of both channels at once (f64x2, left and right in the two
 * lanes) and BS.1770-4 Annex 2 true-peak interpolator in exact integer arithmetic
 * (i32x4.dot_i16x8_s), and the waveform peaks' (src/audio/peaks.ts) min/max per pixel (at the end).
 * Rebuilt by `npm run build:wasm` (scripts/build-wasm.sh); the .wasm beside this file is committed.
 *
 * The caller writes up to MAX_FRAMES interleaved 16-bit frames at input_buffer(), then calls
 * weigh() over spans of them (the 100 ms steps' boundaries are the caller's) and true_peak() once
 * over all of them. All state is static: one instance meters one file (or takes one file's peaks).
 * Nothing is allocated.
 *
 * True peak: the Annex 2 taps are multiples of 2^-13 and the samples multiples of 2^-15, so with
 * taps as 16-bit integers (x 8192) and samples as they are, every interpolated value is an exact
 * 32-bit integer in units of 2^-28 full scale: |sum| <= 16571 x 32768 < 2^31. The samples themselves
 * count too, x 8192 in the same units. Most of the filtering is skipped exactly: an interpolated
 * value is at most (the largest sum of its phase's |taps|) x (the largest |sample| under the taps),
 * so a run of RUN outputs whose bound cannot exceed the peak found so far is not filtered.
 */
#include <stdint.h>
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))
#define INLINE static inline __attribute__((always_inline))

#define MAX_FRAMES 16384
#define TAPS 12
#define HISTORY (TAPS - 1)
/* Outputs per run of the pruning bound; a multiple of BLOCK. */
#define RUN 32
/* Outputs per SIMD step of the interpolator: even ones in one i32x4, odd ones in another. */
#define BLOCK 8
#define WINDOW (HISTORY + MAX_FRAMES)
#define RUNS ((WINDOW + RUN - 1) / RUN)

/* Interleaved frames from the caller; 8 frames more, so that the last deinterleaving step may read past the end. */
static int16_t input[2 * (MAX_FRAMES + 8)] __attribute__((aligned(16)));
/* Per channel: the HISTORY samples before the current frames, the frames, zeros to the next run's end and one run more. */
static int16_t window[2][RUNS * RUN + RUN] __attribute__((aligned(16)));
/* The largest |sample| of each run of RUN window entries, and a 0 after the last. */
static int32_t run_max[RUNS + 1];

static int channels;
/* K-weighting: b0 b1 b2 a1 a2 of the high shelf, then a1 a2 of the high-pass (its numerator is 1, -2, 1). */
static double k[7];
/* Filter state, lanes (left, right): input, after the shelf, after the high-pass; each the last two values. */
static v128_t x1, x2, y1, y2, z1, z2;
/* Per lane, the sum of squares of the current 100 ms step so far. */
static v128_t step_sum;
static int phase_count;
/* The largest |sample| x 8192 and interpolated magnitude so far, in units of 2^-28 full scale. */
static int32_t best;

/* Two adjacent taps as one i32 lane for i32x4.dot_i16x8_s. */
#define PAIR(a, b) ((int32_t)((uint32_t)(uint16_t)(int16_t)(a) | ((uint32_t)(uint16_t)(int16_t)(b) << 16)))
#define PHASE_0(P) P(14, 90), P(-161, 272), P(-487, 1125), P(7964, -838), P(390, -218), P(122, -68)
#define PHASE_1(P) P(-239, 240), P(-424, 730), P(-1364, 3810), P(6388, -1641), P(832, -477), P(271, -155)
#define PHASE_2(P) P(-155, 271), P(-477, 832), P(-1641, 6388), P(3810, -1364), P(730, -424), P(240, -239)
#define PHASE_3(P) P(-68, 122), P(-218, 390), P(-838, 7964), P(1125, -487), P(272, -161), P(90, 14)
/* All four phases (rates under 96 kHz), and those at whole and half samples (under 192 kHz). */
static const int32_t PAIRS_4[4][TAPS / 2] = {{PHASE_0(PAIR)}, {PHASE_1(PAIR)}, {PHASE_2(PAIR)}, {PHASE_3(PAIR)}};
static const int32_t PAIRS_2[2][TAPS / 2] = {{PHASE_0(PAIR)}, {PHASE_2(PAIR)}};
/* The largest sum of a phase's |taps| (phase 1's and 2's), and 8192 (one sample itself) when there are none. */
#define BOUND_FILTERED 16571
#define BOUND_SAMPLES 8192

EXPORT("input_buffer") int16_t *input_buffer(void) { return input; }

EXPORT("max_frames") int max_frames(void) { return MAX_FRAMES; }

/* Starts a file: its channel count (1 or 2), its interpolator's phases (4, 2 or 0) and its K-weighting. */
EXPORT("configure")
void configure(int channel_count, int phases, double b0, double b1, double b2, double a1, double a2, double c1,
               double c2) {
  channels = channel_count;
  phase_count = phases;
  k[0] = b0, k[1] = b1, k[2] = b2, k[3] = a1, k[4] = a2, k[5] = c1, k[6] = c2;
  x1 = x2 = y1 = y2 = z1 = z2 = step_sum = wasm_f64x2_splat(0);
  best = 0;
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < HISTORY; i++) window[c][i] = 0;
}

/* Adds the K-weighted squares of frames from..to-1 of the input to the current step's sum; `stereo` is a constant in each use. */
INLINE void weigh_frames(int from, int to, int stereo) {
  /* The input in full scale is the sample / 32768: scaling the shelf's numerator instead gives the same values. */
  const v128_t b0 = wasm_f64x2_splat(k[0] / 32768), b1 = wasm_f64x2_splat(k[1] / 32768), b2 = wasm_f64x2_splat(k[2] / 32768);
  const v128_t a1 = wasm_f64x2_splat(k[3]), a2 = wasm_f64x2_splat(k[4]);
  const v128_t c1 = wasm_f64x2_splat(k[5]), c2 = wasm_f64x2_splat(k[6]);
  v128_t px1 = x1, px2 = x2, py1 = y1, py2 = y2, pz1 = z1, pz2 = z2, sum = step_sum;
  /* Unrolled, the state's shifts become renames: about a third less time. */
#pragma clang loop unroll_count(4)
  for (int i = from; i < to; i++) {
    /* Stereo: the frame's two samples; mono: the sample, and 0 in the right lane. */
    v128_t raw = stereo ? wasm_v128_load32_zero(&input[2 * i]) : wasm_v128_load16_lane(&input[i], wasm_i16x8_splat(0), 0);
    v128_t x = wasm_f64x2_convert_low_i32x4(wasm_i32x4_extend_low_i16x8(raw));
    /* Each recurrence's last step comes last: a frame waits for the one before through a multiply and a subtraction only. */
    v128_t y = wasm_f64x2_sub(
        wasm_f64x2_sub(wasm_f64x2_add(wasm_f64x2_add(wasm_f64x2_mul(b0, x), wasm_f64x2_mul(b1, px1)), wasm_f64x2_mul(b2, px2)),
                       wasm_f64x2_mul(a2, py2)),
        wasm_f64x2_mul(a1, py1));
    v128_t z = wasm_f64x2_sub(
        wasm_f64x2_sub(wasm_f64x2_sub(wasm_f64x2_add(y, py2), wasm_f64x2_add(py1, py1)), wasm_f64x2_mul(c2, pz2)),
        wasm_f64x2_mul(c1, pz1));
    px2 = px1, px1 = x, py2 = py1, py1 = y, pz2 = pz1, pz1 = z;
    sum = wasm_f64x2_add(sum, wasm_f64x2_mul(z, z));
  }
  x1 = px1, x2 = px2, y1 = py1, y2 = py2, z1 = pz1, z2 = pz2, step_sum = sum;
}

EXPORT("weigh") void weigh(int from, int to) {
  if (channels == 2) weigh_frames(from, to, 1);
  else weigh_frames(from, to, 0);
}

/* The current step's sum of squares over both channels, and a new step begun. */
EXPORT("take_step_sum") double take_step_sum(void) {
  double sum = wasm_f64x2_extract_lane(step_sum, 0) + wasm_f64x2_extract_lane(step_sum, 1);
  step_sum = wasm_f64x2_splat(0);
  return sum;
}

INLINE int32_t max_lane_i32(v128_t v) {
  v = wasm_i32x4_max(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
  v = wasm_i32x4_max(v, wasm_i32x4_shuffle(v, v, 1, 0, 3, 2));
  return wasm_i32x4_extract_lane(v, 0);
}

/* Channel c's frames into its window after the history, then zeros up to the end of the run after the last. */
static void fill_window(int c, int frames) {
  int16_t *w = window[c] + HISTORY;
  if (channels == 1) {
    for (int t = 0; t < frames; t += 8) wasm_v128_store(w + t, wasm_v128_load(&input[t]));
  } else {
    for (int t = 0; t < frames; t += 8) {
      v128_t lo = wasm_v128_load(&input[2 * t]), hi = wasm_v128_load(&input[2 * t + 8]);
      v128_t one = c == 0 ? wasm_i16x8_shuffle(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14)
                          : wasm_i16x8_shuffle(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15);
      wasm_v128_store(w + t, one);
    }
  }
  int length = HISTORY + frames;
  int end = (length + RUN - 1) / RUN * RUN + RUN;
  for (int i = length; i < end; i++) window[c][i] = 0;
}

/* The largest |sample| of each run of the window into run_max (32768 for -32768: u16 after abs); returns the largest. */
static int32_t fill_run_max(int c, int runs) {
  int32_t all = 0;
  for (int r = 0; r < runs; r++) {
    const int16_t *w = window[c] + r * RUN;
    v128_t m = wasm_i16x8_abs(wasm_v128_load(w));
    for (int i = 8; i < RUN; i += 8) m = wasm_u16x8_max(m, wasm_i16x8_abs(wasm_v128_load(w + i)));
    m = wasm_u16x8_max(m, wasm_i32x4_shuffle(m, m, 2, 3, 0, 1));
    m = wasm_u16x8_max(m, wasm_i32x4_shuffle(m, m, 1, 0, 3, 2));
    m = wasm_u16x8_max(m, wasm_i16x8_shuffle(m, m, 1, 0, 3, 2, 5, 4, 7, 6));
    int32_t max = wasm_u16x8_extract_lane(m, 0);
    run_max[r] = max;
    if (max > all) all = max;
  }
  run_max[runs] = 0;
  return all;
}

/*
 * The largest magnitude among `m` and the P phases' outputs o..o+7 over w (output o filters
 * w[o..o+11]): for each pair of taps, the even outputs' sample pairs are the 8 samples from o + 2j
 * and the odd ones' those from o + 2j + 1.
 */
INLINE v128_t block(const int16_t *w, const int32_t pairs[][TAPS / 2], int P, v128_t m) {
  v128_t even[4], odd[4];
  for (int j = 0; j < TAPS / 2; j++) {
    v128_t e = wasm_v128_load(w + 2 * j), o = wasm_v128_load(w + 2 * j + 1);
    for (int p = 0; p < P; p++) {
      v128_t taps = wasm_i32x4_splat(pairs[p][j]);
      v128_t de = wasm_i32x4_dot_i16x8(e, taps), dodd = wasm_i32x4_dot_i16x8(o, taps);
      even[p] = j == 0 ? de : wasm_i32x4_add(even[p], de);
      odd[p] = j == 0 ? dodd : wasm_i32x4_add(odd[p], dodd);
    }
  }
  for (int p = 0; p < P; p++) m = wasm_i32x4_max(m, wasm_i32x4_max(wasm_i32x4_abs(even[p]), wasm_i32x4_abs(odd[p])));
  return m;
}

/* The same for one output, tap by tap. */
INLINE int32_t single(const int16_t *w, const int32_t pairs[][TAPS / 2], int P, int32_t m) {
  for (int p = 0; p < P; p++) {
    int32_t sum = 0;
    for (int j = 0; j < TAPS / 2; j++)
      sum += (int16_t)(pairs[p][j] & 0xffff) * w[2 * j] + (int16_t)((uint32_t)pairs[p][j] >> 16) * w[2 * j + 1];
    if (sum < 0) sum = -sum;
    if (sum > m) m = sum;
  }
  return m;
}

/* Outputs 0..frames-1 of channel c's window, run by run, skipping the runs whose bound cannot exceed `peak`. */
INLINE int32_t filter_runs(int c, int frames, const int32_t pairs[][TAPS / 2], int P, int32_t peak) {
  const int16_t *w = window[c];
  for (int r = 0; r * RUN < frames; r++) {
    int32_t under = run_max[r] > run_max[r + 1] ? run_max[r] : run_max[r + 1];
    if (BOUND_FILTERED * under <= peak) continue;
    int from = r * RUN, to = from + RUN < frames ? from + RUN : frames;
    v128_t m = wasm_i32x4_splat(peak);
    int o = from;
    for (; o + BLOCK <= to; o += BLOCK) m = block(w + o, pairs, P, m);
    peak = max_lane_i32(m);
    for (; o < to; o++) peak = single(w + o, pairs, P, peak);
  }
  return peak;
}

/* The true peak over the input's first `frames` frames (at most MAX_FRAMES), after all frames before. */
EXPORT("true_peak") void true_peak(int frames) {
  int length = HISTORY + frames;
  int runs = (length + RUN - 1) / RUN;
  for (int c = 0; c < channels; c++) {
    fill_window(c, frames);
    int32_t samples = BOUND_SAMPLES * fill_run_max(c, runs);
    if (samples > best) best = samples;
    if (phase_count == 4) best = filter_runs(c, frames, PAIRS_4, 4, best);
    else if (phase_count == 2) best = filter_runs(c, frames, PAIRS_2, 2, best);
    int16_t *w = window[c];
    for (int i = 0; i < HISTORY; i++) w[i] = w[frames + i];
  }
}

/* The largest |sample| and interpolated magnitude so far, in units of 2^-28 full scale. */
EXPORT("peak") int32_t peak(void) { return best; }

/*
 * Waveform peaks (src/audio/peaks.ts): each pixel's min and max per channel, over the same input
 * buffer, in its own instance. Whole vectors of 8 samples go through i16x8 min/max (lanes keep
 * their channel: a span starts on a frame, so with 2 channels the even lanes are the left's); the
 * lanes are folded per channel when a pixel ends, and a span's last samples that fill no vector
 * go to scalar extremes folded with them.
 */
#define PEAKS_MIN_SPP 32
/* The pixels one call can end: MAX_FRAMES frames, at least PEAKS_MIN_SPP each, and one begun before. */
#define PEAKS_OUT_PIXELS (MAX_FRAMES / PEAKS_MIN_SPP + 1)

static int peaks_channels;
static int peaks_spp;
static int peaks_in_pixel;
static v128_t peaks_lo, peaks_hi;
static int32_t peaks_lo_tail[2], peaks_hi_tail[2];
static int8_t peaks_out[PEAKS_OUT_PIXELS * 4];
static int peaks_ended;

static void peaks_reset(void) {
  peaks_lo = wasm_i16x8_splat(INT16_MAX);
  peaks_hi = wasm_i16x8_splat(INT16_MIN);
  for (int c = 0; c < 2; c++) {
    peaks_lo_tail[c] = INT16_MAX;
    peaks_hi_tail[c] = INT16_MIN;
  }
  peaks_in_pixel = 0;
}

/* Starts a file: 1 or 2 channels, at least PEAKS_MIN_SPP frames per pixel; 0 refuses anything else. */
EXPORT("peaks_configure") int peaks_configure(int channels_, int samples_per_pixel) {
  if ((channels_ != 1 && channels_ != 2) || samples_per_pixel < PEAKS_MIN_SPP) return 0;
  peaks_channels = channels_;
  peaks_spp = samples_per_pixel;
  peaks_ended = 0;
  peaks_reset();
  return 1;
}

/* The pixels the last call ended: min, max per channel of each, the 16-bit extremes' high bytes. */
EXPORT("peaks_output") int8_t *peaks_output(void) { return peaks_out; }

INLINE int32_t lowest(int32_t a, int32_t b) { return a < b ? a : b; }
INLINE int32_t highest(int32_t a, int32_t b) { return a > b ? a : b; }

static void peaks_end_pixel(void) {
  /* Lanes 4-7 onto 0-3, then 2-3 onto 0-1: lane c holds channel c's extremes when there are 2. */
  v128_t lo = wasm_i16x8_min(peaks_lo, wasm_i32x4_shuffle(peaks_lo, peaks_lo, 2, 3, 0, 1));
  v128_t hi = wasm_i16x8_max(peaks_hi, wasm_i32x4_shuffle(peaks_hi, peaks_hi, 2, 3, 0, 1));
  lo = wasm_i16x8_min(lo, wasm_i32x4_shuffle(lo, lo, 1, 0, 3, 2));
  hi = wasm_i16x8_max(hi, wasm_i32x4_shuffle(hi, hi, 1, 0, 3, 2));
  int8_t *out = peaks_out + peaks_ended * 2 * peaks_channels;
  if (peaks_channels == 2) {
    for (int c = 0; c < 2; c++) {
      int32_t lo_c = lowest(c ? wasm_i16x8_extract_lane(lo, 1) : wasm_i16x8_extract_lane(lo, 0), peaks_lo_tail[c]);
      int32_t hi_c = highest(c ? wasm_i16x8_extract_lane(hi, 1) : wasm_i16x8_extract_lane(hi, 0), peaks_hi_tail[c]);
      out[2 * c] = (int8_t)(lo_c >> 8);
      out[2 * c + 1] = (int8_t)(hi_c >> 8);
    }
  } else {
    int32_t lo_0 = lowest(lowest(wasm_i16x8_extract_lane(lo, 0), wasm_i16x8_extract_lane(lo, 1)), peaks_lo_tail[0]);
    int32_t hi_0 = highest(highest(wasm_i16x8_extract_lane(hi, 0), wasm_i16x8_extract_lane(hi, 1)), peaks_hi_tail[0]);
    out[0] = (int8_t)(lo_0 >> 8);
    out[1] = (int8_t)(hi_0 >> 8);
  }
  peaks_ended++;
  peaks_reset();
}

/* Samples [from, to) of the input, all in the current pixel, into its extremes. */
static void peaks_span(int from, int to) {
  v128_t lo = peaks_lo, hi = peaks_hi;
  int i = from;
  for (; i + 8 <= to; i += 8) {
    v128_t v = wasm_v128_load(input + i);
    lo = wasm_i16x8_min(lo, v);
    hi = wasm_i16x8_max(hi, v);
  }
  peaks_lo = lo;
  peaks_hi = hi;
  for (; i < to; i++) {
    int c = (i - from) % peaks_channels;
    peaks_lo_tail[c] = lowest(peaks_lo_tail[c], input[i]);
    peaks_hi_tail[c] = highest(peaks_hi_tail[c], input[i]);
  }
}

/* The input's first `frames` frames (at most MAX_FRAMES), after all frames before; returns the pixels ended. */
EXPORT("peaks") int peaks(int frames) {
  peaks_ended = 0;
  for (int f = 0; f < frames;) {
    int stop = f + (peaks_spp - peaks_in_pixel);
    if (stop > frames) stop = frames;
    peaks_span(f * peaks_channels, stop * peaks_channels);
    peaks_in_pixel += stop - f;
    f = stop;
    if (peaks_in_pixel == peaks_spp) peaks_end_pixel();
  }
  return peaks_ended;
}

/* Ends the last pixel if it has begun; returns the pixels ended (0 or 1), at peaks_output(). */
EXPORT("peaks_flush") int peaks_flush(void) {
  peaks_ended = 0;
  if (peaks_in_pixel > 0) peaks_end_pixel();
  return peaks_ended;
}
