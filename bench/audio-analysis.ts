/**
 * The cost of loudness and waveform peaks, run by hand:
 *   npm run build && npx tsx bench/audio-analysis.ts [runs per case, default 3] [long file's seconds, default 10800] [parts: both (default), short, long]
 *
 * In one run:
 *   1. a 3-minute 48 kHz stereo AAC fetched by two services side by side, one with
 *      AUDIO_ANALYSIS=on (loudness in the conversion, peaks in the store's hash pass), one with it
 *      off; the two alternate, run by run, so that the machine's load drifts over both alike.
 *      Medians of submit → done, and of the convert and commit steps (the 'fetch steps' log line);
 *   2. a 3-hour 48 kHz stereo AAC through the two passes the analysis rides on, as plain
 *      processes and calls: the conversion (ffmpeg with the service's arguments) without and with
 *      the loudness branch, and the store's hash pass over the WAV (sha256File) without and with
 *      the peaks accumulator. Each cost is given as a share of the plain conversion's time.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { sha256File } from '../src/store/content-store.js';
import { createPeaksAccumulator, peaksJsonBytes } from '../src/store/peaks.js';
import { LOUDNESS_REPORT_FILE, loudnessReportEnv, parseEbur128Summary } from '../src/tools/ebur128.js';
import { buildConvertArgs } from '../src/tools/ffmpeg.js';
import { runProcess } from '../src/tools/process.js';
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

async function threeMinutes(): Promise<void> {
  const tone = await makeTone(fixtureDir, { seconds: 180, channels: 2, sampleRate: 48000, format: 'm4a' });
  const media = await startMediaServer();
  media.serveFile('/tone-180s.m4a', tone.path, { contentType: 'audio/mp4' });
  const on = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, AUDIO_ANALYSIS: 'on' } });
  const off = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, AUDIO_ANALYSIS: 'off' } });
  try {
    const samples = {
      on: [] as Awaited<ReturnType<typeof fetchOnce>>[],
      off: [] as Awaited<ReturnType<typeof fetchOnce>>[],
    };
    // One warm-up each, not counted.
    await fetchOnce(on, media.url('/tone-180s.m4a?warm-on'));
    await fetchOnce(off, media.url('/tone-180s.m4a?warm-off'));
    for (let i = 0; i < RUNS; i++) {
      // Distinct query strings: the same URL would be born done.
      samples.on.push(await fetchOnce(on, media.url(`/tone-180s.m4a?on=${i}`)));
      samples.off.push(await fetchOnce(off, media.url(`/tone-180s.m4a?off=${i}`)));
    }
    const row = (name: 'on' | 'off') => {
      const runs = samples[name];
      const wall = median(runs.map((r) => r.wallMs));
      const convert = median(runs.map((r) => r.steps.convert_ms!));
      const commit = median(runs.map((r) => r.steps.commit_ms!));
      return { wall, convert, commit, list: runs.map((r) => seconds(r.wallMs)).join(', ') };
    };
    const a = row('on');
    const b = row('off');
    process.stdout.write(
      `3-minute AAC (48 kHz stereo), median of ${RUNS}, the two services alternating:\n` +
        `  AUDIO_ANALYSIS=on:  submit → done ${seconds(a.wall)} s (convert ${a.convert} ms, commit ${a.commit} ms)   runs: ${a.list}\n` +
        `  AUDIO_ANALYSIS=off: submit → done ${seconds(b.wall)} s (convert ${b.convert} ms, commit ${b.commit} ms)   runs: ${b.list}\n` +
        `  cost of loudness and peaks: ${Math.round(a.wall - b.wall)} ms a job, ${percent(a.wall - b.wall, b.wall)} of the job without them ` +
        `(convert +${a.convert - b.convert} ms, commit +${a.commit - b.commit} ms)\n`,
    );
  } finally {
    await on.stop();
    await off.stop();
    await media.close();
  }
}

async function convertOnce(input: string, dir: string, measureLoudness: boolean): Promise<{ ms: number; wav: string }> {
  const wav = path.join(dir, `${measureLoudness ? 'measured' : 'plain'}.wav`);
  const started = performance.now();
  const result = await runProcess({
    command: 'ffmpeg',
    args: buildConvertArgs({
      input,
      output: wav,
      maxDurationS: LONG_S + 60,
      maxAllocBytes: 2 * 1024 ** 3,
      measureLoudness,
    }),
    cwd: dir,
    ...(measureLoudness ? { setEnv: loudnessReportEnv(LOUDNESS_REPORT_FILE) } : {}),
    timeoutMs: 3_600_000,
  });
  const ms = performance.now() - started;
  if (result.exitCode !== 0) throw new Error(`ffmpeg: ${result.stderrTail}`);
  if (measureLoudness) {
    const loudness = parseEbur128Summary(await readFile(path.join(dir, LOUDNESS_REPORT_FILE), 'utf8'));
    if (!loudness) throw new Error('no loudness in the report');
  }
  return { ms, wav };
}

async function hashOnce(wav: string, withPeaks: boolean): Promise<{ ms: number; peaksBytes: number }> {
  const started = performance.now();
  const accumulator = withPeaks ? createPeaksAccumulator() : undefined;
  await sha256File(wav, accumulator);
  const peaks = accumulator?.finish();
  const peaksBytes = peaks ? peaksJsonBytes(peaks).length : 0;
  return { ms: performance.now() - started, peaksBytes };
}

async function threeHours(): Promise<void> {
  const source = await makeTone(fixtureDir, { seconds: LONG_S, channels: 2, sampleRate: 48000, format: 'm4a' });
  const plain: number[] = [];
  const measured: number[] = [];
  const hashed: number[] = [];
  const hashedWithPeaks: number[] = [];
  let peaksBytes = 0;
  for (let i = 0; i < RUNS; i++) {
    const dir = await mkdtemp(path.join(tmpdir(), 'sf-bench-analysis-'));
    try {
      plain.push((await convertOnce(source.path, dir, false)).ms);
      await rm(path.join(dir, 'plain.wav'));
      const { ms, wav } = await convertOnce(source.path, dir, true);
      measured.push(ms);
      // Alternating, the WAV in the page cache for both, as the store's pass finds it after the conversion.
      hashed.push((await hashOnce(wav, false)).ms);
      const withPeaks = await hashOnce(wav, true);
      hashedWithPeaks.push(withPeaks.ms);
      peaksBytes = withPeaks.peaksBytes;
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  const [p, m, h, hp] = [plain, measured, hashed, hashedWithPeaks].map(median) as [number, number, number, number];
  const list = (values: number[]) => values.map(seconds).join(', ');
  process.stdout.write(
    `${(LONG_S / 3600).toFixed(2)}-hour AAC (48 kHz stereo), median of ${RUNS}:\n` +
      `  conversion, plain:             ${seconds(p)} s   (runs: ${list(plain)})\n` +
      `  conversion, with loudness:     ${seconds(m)} s   (runs: ${list(measured)})   loudness costs ${percent(m - p, p)} of the conversion\n` +
      `  store's hash pass:             ${seconds(h)} s   (runs: ${list(hashed)})\n` +
      `  store's hash pass, with peaks: ${seconds(hp)} s   (runs: ${list(hashedWithPeaks)})   peaks cost ${percent(hp - h, p)} of the conversion (peaks.json ${peaksBytes} bytes)\n`,
  );
}

const PARTS = process.argv[4] ?? 'both';
if (PARTS !== 'long') await threeMinutes();
if (PARTS !== 'short') await threeHours();
