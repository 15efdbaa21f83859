import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createLoudnessMeter, type Loudness } from '../../src/audio/loudness.js';

/**
 * The meter against the real ffmpeg ebur128 filter (peak=true) on signals ffmpeg generates and
 * writes as the converter does (16-bit PCM WAV): each WAV is measured by both, the meter fed the
 * file's bytes in the chunks the store's hash loop reads (1 MiB), and elsewhere cut anywhere.
 */
const dir = mkdtempSync(path.join(tmpdir(), 'sf-loudness-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A WAV of an ffmpeg lavfi source graph. */
function generate(
  name: string,
  graph: string,
  opts: { rate?: number; filter?: string; channels?: number; codec?: string } = {},
): Buffer {
  const file = path.join(dir, `${name}.wav`);
  execFileSync('ffmpeg', [
    ...['-hide_banner', '-loglevel', 'error', '-nostdin', '-y', '-f', 'lavfi', '-i', graph],
    ...(opts.filter ? ['-af', opts.filter] : []),
    ...(opts.channels ? ['-ac', String(opts.channels)] : []),
    ...['-ar', String(opts.rate ?? 44100), '-c:a', opts.codec ?? 'pcm_s16le', '-bitexact', file],
  ]);
  return readFileSync(file);
}

/**
 * ffmpeg's own reading of a WAV: integrated loudness and range from the filter's frame metadata
 * (three decimals, the state after the last 100 ms step), the true peak from its summary (one).
 */
function ffmpegLoudness(name: string): Loudness {
  const file = path.join(dir, `${name}.wav`);
  const meta = path.join(dir, `${name}.meta`);
  const run = spawnSync(
    'ffmpeg',
    [
      ...['-hide_banner', '-nostats', '-nostdin', '-i', file],
      ...['-af', `ebur128=peak=true:metadata=1,ametadata=mode=print:file=${meta}`, '-f', 'null', '-'],
    ],
    { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] },
  );
  expect(run.status).toBe(0);
  const text = readFileSync(meta, 'utf8');
  const last = (key: string) =>
    Number([...text.matchAll(new RegExp(`^lavfi\\.r128\\.${key}=(\\S+)$`, 'gm'))].at(-1)?.[1]);
  const peak = /True peak:\s*\n\s*Peak:\s*(\S+) dBFS/.exec(run.stderr)?.[1];
  return { integratedLufs: last('I'), rangeLu: last('LRA'), truePeakDbtp: Number(peak) };
}

function measure(wav: Buffer, chunk = 1 << 20): Loudness | null {
  const meter = createLoudnessMeter();
  for (let at = 0; at < wav.length; at += chunk) meter.update(wav.subarray(at, at + chunk));
  return meter.finish();
}

const SINE_1K = (amplitude: number) => `${amplitude}*sin(2*PI*1000*t)`;
const LOUD_MEDIUM_QUIET = 'if(lt(t,10),0.5,if(lt(t,20),0.1,0.002))';
/** Two independent noises, one a channel. */
const noise = (color: string, amplitude: number) =>
  `anoisesrc=color=${color}:amplitude=${amplitude}:seed=7:r=44100:d=20[l];` +
  `anoisesrc=color=${color}:amplitude=${amplitude}:seed=11:r=44100:d=20[r];[l][r]amerge=inputs=2`;
/** A lossy codec's band: what the converter's inputs hold (AAC, MP3 and Opus cut off at 16-20 kHz). */
const CODEC_BAND = 'lowpass=f=16000,lowpass=f=16000,lowpass=f=16000,lowpass=f=16000';

/** Where ffmpeg's true peak is not the reference (see below), what is expected instead. */
type PeakCheck = 'ffmpeg' | 'full-band' | { exact: number };

const CASES: Array<{
  name: string;
  graph: string;
  filter?: string;
  rate?: number;
  peak?: PeakCheck;
  integrated?: number;
}> = [
  // EBU Tech 3341's reference: 1 kHz at -23 dBFS in both channels reads -23.0 LUFS.
  {
    name: 'stereo 1 kHz at -23 LUFS',
    graph: `aevalsrc='${SINE_1K(0.0707946)}|${SINE_1K(0.0707946)}':s=44100:d=20`,
    integrated: -23,
  },
  { name: '-6 dBFS 1 kHz left, silence right', graph: `aevalsrc='${SINE_1K(0.501187)}|0':s=44100:d=10` },
  // Noise in a lossy codec's band, as the converter's inputs are.
  { name: 'pink noise, codec band', graph: noise('pink', 0.5), filter: CODEC_BAND },
  { name: 'white noise, codec band', graph: noise('white', 0.3), filter: CODEC_BAND },
  // Noise up to the Nyquist frequency: BS.1770-4 Annex 2's filter passes less of the top of the
  // band than ffmpeg's resampler, so its true peak reads lower there.
  { name: 'pink noise, full band', graph: noise('pink', 0.5), peak: 'full-band' },
  { name: 'white noise, full band', graph: noise('white', 0.2), peak: 'full-band' },
  {
    // Loud, medium, then a part under the relative gate: gating decides the integrated loudness and the range.
    name: 'a loud, a medium and a quiet part',
    graph: `aevalsrc='${LOUD_MEDIUM_QUIET}*sin(2*PI*440*t)|${LOUD_MEDIUM_QUIET}*sin(2*PI*440*t)':s=44100:d=30`,
  },
  {
    name: 'a slowly swelling tone (a wide range)',
    graph: `aevalsrc='(0.05+0.45*(1+sin(2*PI*t/20))/2)*sin(2*PI*500*t)':s=44100:d=40`,
  },
  {
    // fs/4 at 45 degrees: every sample at 0.707 of the amplitude, the peaks between them. ffmpeg
    // 5.1 reads -0.3 dBFS here, 0.6 dB over the signal's real peak (its resampler's overshoot);
    // the reference is the sine's amplitude.
    name: 'intersample peaks (fs/4 at 45 degrees)',
    graph: `aevalsrc='0.9*sin(2*PI*11025*t+PI/4)|0.9*sin(2*PI*11025*t+PI/4)':s=44100:d=5`,
    peak: { exact: 20 * Math.log10(0.9) },
  },
  { name: 'mono 1 kHz', graph: `aevalsrc='${SINE_1K(0.1)}':s=44100:d=10` },
  {
    name: 'stereo pink noise at 48 kHz',
    graph: noise('pink', 0.5).replaceAll('r=44100', 'r=48000'),
    filter: CODEC_BAND,
    rate: 48000,
  },
];

describe('loudness meter against ffmpeg ebur128', () => {
  it.each(CASES)('$name', ({ name, graph, filter, rate, peak = 'ffmpeg', integrated }) => {
    const file = name.replace(/[^a-z0-9]+/gi, '-');
    const wav = generate(file, graph, { rate, filter });
    const ours = measure(wav)!;
    const theirs = ffmpegLoudness(file);
    expect(ours).not.toBeNull();
    expect(Math.abs(ours.integratedLufs - theirs.integratedLufs)).toBeLessThanOrEqual(0.1);
    expect(Math.abs(ours.rangeLu - theirs.rangeLu)).toBeLessThanOrEqual(0.2);
    if (integrated !== undefined) expect(Math.abs(ours.integratedLufs - integrated)).toBeLessThanOrEqual(0.1);
    if (peak === 'ffmpeg') expect(Math.abs(ours.truePeakDbtp - theirs.truePeakDbtp)).toBeLessThanOrEqual(0.2);
    else if (peak === 'full-band') {
      expect(ours.truePeakDbtp).toBeLessThanOrEqual(theirs.truePeakDbtp + 0.05);
      expect(ours.truePeakDbtp).toBeGreaterThan(theirs.truePeakDbtp - 0.8);
    } else {
      expect(Math.abs(ours.truePeakDbtp - peak.exact)).toBeLessThanOrEqual(0.2);
      // Above every sample: the peak between them was found.
      expect(ours.truePeakDbtp).toBeGreaterThan(samplePeakDb(wav) + 2.5);
    }
  });
});

describe('loudness meter', () => {
  const signal = generate(
    'split',
    `aevalsrc='${LOUD_MEDIUM_QUIET}*sin(2*PI*440*t)|${LOUD_MEDIUM_QUIET}*sin(2*PI*1320*t+1)':s=44100:d=30`,
  );

  it('reads the same whatever the chunks: 1 MiB, 1 byte through the header, odd cuts inside frames', () => {
    const whole = measure(signal);
    expect(whole).not.toBeNull();
    expect(measure(signal, 4099)).toEqual(whole);
    expect(measure(signal, 1 << 16)).toEqual(whole);
    const meter = createLoudnessMeter();
    let at = 0;
    for (let n = 0; at < signal.length; n++) {
      const size = n < 100 ? 1 : 1 + ((n * 7919) % 9001);
      meter.update(signal.subarray(at, at + size));
      at += size;
    }
    expect(meter.finish()).toEqual(whole);
  });

  it('keeps nothing of a chunk past its update: the same reading from one buffer overwritten after every call', () => {
    const whole = measure(signal);
    const meter = createLoudnessMeter();
    // As the file follower hands chunks on (src/jobs/fetch/follow-file.ts): the header a byte at a time, then larger cuts.
    const scratch = Buffer.alloc(9001);
    let at = 0;
    for (let n = 0; at < signal.length; n++) {
      const size = Math.min(n < 100 ? 1 : 1 + ((n * 7919) % 9001), signal.length - at);
      signal.copy(scratch, 0, at, at + size);
      meter.update(scratch.subarray(0, size));
      scratch.fill(0xa5);
      at += size;
    }
    expect(meter.finish()).toEqual(whole);
  });

  it.each([
    { rate: 44100, channels: 2, phases: BS1770_PHASES },
    { rate: 44100, channels: 1, phases: BS1770_PHASES },
    // 2x: the phases at whole and half samples.
    { rate: 96000, channels: 2, phases: [BS1770_PHASES[0]!, BS1770_PHASES[2]!] },
    { rate: 192000, channels: 2, phases: [] },
  ])(
    'prunes exactly: the true peak equals every output of the filter, computed without pruning ($rate Hz, $channels channels)',
    ({ rate, channels, phases }) => {
      // A loud tone, then peaks between samples under it (fs/4 at 45 degrees: every sample at 0.71
      // of the peak), then a quiet part: the runs of the second part are filtered only if their
      // bound is right, those of the third are all skipped.
      const graph = `0.5*sin(2*PI*440*t)*lt(t,5)+0.6*sin(2*PI*${rate / 4}*t+PI/4)*between(t,5,10)*gt(t,5)+0.01*sin(2*PI*440*t)*gt(t,10)`;
      const wav = generate(`pruning-${rate}-${channels}`, `aevalsrc='${graph}':s=${rate}:d=15`, { rate, channels });
      const result = measure(wav)!;
      expect(Math.abs(result.truePeakDbtp - 20 * Math.log10(unprunedTruePeak(wav, channels, phases)))).toBeLessThan(
        1e-9,
      );
    },
  );

  it('reads -70 LUFS and 0 LU for a file shorter than one block, and nothing for silence', () => {
    const short = generate('short', `aevalsrc='${SINE_1K(0.5)}':s=44100:d=0.3`);
    expect(measure(short)).toMatchObject({ integratedLufs: -70, rangeLu: 0 });
    expect(ffmpegLoudness('short')).toMatchObject({ integratedLufs: -70, rangeLu: 0 });
    expect(measure(generate('silence', `aevalsrc='0|0':s=44100:d=3`))).toBeNull();
  });

  it('measures only mono or stereo 16-bit PCM WAVs', () => {
    expect(measure(Buffer.from('not a wav at all, just some bytes'))).toBeNull();
    const tone = `aevalsrc='${SINE_1K(0.5)}':s=44100:d=1`;
    expect(measure(generate('surround', tone, { channels: 6 }))).toBeNull();
    expect(measure(generate('float', tone, { codec: 'pcm_f32le' }))).toBeNull();
    // The control: the same tone as 16-bit stereo is measured.
    expect(measure(generate('tone', `aevalsrc='${SINE_1K(0.5)}|${SINE_1K(0.5)}':s=44100:d=1`))).not.toBeNull();
  });
});

/** BS.1770-4 Annex 2, as the Recommendation prints it. */
const BS1770_PHASES = [
  [
    0.001708984375, 0.010986328125, -0.0196533203125, 0.033203125, -0.0594482421875, 0.1373291015625, 0.97216796875,
    -0.102294921875, 0.047607421875, -0.026611328125, 0.014892578125, -0.00830078125,
  ],
  [
    -0.0291748046875, 0.029296875, -0.0517578125, 0.089111328125, -0.16650390625, 0.465087890625, 0.77978515625,
    -0.2003173828125, 0.1015625, -0.0582275390625, 0.0330810546875, -0.0189208984375,
  ],
  [
    -0.0189208984375, 0.0330810546875, -0.0582275390625, 0.1015625, -0.2003173828125, 0.77978515625, 0.465087890625,
    -0.16650390625, 0.089111328125, -0.0517578125, 0.029296875, -0.0291748046875,
  ],
  [
    -0.00830078125, 0.014892578125, -0.026611328125, 0.047607421875, -0.102294921875, 0.97216796875, 0.1373291015625,
    -0.0594482421875, 0.033203125, -0.0196533203125, 0.010986328125, 0.001708984375,
  ],
];

/** The largest |sample| and |output| of `phases` over every sample of every channel, tap by tap. */
function unprunedTruePeak(wav: Buffer, channels: number, phases: number[][]): number {
  // ffmpeg's header is longer than 44 bytes at rates over 48 kHz (WAVE_FORMAT_EXTENSIBLE).
  const data = wav.indexOf('data') + 8;
  const samples = new Int16Array(wav.buffer.slice(wav.byteOffset + data, wav.byteOffset + wav.length));
  let best = 0;
  for (let c = 0; c < channels; c++) {
    const x = Float64Array.from({ length: samples.length / channels + 11 }, (_, i) =>
      i < 11 ? 0 : samples[channels * (i - 11) + c]! / 32768,
    );
    for (let o = 0; o + 11 < x.length; o++) {
      best = Math.max(best, Math.abs(x[o + 11]!));
      for (const taps of phases) {
        let sum = 0;
        for (let k = 0; k < 12; k++) sum += taps[k]! * x[o + k]!;
        best = Math.max(best, Math.abs(sum));
      }
    }
  }
  return best;
}

function samplePeakDb(wav: Buffer): number {
  const samples = new Int16Array(wav.buffer, wav.byteOffset + 44, (wav.length - 44) / 2);
  let max = 0;
  for (const value of samples) max = Math.max(max, Math.abs(value));
  return 20 * Math.log10(max / 32768);
}
