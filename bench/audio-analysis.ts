/**
 * The cost of loudness and waveform peaks, run by hand:
 *   npm run build && npx tsx bench/audio-analysis.ts [runs per case, default 3] [long file's seconds, default 10800] [parts: both (default), short, long]
 *
 * In one run:
 *   1. a 3-minute 48 kHz stereo AAC fetched by three services side by side: with loudness (in the
 *      conversion) and peaks (in the store's hash pass), with peaks alone, and with neither; they
 *      take turns, run by run, so that the machine's load drifts over all alike. Medians of submit
 *      → done, and of the convert and commit steps (the 'fetch steps' log line);
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
    process.stdout.write(`3-minute AAC (48 kHz stereo), median of ${RUNS}, the services taking turns:\n`);
    Object.keys(SETTINGS).forEach((name, n) => {
      const row = rows[n]!;
      process.stdout.write(
        `  ${name}: submit → done ${seconds(row.wall)} s (convert ${row.convert} ms, commit ${row.commit} ms), ` +
          `${percent(row.wall - base.wall, base.wall)} over both off   runs: ${row.list}\n`,
      );
    });
  } finally {
    await Promise.all(services.map((svc) => svc.stop()));
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
  // Each run's cost against its own plain conversion, then the median of those shares.
  const loudnessShare = median(plain.map((ms, i) => (measured[i]! - ms) / ms));
  const peaksShare = median(plain.map((ms, i) => (hashedWithPeaks[i]! - hashed[i]!) / ms));
  const list = (values: number[]) => values.map(seconds).join(', ');
  process.stdout.write(
    `${(LONG_S / 3600).toFixed(2)}-hour AAC (48 kHz stereo), median of ${RUNS}:\n` +
      `  conversion, plain:             ${seconds(p)} s   (runs: ${list(plain)})\n` +
      `  conversion, with loudness:     ${seconds(m)} s   (runs: ${list(measured)})\n` +
      `  store's hash pass:             ${seconds(h)} s   (runs: ${list(hashed)})\n` +
      `  store's hash pass, with peaks: ${seconds(hp)} s   (runs: ${list(hashedWithPeaks)}; peaks.json ${peaksBytes} bytes)\n` +
      `  cost over the run's plain conversion, median of the runs: loudness ${(loudnessShare * 100).toFixed(1)} %, peaks ${(peaksShare * 100).toFixed(1)} %\n`,
  );
}

const PARTS = process.argv[4] ?? 'both';
if (PARTS !== 'long') await threeMinutes();
if (PARTS !== 'short') await threeHours();
