/**
 * The cost of loudness and waveform peaks, run by hand:
 *   npm run build && npx tsx bench/audio-analysis.ts [runs per case, default 3] [long file's seconds, default 10800] [parts: both (default), short, long, meter, peaks]
 *
 * In one run:
 *   1. a 3-minute 48 kHz stereo AAC fetched by three services side by side: with loudness (measured
 *      while converting) and peaks (in the store's hash pass), with peaks alone, and with neither;
 *      they take turns, run by run, so that the machine's load drifts over all alike. Medians of
 *      submit → done, and of the convert and commit steps (the 'fetch steps' log line);
 *   2. a 3-hour 48 kHz stereo AAC through the passes the analysis rides on, as plain processes and
 *      calls: the conversion (ffmpeg with the service's arguments) alone and with the loudness
 *      meter reading behind it (followFile, as the convert step does), taking turns, then the
 *      store's hash pass over its WAV (sha256File) alone and with the peaks accumulator. Each cost
 *      is given as a share of the run's conversion time;
 *   3. (`meter`, alone) where the loudness meter's time goes: CPU time of the SHA-256, the frame
 *      decoding, the peaks and the whole meter over a 3-minute 44.1 kHz stereo WAV in memory (the
 *      bench's tone, and a music-like signal the true peak's pruning skips more of), and of the
 *      meter's two kernels alone over its samples (WebAssembly, driven as the meter drives them);
 *   4. (`peaks`, alone) the peaks accumulator's CPU time over a 3-minute and a 3-hour stereo WAV
 *      in memory (peaksParts).
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { followFile } from '../src/jobs/fetch/follow-file.js';
import { instantiateAudioKernels } from '../src/audio/audio-kernels.js';
import { sha256File } from '../src/store/content-store.js';
import { createLoudnessMeter } from '../src/audio/loudness.js';
import { createPeaksAccumulator, peaksJsonBytes } from '../src/audio/peaks.js';
import { createFrameReader } from '../src/audio/wav-frames.js';
import { buildConvertArgs } from '../src/tools/ffmpeg.js';
import { runProcess } from '../src/tools/process.js';
import { parseWavHeader } from '../src/tools/wav.js';
import { makeTone } from '../test/support/media.js';
import { startMediaServer } from '../test/support/media-server.js';
import { startService, type ServiceHandle } from '../test/support/service.js';

const RUNS = Number(process.argv[2] ?? 3);
const LONG_S = Number(process.argv[3] ?? 10_800);
const fixtureDir = path.join(tmpdir(), 'source-fetch-fixtures');
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const seconds = (ms: number) => (ms / 1000).toFixed(2);
const percent = (part: number, whole: number) => `${((part / whole) * 100).toFixed(1)} %`;

async function fetchOnce(svc: ServiceHandle, url: string): Promise<{ wallMs: number; steps: Record<string, number> }> {
  const started = performance.now();
  const { job_id: id } = await svc.submit(url);
  let line;
  while (!(line = svc.logs.find((entry) => entry.msg === 'fetch steps' && entry.job_id === id))) await sleep(2);
  const wallMs = performance.now() - started;
  const job = await svc.getJob(id);
  if (job.status !== 'done') throw new Error(`job ${job.status}: ${JSON.stringify(job.error)}`);
  return { wallMs, steps: line as unknown as Record<string, number> };
}

const SETTINGS = {
  'LOUDNESS=on  WAVEFORM_PEAKS=on ': { LOUDNESS: 'on', WAVEFORM_PEAKS: 'on' },
  'LOUDNESS=off WAVEFORM_PEAKS=on ': { LOUDNESS: 'off', WAVEFORM_PEAKS: 'on' },
  'LOUDNESS=off WAVEFORM_PEAKS=off': { LOUDNESS: 'off', WAVEFORM_PEAKS: 'off' },
};

async function threeMinutes(): Promise<void> {
  const tone = await makeTone(fixtureDir, { seconds: 180, channels: 2, sampleRate: 48000, format: 'm4a' });
  const media = await startMediaServer();
  media.serveFile('/tone-180s.m4a', tone.path, { contentType: 'audio/mp4' });
  const services = await Promise.all(
    Object.values(SETTINGS).map((env) => startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, ...env } })),
  );
  try {
    const samples = services.map(() => [] as Array<Awaited<ReturnType<typeof fetchOnce>>>);
    // One warm-up each, not counted.
    for (const [n, svc] of services.entries()) await fetchOnce(svc, media.url(`/tone-180s.m4a?warm-${n}`));
    for (let i = 0; i < RUNS; i++) {
      // Distinct query strings: the same URL would be born done.
      for (const [n, svc] of services.entries())
        samples[n]!.push(await fetchOnce(svc, media.url(`/tone-180s.m4a?service=${n}&run=${i}`)));
    }
    const rows = samples.map((runs) => ({
      wall: median(runs.map((r) => r.wallMs)),
      convert: median(runs.map((r) => r.steps.convert_ms!)),
      commit: median(runs.map((r) => r.steps.commit_ms!)),
      list: runs.map((r) => seconds(r.wallMs)).join(', '),
    }));
    const base = rows.at(-1)!;
    const [both, peaksAlone] = rows as [(typeof rows)[0], (typeof rows)[0]];
    process.stdout.write(`3-minute AAC (48 kHz stereo), median of ${RUNS}, the services taking turns:\n`);
    Object.keys(SETTINGS).forEach((name, n) => {
      const row = rows[n]!;
      process.stdout.write(
        `  ${name}: submit → done ${seconds(row.wall)} s (convert ${row.convert} ms, commit ${row.commit} ms), ` +
          `${percent(row.wall - base.wall, base.wall)} over both off   runs: ${row.list}\n`,
      );
    });
    // Loudness rides on the convert step, the peaks on the commit step's hash pass: the steps' growth
    // is their cost, without the rest of the job's spread.
    const loudness = both.convert + both.commit - (peaksAlone.convert + peaksAlone.commit);
    process.stdout.write(
      `  convert + commit steps: loudness adds ${loudness} ms (${percent(loudness, base.wall)} of a job with neither), ` +
        `peaks ${peaksAlone.commit - base.commit} ms of commit step (${percent(peaksAlone.commit - base.commit, base.wall)})\n`,
    );
  } finally {
    await Promise.all(services.map((svc) => svc.stop()));
    await media.close();
  }
}

/** The conversion, with the loudness meter reading behind ffmpeg as the convert step runs it, or without. */
async function convertOnce(
  input: string,
  dir: string,
  metered: boolean,
): Promise<{ ms: number; wav: string; note: string }> {
  const wav = path.join(dir, metered ? 'metered.wav' : 'plain.wav');
  const started = performance.now();
  const meter = metered ? createLoudnessMeter() : undefined;
  const follower = meter ? followFile(wav, (bytes) => meter.update(bytes)) : undefined;
  const result = await runProcess({
    command: 'ffmpeg',
    args: buildConvertArgs({ input, output: wav, maxDurationS: LONG_S + 60, maxAllocBytes: 2 * 1024 ** 3 }),
    cwd: dir,
    timeoutMs: 3_600_000,
  });
  if (result.exitCode !== 0) {
    await follower?.abandon();
    throw new Error(`ffmpeg: ${result.stderrTail}`);
  }
  const header = parseWavHeader(readStart(wav, 64 * 1024));
  await follower?.finish(header.dataOffset + header.dataBytes);
  const loudness = meter?.finish();
  const ms = performance.now() - started;
  const note = loudness
    ? `I ${loudness.integratedLufs.toFixed(1)} LUFS, LRA ${loudness.rangeLu.toFixed(1)} LU, TP ${loudness.truePeakDbtp.toFixed(1)} dBTP`
    : '';
  return { ms, wav, note };
}

function readStart(file: string, bytes: number): Buffer {
  const fd = openSync(file, 'r');
  try {
    const start = Buffer.alloc(bytes);
    return start.subarray(0, readSync(fd, start, 0, bytes, 0));
  } finally {
    closeSync(fd);
  }
}

type Pass = 'plain' | 'peaks';
const PASSES: Pass[] = ['plain', 'peaks'];

/** The store's hash pass over `wav`, with the peaks riding on it or not, as the commit step sets it up. */
async function hashOnce(wav: string, pass: Pass): Promise<{ ms: number; note: string }> {
  const started = performance.now();
  const peaks = pass === 'peaks' ? createPeaksAccumulator() : undefined;
  await sha256File(wav, peaks);
  const peaksResult = peaks?.finish();
  const ms = performance.now() - started;
  return { ms, note: peaksResult ? `peaks.json ${peaksJsonBytes(peaksResult).length} bytes` : '' };
}

async function threeHours(): Promise<void> {
  const source = await makeTone(fixtureDir, { seconds: LONG_S, channels: 2, sampleRate: 48000, format: 'm4a' });
  const conversions: number[] = [];
  const metered: number[] = [];
  const passes = Object.fromEntries(PASSES.map((pass) => [pass, [] as number[]])) as Record<Pass, number[]>;
  const notes = new Set<string>();
  for (let i = 0; i < RUNS; i++) {
    const dir = await mkdtemp(path.join(tmpdir(), 'sf-bench-analysis-'));
    try {
      const withMeter = await convertOnce(source.path, dir, true);
      metered.push(withMeter.ms);
      notes.add(withMeter.note);
      await rm(withMeter.wav);
      const { ms, wav } = await convertOnce(source.path, dir, false);
      conversions.push(ms);
      // Taking turns, the WAV in the page cache for all, as the store's pass finds it after the conversion.
      for (const pass of PASSES) {
        const run = await hashOnce(wav, pass);
        passes[pass].push(run.ms);
        if (run.note) notes.add(run.note);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  const list = (values: number[]) => values.map(seconds).join(', ');
  // Each run's cost against its own conversion, then the median of those shares.
  const share = (pass: Pass) =>
    (median(conversions.map((ms, i) => (passes[pass][i]! - passes.plain[i]!) / ms)) * 100).toFixed(1);
  process.stdout.write(
    `${(LONG_S / 3600).toFixed(2)}-hour AAC (48 kHz stereo), median of ${RUNS}:\n` +
      `  conversion:                          ${seconds(median(conversions))} s   (runs: ${list(conversions)})\n` +
      `  conversion with loudness:            ${seconds(median(metered))} s   (runs: ${list(metered)})   ` +
      `+${(median(conversions.map((ms, i) => (metered[i]! - ms) / ms)) * 100).toFixed(1)} % of the conversion\n` +
      PASSES.map(
        (pass) =>
          `  store's hash pass, ${pass.padEnd(8)}:        ${seconds(median(passes[pass]))} s   (runs: ${list(passes[pass])})` +
          (pass === 'plain' ? '' : `   +${share(pass)} % of the conversion`),
      ).join('\n') +
      `\n  ${[...notes].join('\n  ')}\n`,
  );
}

const METER_SIGNALS = {
  tone: { graph: "aevalsrc='0.3*sin(2*PI*440*t)|0.3*sin(2*PI*660*t)':s=44100:d=180", filter: 'anull' },
  // Two pink noises in a codec's band, their level swelling and falling every 7 s, limited at -1 dBFS.
  'music-like': {
    graph:
      'anoisesrc=color=pink:amplitude=0.4:seed=7:r=44100:d=180[l];' +
      'anoisesrc=color=pink:amplitude=0.4:seed=11:r=44100:d=180[r];[l][r]amerge=inputs=2',
    filter: "lowpass=f=16000,lowpass=f=16000,volume='0.3+0.7*abs(sin(2*PI*t/7))':eval=frame,alimiter=limit=0.9",
  },
};

/** BS.1770's K-weighting at 48 kHz: the coefficients' values do not change the kernel's time. */
const K_WEIGHTING_48K = [
  1.53512485958697, -2.69169618940638, 1.19839281085285, -1.69065929318241, 0.73248077421585, -1.99004745483398,
  0.99007225036621,
];

/** Median CPU ms of `run` over RUNS runs (at least 5). */
function cpuMs(run: () => void): string {
  const times: number[] = [];
  for (let i = 0; i < Math.max(5, RUNS); i++) {
    const before = process.cpuUsage();
    run();
    const used = process.cpuUsage(before);
    times.push((used.user + used.system) / 1000);
  }
  return median(times).toFixed(0);
}

async function meterParts(): Promise<void> {
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-bench-meter-'));
  try {
    for (const [name, { graph, filter }] of Object.entries(METER_SIGNALS)) {
      const file = path.join(dir, `${name}.wav`);
      execFileSync('ffmpeg', [
        ...['-hide_banner', '-loglevel', 'error', '-nostdin', '-f', 'lavfi', '-i', graph, '-af', filter],
        ...['-ar', '44100', '-c:a', 'pcm_s16le', '-bitexact', file],
      ]);
      const wav = readFileSync(file);
      const chunked = (make: () => { update(chunk: Buffer): void }) => () => {
        const sink = make();
        for (let at = 0; at < wav.length; at += 1 << 20) sink.update(wav.subarray(at, at + (1 << 20)));
      };
      const samples = new Int16Array(wav.buffer, wav.byteOffset + 44, (wav.length - 44) / 2);
      /** The kernels over every sample, MAX_FRAMES frames at a time, as the meter feeds them. */
      const kernel = (part: 'weigh' | 'true_peak') => () => {
        const k = instantiateAudioKernels();
        const slice = 2 * k.max_frames();
        const input = new Int16Array(k.memory.buffer, k.input_buffer(), slice);
        k.configure(2, 4, ...K_WEIGHTING_48K);
        for (let at = 0; at < samples.length; at += slice) {
          const values = samples.subarray(at, at + slice);
          input.set(values);
          if (part === 'weigh') {
            k.weigh(0, values.length / 2);
            k.take_step_sum();
          } else k.true_peak(values.length / 2);
        }
      };
      const rows = {
        'SHA-256': cpuMs(chunked(() => createHash('sha256'))),
        'frame decoding': cpuMs(chunked(() => createFrameReader({ begin: () => true, frames: () => undefined }))),
        peaks: cpuMs(chunked(createPeaksAccumulator)),
        'loudness meter': cpuMs(chunked(createLoudnessMeter)),
        '  its K-weighting kernel alone': cpuMs(kernel('weigh')),
        '  its true-peak kernel alone': cpuMs(kernel('true_peak')),
      };
      process.stdout.write(
        `3-minute 44.1 kHz stereo WAV in memory, ${name}, CPU ms (median of ${Math.max(5, RUNS)}):\n`,
      );
      for (const [part, ms] of Object.entries(rows)) process.stdout.write(`  ${part.padEnd(32)} ${ms.padStart(5)}\n`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A 16-bit PCM WAV header for `frames` frames of `channels` channels at 44.1 kHz. */
function wavHeader(frames: number, channels: number): Buffer {
  const head = Buffer.alloc(44);
  head.write('RIFF', 0, 'latin1');
  head.writeUInt32LE(36 + frames * channels * 2, 4);
  head.write('WAVEfmt ', 8, 'latin1');
  head.writeUInt32LE(16, 16);
  head.writeUInt16LE(1, 20);
  head.writeUInt16LE(channels, 22);
  head.writeUInt32LE(44100, 24);
  head.writeUInt32LE(44100 * channels * 2, 28);
  head.writeUInt16LE(channels * 2, 32);
  head.writeUInt16LE(16, 34);
  head.write('data', 36, 'latin1');
  head.writeUInt32LE(frames * channels * 2, 40);
  return head;
}

/**
 * (`peaks`, alone) the peaks accumulator's CPU time over a 3-minute and a 3-hour 44.1 kHz stereo
 * WAV in memory, fed as the store feeds it (1 MiB chunks), beside the SHA-256 and the frame
 * decoding for scale. The 3-hour file's data is a 64 MiB block of noise whose level swells and
 * falls, fed again and again under a header of 3 hours, so that it needs no 1.9 GB of memory.
 */
function peaksParts(): void {
  const CHUNK = 1 << 20;
  const block = Buffer.alloc(64 * CHUNK);
  const values = new Int16Array(block.buffer, block.byteOffset, block.length / 2);
  let seed = 7;
  for (let i = 0; i < values.length; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    const level = 0.3 + 0.7 * Math.abs(Math.sin((2 * Math.PI * i) / (2 * 44100 * 7)));
    values[i] = Math.round(((seed / 2 ** 32) * 2 - 1) * 32767 * level);
  }
  for (const [name, frames] of [
    ['3-minute', 180 * 44100],
    ['3-hour', LONG_S * 44100],
  ] as const) {
    const header = wavHeader(frames, 2);
    const dataBytes = frames * 4;
    const feed = (make: () => { update(chunk: Buffer): void }) => () => {
      const sink = make();
      sink.update(header);
      for (let at = 0; at < dataBytes; at += CHUNK) {
        const from = at % block.length;
        sink.update(block.subarray(from, from + Math.min(CHUNK, dataBytes - at)));
      }
    };
    const rows = {
      'SHA-256': cpuMs(feed(() => createHash('sha256'))),
      'frame decoding': cpuMs(feed(() => createFrameReader({ begin: () => true, frames: () => undefined }))),
      peaks: cpuMs(feed(createPeaksAccumulator)),
    };
    process.stdout.write(`${name} 44.1 kHz stereo WAV in memory, CPU ms (median of ${Math.max(5, RUNS)}):\n`);
    for (const [part, ms] of Object.entries(rows)) process.stdout.write(`  ${part.padEnd(32)} ${ms.padStart(6)}\n`);
  }
}

const PARTS = process.argv[4] ?? 'both';
if (PARTS === 'meter') await meterParts();
else if (PARTS === 'peaks') peaksParts();
else {
  if (PARTS !== 'long') await threeMinutes();
  if (PARTS !== 'short') await threeHours();
}
