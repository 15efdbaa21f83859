/**
 * Fetch speed, run by hand: npm run build && npx tsx bench/fetch.ts [runs per case, default 5]
 *
 * Media served by a loopback origin in this process. In one run:
 *   1. latency, for a 3-minute and a 10-second 48 kHz stereo AAC file: the service's submit →
 *      done (probe, media alias, download, verify, convert, commit; its tools confined as in
 *      production) against the same download and conversion run by hand: `yt-dlp -f
 *      bestaudio/best` then `ffmpeg ... -ar 44100 -c:a pcm_s16le`, as plain processes, unconfined,
 *      one after the other. The two alternate, run by run, so that the machine's load drifts over
 *      both alike; medians, their ratio, and CPU seconds per job (user + system, the service's
 *      whole process tree: Node, the sandboxes and every tool) beside them;
 *   2. where the service's time goes: the median duration of each step (the task's 'fetch
 *      steps' log line), and the queue and status-poll time around them;
 *   3. throughput: 50 distinct 10-second clips submitted at once to the service at
 *      WORKER_CONCURRENCY=2, against the hand-run pair over the same 50 clips in a loop; jobs a
 *      minute and CPU seconds per job.
 * LOUDNESS and WAVEFORM_PEAKS in this script's environment are passed on to the service
 * (bench/audio-analysis.ts compares them on and off in one run).
 * A job's end is seen in the service's log (its 'fetch steps' line), then read through the API,
 * so that no client poll interval is measured.
 */
import { execFile } from 'node:child_process';
import { readdir, readFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { makeTone } from '../test/support/media.js';
import { startMediaServer, type MediaServer } from '../test/support/media-server.js';
import { startService, type JobBody, type ServiceHandle } from '../test/support/service.js';
import { runProcess } from '../src/tools/process.js';

const RUNS = Number(process.argv[2] ?? 5);
const CLIPS = 50;
/** How often this process looks at the service's log lines it has read. */
const WATCH_MS = 2;
const CLOCK_TICKS = 100; // getconf CLK_TCK on Linux
// Asynchronous: the media server runs in this process and must keep answering.
const run = promisify(execFile);
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const fixtureDir = path.join(tmpdir(), 'source-fetch-fixtures');

/** CPU seconds (user + system, reaped children included) of a process and all its live descendants. */
async function treeCpuSeconds(rootPid: number): Promise<number> {
  const stats = new Map<number, { ppid: number; ticks: number }>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const text = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    // After "pid (comm) ": state ppid ... utime(14) stime(15) cutime(16) cstime(17), counted from 1.
    if (fields.length < 15) continue;
    const ticks = Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
    stats.set(Number(entry), { ppid: Number(fields[1]), ticks });
  }
  let total = 0;
  for (const [pid, stat] of stats) {
    for (let p: number | undefined = pid; p !== undefined && p > 1; p = stats.get(p)?.ppid) {
      if (p === rootPid) {
        total += stat.ticks;
        break;
      }
    }
  }
  return total / CLOCK_TICKS;
}

/** CPU seconds of the children this process has waited for (the hand-run tools). */
async function reapedChildrenCpuSeconds(): Promise<number> {
  const text = await readFile('/proc/self/stat', 'utf8');
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[13]) + Number(fields[14])) / CLOCK_TICKS;
}

/**
 * Waits for the job's 'fetch steps' line (logged as its task ends, after the job's end is recorded),
 * then reads the job: no client poll interval is measured, and no polling costs the service CPU.
 */
async function waitDone(svc: ServiceHandle, id: string): Promise<JobBody> {
  while (!svc.logs.some((line) => line.msg === 'fetch steps' && line.job_id === id)) await sleep(WATCH_MS);
  const job = await svc.getJob(id);
  if (job.status !== 'done') throw new Error(`job ${job.status}: ${JSON.stringify(job.error)}`);
  return job;
}

interface Sample {
  wallMs: number;
  cpuS: number;
}

async function serviceOnce(svc: ServiceHandle, url: string): Promise<Sample & { job: JobBody }> {
  const cpu = await treeCpuSeconds(svc.process.pid!);
  const started = performance.now();
  const submitted = await svc.submit(url);
  const job = await waitDone(svc, submitted.job_id);
  const wallMs = performance.now() - started;
  return { wallMs, cpuS: (await treeCpuSeconds(svc.process.pid!)) - cpu, job };
}

/** What a user would type: yt-dlp's best audio, then the same conversion, as plain processes. */
async function byHandOnce(url: string): Promise<Sample> {
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-bench-fetch-'));
  const cpu = await reapedChildrenCpuSeconds();
  const started = performance.now();
  await run('yt-dlp', ['-q', '-f', 'bestaudio/best', '-o', `${dir}/source.%(ext)s`, url]);
  const [source] = (await readdir(dir)).filter((name) => name.startsWith('source.'));
  await run('ffmpeg', ['-v', 'error', '-i', `${dir}/${source}`, '-ar', '44100', '-c:a', 'pcm_s16le', `${dir}/out.wav`]);
  const wallMs = performance.now() - started;
  const cpuS = (await reapedChildrenCpuSeconds()) - cpu;
  await rm(dir, { recursive: true, force: true });
  return { wallMs, cpuS };
}

/** A 10-second clip of its own pitch, so that no two clips have the same bytes. */
async function clip(n: number): Promise<string> {
  const file = path.join(fixtureDir, `bench-clip-${n}.m4a`);
  if ((await readdir(fixtureDir)).includes(path.basename(file))) return file;
  const result = await runProcess({
    command: 'ffmpeg',
    args: [
      '-nostdin',
      '-loglevel',
      'error',
      '-y',
      '-f',
      'lavfi',
      '-i',
      `sine=frequency=${300 + n * 7}:duration=10:sample_rate=48000`,
      '-ac',
      '2',
      '-c:a',
      'aac',
      '-b:a',
      '128k',
      file,
    ],
    timeoutMs: 60_000,
  });
  if (result.exitCode !== 0) throw new Error(result.stderrTail);
  return file;
}

const seconds = (ms: number) => (ms / 1000).toFixed(2);

async function latency(media: MediaServer, svc: ServiceHandle, name: string, route: string) {
  const service: Array<Sample & { job: JobBody }> = [];
  const byHand: Sample[] = [];
  // One warm-up of each (fixture in the page cache, service's first job), not counted.
  await serviceOnce(svc, media.url(`${route}?warm`));
  await byHandOnce(media.url(`${route}?hand-warm`));
  for (let i = 0; i < RUNS; i++) {
    // A distinct query string per run: the same URL would be born done.
    service.push(await serviceOnce(svc, media.url(`${route}?run=${i}`)));
    byHand.push(await byHandOnce(media.url(`${route}?hand=${i}`)));
  }
  const s = median(service.map((r) => r.wallMs));
  const h = median(byHand.map((r) => r.wallMs));
  const sCpu = median(service.map((r) => r.cpuS));
  const hCpu = median(byHand.map((r) => r.cpuS));
  const list = (samples: Sample[]) => samples.map((r) => seconds(r.wallMs)).join(', ');
  process.stdout.write(
    `${name}, median of ${RUNS}:\n` +
      `  service, submit → done:               ${seconds(s)} s   cpu ${sCpu.toFixed(2)} s/job   (runs: ${list(service)})\n` +
      `  by hand, yt-dlp + ffmpeg, unconfined: ${seconds(h)} s   cpu ${hCpu.toFixed(2)} s/job   (runs: ${list(byHand)})\n` +
      `  ratio service / by hand:              ${(s / h).toFixed(2)} (wall)   ${(sCpu / hCpu).toFixed(2)} (cpu)\n`,
  );
  profile(svc, service);
}

/** Median of each step, from the service's 'fetch steps' lines, and the time around the steps. */
function profile(svc: ServiceHandle, runs: Array<Sample & { job: JobBody }>) {
  const ids = new Set(runs.map((r) => r.job.job_id));
  const lines = svc.logs.filter((line) => line.msg === 'fetch steps' && ids.has(line.job_id as string));
  if (lines.length === 0) return;
  const names = Object.keys(lines[0]!).filter((key) => key.endsWith('_ms'));
  const parts = names.map((key) => `${key.replace(/_ms$/, '')} ${median(lines.map((l) => Number(l[key])))}`);
  const ms = (iso: unknown) => Date.parse(iso as string);
  const queued = median(runs.map((r) => ms(r.job.started_at) - ms(r.job.created_at)));
  const total = median(runs.map((r) => ms(r.job.finished_at) - ms(r.job.started_at)));
  const outside = median(runs.map((r) => r.wallMs - (ms(r.job.finished_at) - ms(r.job.created_at))));
  process.stdout.write(
    `  service steps, median ms: ${parts.join(', ')}; started → finished ${total}; queued ${queued}; submit and read back ${Math.round(outside)}\n`,
  );
}

async function throughput(media: MediaServer, svc: ServiceHandle, clips: string[]) {
  clips.forEach((file, n) => media.serveFile(`/clip-${n}.m4a`, file, { contentType: 'audio/mp4' }));
  const serviceCpu = await treeCpuSeconds(svc.process.pid!);
  let started = performance.now();
  const submitted = await Promise.all(clips.map((_, n) => svc.submit(media.url(`/clip-${n}.m4a`))));
  for (const job of submitted) await waitDone(svc, job.job_id);
  const serviceMs = performance.now() - started;
  const serviceCpuS = (await treeCpuSeconds(svc.process.pid!)) - serviceCpu;

  const handCpu = await reapedChildrenCpuSeconds();
  started = performance.now();
  for (let n = 0; n < clips.length; n++) await byHandOnce(media.url(`/clip-${n}.m4a?hand`));
  const handMs = performance.now() - started;
  const handCpuS = (await reapedChildrenCpuSeconds()) - handCpu;

  const perMinute = (ms: number) => (clips.length / ms) * 60_000;
  process.stdout.write(
    `${clips.length} distinct 10-second clips:\n` +
      `  service, all submitted at once, WORKER_CONCURRENCY=2: ${perMinute(serviceMs).toFixed(1)} jobs/min   cpu ${(serviceCpuS / clips.length).toFixed(2)} s/job   (${seconds(serviceMs)} s)\n` +
      `  by hand, yt-dlp + ffmpeg in a loop, unconfined:       ${perMinute(handMs).toFixed(1)} jobs/min   cpu ${(handCpuS / clips.length).toFixed(2)} s/job   (${seconds(handMs)} s)\n` +
      `  ratio service / by hand:                              ${(perMinute(serviceMs) / perMinute(handMs)).toFixed(2)} (jobs/min)\n`,
  );
}

const long = await makeTone(fixtureDir, { seconds: 180, channels: 2, sampleRate: 48000, format: 'm4a' });
const short = await makeTone(fixtureDir, { seconds: 10, channels: 2, sampleRate: 48000, format: 'm4a' });
const clips: string[] = [];
for (let n = 0; n < CLIPS; n++) clips.push(await clip(n));
const media = await startMediaServer();
media.serveFile('/tone-180s.m4a', long.path, { contentType: 'audio/mp4' });
media.serveFile('/tone-10s.m4a', short.path, { contentType: 'audio/mp4' });
const svc = await startService({
  env: {
    FETCH_ALLOW_HOSTS: media.hostPort,
    WORKER_CONCURRENCY: '2',
    ...(process.env.LOUDNESS ? { LOUDNESS: process.env.LOUDNESS } : {}),
    ...(process.env.WAVEFORM_PEAKS ? { WAVEFORM_PEAKS: process.env.WAVEFORM_PEAKS } : {}),
  },
});
try {
  // The tools run in the resident sandbox once it is ready (a service that has one says so).
  for (let i = 0; i < 300 && !svc.logs.some((line) => line.msg === 'tool runs' && line.runs === 'resident'); i++)
    await sleep(100);
  const toolRuns = svc.logs.filter((line) => line.msg === 'tool runs').at(-1);
  if (toolRuns)
    process.stdout.write(
      `service's tool runs: ${JSON.stringify({ runs: toolRuns.runs, ytdlp: toolRuns.ytdlp, reason: toolRuns.reason })}\n`,
    );
  await latency(media, svc, '3-minute AAC (48 kHz stereo) → 44.1 kHz WAV', '/tone-180s.m4a');
  await latency(media, svc, '10-second AAC (48 kHz stereo) → 44.1 kHz WAV', '/tone-10s.m4a');
  await throughput(media, svc, clips);
} finally {
  await svc.stop();
  await media.close();
}
