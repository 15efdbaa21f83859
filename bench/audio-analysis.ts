/**
 * The cost of loudness and waveform peaks, run by hand:
 *   npm run build && npx tsx bench/audio-analysis.ts [runs per case, default 3] [long file's seconds, default 10800] [parts: both (default), short, long]
 *
 * In one run:
 *   1. a 3-minute 48 kHz stereo AAC fetched by three services side by side: with loudness and
 *      peaks (both in the store's hash pass), with peaks alone, and with neither; they take turns,
 *      run by run, so that the machine's load drifts over all alike. Medians of submit → done, and
 *      of the convert and commit steps (the 'fetch steps' log line);
 *   2. a 3-hour 48 kHz stereo AAC through the passes the analysis rides on, as plain processes and
 *      calls: the conversion (ffmpeg with the service's arguments), then the store's hash pass over
 *      its WAV (sha256File) alone, with the peaks accumulator, with the loudness meter, and with
 *      both, taking turns. Each cost is given as a share of the run's conversion time.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { sha256File, type ByteObserver } from '../src/store/content-store.js';
import { createLoudnessMeter } from '../src/store/loudness.js';
import { createPeaksAccumulator, peaksJsonBytes } from '../src/store/peaks.js';
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
    const [both, peaksAlone] = rows as [(typeof rows)[0], (typeof rows)[0]];
    process.stdout.write(`3-minute AAC (48 kHz stereo), median of ${RUNS}, the services taking turns:\n`);
    Object.keys(SETTINGS).forEach((name, n) => {
      const row = rows[n]!;
      process.stdout.write(
        `  ${name}: submit → done ${seconds(row.wall)} s (convert ${row.convert} ms, commit ${row.commit} ms), ` +
          `${percent(row.wall - base.wall, base.wall)} over both off   runs: ${row.list}\n`,
      );
    });
    // Both ride on the commit step's hash pass: its growth is their cost, without the convert step's spread.
    process.stdout.write(
      `  commit step: loudness adds ${both.commit - peaksAlone.commit} ms (${percent(both.commit - peaksAlone.commit, base.wall)} of a job with neither), ` +
        `peaks ${peaksAlone.commit - base.commit} ms (${percent(peaksAlone.commit - base.commit, base.wall)})\n`,
    );
  } finally {
    await Promise.all(services.map((svc) => svc.stop()));
    await media.close();
  }
}

async function convertOnce(input: string, dir: string): Promise<{ ms: number; wav: string }> {
  const wav = path.join(dir, 'plain.wav');
  const started = performance.now();
  const result = await runProcess({
    command: 'ffmpeg',
    args: buildConvertArgs({ input, output: wav, maxDurationS: LONG_S + 60, maxAllocBytes: 2 * 1024 ** 3 }),
    cwd: dir,
    timeoutMs: 3_600_000,
  });
  const ms = performance.now() - started;
  if (result.exitCode !== 0) throw new Error(`ffmpeg: ${result.stderrTail}`);
  return { ms, wav };
}

type Pass = 'plain' | 'peaks' | 'loudness' | 'both';
const PASSES: Pass[] = ['plain', 'peaks', 'loudness', 'both'];

/** The store's hash pass over `wav`, with what `pass` names riding on it, as the commit step sets it up. */
async function hashOnce(wav: string, pass: Pass): Promise<{ ms: number; note: string }> {
  const started = performance.now();
  const peaks = pass === 'peaks' || pass === 'both' ? createPeaksAccumulator() : undefined;
  const meter = pass === 'loudness' || pass === 'both' ? createLoudnessMeter() : undefined;
  const observer: ByteObserver = {
    update(chunk) {
      peaks?.update(chunk);
      meter?.update(chunk);
    },
  };
  await sha256File(wav, pass === 'plain' ? undefined : observer);
  const peaksResult = peaks?.finish();
  const loudness = meter?.finish();
  const ms = performance.now() - started;
  const note = [
    peaksResult ? `peaks.json ${peaksJsonBytes(peaksResult).length} bytes` : '',
    loudness
      ? `I ${loudness.integratedLufs.toFixed(1)} LUFS, LRA ${loudness.rangeLu.toFixed(1)} LU, TP ${loudness.truePeakDbtp.toFixed(1)} dBTP`
      : '',
  ]
    .filter(Boolean)
    .join('; ');
  return { ms, note };
}

async function threeHours(): Promise<void> {
  const source = await makeTone(fixtureDir, { seconds: LONG_S, channels: 2, sampleRate: 48000, format: 'm4a' });
  const conversions: number[] = [];
  const passes = Object.fromEntries(PASSES.map((pass) => [pass, [] as number[]])) as Record<Pass, number[]>;
  const notes = new Set<string>();
  for (let i = 0; i < RUNS; i++) {
    const dir = await mkdtemp(path.join(tmpdir(), 'sf-bench-analysis-'));
    try {
      const { ms, wav } = await convertOnce(source.path, dir);
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
      PASSES.map(
        (pass) =>
          `  store's hash pass, ${pass.padEnd(8)}:        ${seconds(median(passes[pass]))} s   (runs: ${list(passes[pass])})` +
          (pass === 'plain' ? '' : `   +${share(pass)} % of the conversion`),
      ).join('\n') +
      `\n  ${[...notes].join('\n  ')}\n`,
  );
}

const PARTS = process.argv[4] ?? 'both';
if (PARTS !== 'long') await threeMinutes();
if (PARTS !== 'short') await threeHours();
