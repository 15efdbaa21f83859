/**
 * Fetch speed, run by hand:
 *   npm run build && npx tsx bench/fetch.ts [runs per case, default 5] [--no-throughput] [--hour] [--baseline DIR]
 *     [--rate BYTES_PER_S] [--events]
 *
 * Media served by a loopback origin in this process. In one run:
 *   1. latency, for the cases of issue 27, a 3-minute 44.1 kHz stereo mp3 and a 3.5-second 48 kHz
 *      stereo AAC (m4a), each job's media a variant of its own (other samples: new content to
 *      store, as a new source's is): the service's submit → done (download: extraction, checks
 *      and media alias at the gate, download; convert, verify, commit; its tools confined as in
 *      production), with
 *      --baseline the same for another checkout's build (DIR/dist/main.js, say main's) run beside
 *      it in the same rounds, against the same download and
 *      conversion run by hand: `yt-dlp -f bestaudio/best` then `ffmpeg ... -ar 44100 -c:a
 *      pcm_s16le`, as plain processes, unconfined, one after the other; and against ffmpeg's
 *      conversion alone of the same file (the floor). They alternate, run by run, so that the
 *      machine's load drifts over all alike; medians, their ratios, and CPU seconds per job (user
 *      + system, the service's whole process tree: Node, the sandboxes and every tool) beside them;
 *   2. where the service's time goes, every millisecond from the POST to done: the POST's answer,
 *      the queue (created → claimed), each step (the task's 'fetch steps' log line), the time
 *      between steps, the end recorded → logged, and the read back; medians;
 *   3. throughput (unless --no-throughput): 50 distinct 10-second clips submitted at once to the
 *      service at WORKER_CONCURRENCY=2, against the hand-run pair over the same 50 clips in a
 *      loop; jobs a minute and CPU seconds per job;
 *   4. with --hour: one job of a one-hour mp3, its time against by hand, and the service's peak
 *      resident memory (VmHWM of its Node process; the tools' peaks beside it, sampled).
 * With --rate, the origin sends the latency cases at that many bytes a second, as a network would,
 * so that the download takes time (on loopback it takes tens of milliseconds).
 * With --events, each latency job is also followed on an event stream (GET /jobs/{id}/events), opened
 * once it is submitted: the profile then says how long after the end was recorded the stream's
 * last event (the final state) arrived.
 * LOUDNESS, WAVEFORM_PEAKS and CONVERTER_WAITING in this script's environment are passed on to the
 * service (and the baseline's), (bench/audio-analysis.ts compares the first two on and off in one run).
 * A job's end is seen in the service's log (its 'fetch steps' line), then read through the API,
 * so that no client poll interval is measured.
 */
import { execFile } from 'node:child_process';
import { readdir, readFile, mkdtemp, rename, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { makeTone, type ToneSpec } from '../test/support/media.js';
import { readEventStream } from '../test/support/event-stream.js';
import { startMediaServer, type MediaServer } from '../test/support/media-server.js';
import { startService, type JobBody, type LogLine, type ServiceHandle } from '../test/support/service.js';
import { sha256File } from '../src/store/content-store.js';
import { runProcess } from '../src/tools/process.js';
import { reapedChildrenCpuSeconds, treeCpuSeconds } from './process-cpu.js';

const RUNS = Number(process.argv.slice(2).find((arg) => /^\d+$/.test(arg)) ?? 5);
const THROUGHPUT = !process.argv.includes('--no-throughput');
const HOUR = process.argv.includes('--hour');
const baselineAt = process.argv.indexOf('--baseline');
const BASELINE = baselineAt >= 0 ? path.resolve(process.argv[baselineAt + 1]!) : undefined;
const rateAt = process.argv.indexOf('--rate');
const RATE = rateAt >= 0 ? Number(process.argv[rateAt + 1]) : undefined;
const EVENTS = process.argv.includes('--events');
const CLIPS = 50;
/** How often this process looks at the service's log lines it has read. */
const WATCH_MS = 2;
// Asynchronous: the media server runs in this process and must keep answering.
const run = promisify(execFile);
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const fixtureDir = path.join(tmpdir(), 'source-fetch-fixtures');

/**
 * Waits for the job's 'fetch steps' line (logged as its task ends, after the job's end is recorded),
 * then reads the job: no client poll interval is measured, and no polling costs the service CPU.
 */
async function waitDone(svc: ServiceHandle, id: string): Promise<{ job: JobBody; line: LogLine; seenAt: number }> {
  let line: LogLine | undefined;
  while (!(line = svc.logs.find((l) => l.msg === 'fetch steps' && l.job_id === id))) await sleep(WATCH_MS);
  const seenAt = Date.now();
  const job = await svc.getJob(id);
  if (job.status !== 'done') throw new Error(`job ${job.status}: ${JSON.stringify(job.error)}`);
  return { job, line, seenAt };
}

interface Sample {
  wallMs: number;
  cpuS: number;
}

interface ServiceSample extends Sample {
  job: JobBody;
  /** The 'fetch steps' line: each step's milliseconds, and when it was logged. */
  line: LogLine;
  /** Wall-clock milliseconds (Date.now()), comparable with the job's timestamps on this machine. */
  postedAt: number;
  answeredAt: number;
  seenAt: number;
  endAt: number;
  /** With --events: when the job's final state arrived on its event stream (Date.now()). */
  finalEventAt?: number;
}

async function serviceOnce(svc: ServiceHandle, url: string): Promise<ServiceSample> {
  const cpu = await treeCpuSeconds(svc.process.pid!);
  const postedAt = Date.now();
  const started = performance.now();
  const submitted = await svc.submit(url);
  const answeredAt = Date.now();
  const following = EVENTS ? followEvents(svc, submitted.job_id) : undefined;
  const { job, line, seenAt } = await waitDone(svc, submitted.job_id);
  const wallMs = performance.now() - started;
  const endAt = Date.now();
  const cpuS = (await treeCpuSeconds(svc.process.pid!)) - cpu;
  const finalEventAt = await following;
  return { wallMs, cpuS, job, line, postedAt, answeredAt, seenAt, endAt, finalEventAt };
}

/** When the job's final state arrives on an event stream opened now (Date.now()). */
async function followEvents(svc: ServiceHandle, id: string): Promise<number> {
  const openedAt = Date.now();
  const response = await fetch(`${svc.baseUrl}/jobs/${id}/events`, {
    headers: { accept: 'text/event-stream', authorization: `Bearer ${svc.apiKey}` },
  });
  const stream = readEventStream(response, openedAt);
  await stream.ended;
  const last = stream.arrivals.filter((arrival) => arrival.kind === 'event').at(-1)!;
  return openedAt + last.at;
}

/** What a user would type: yt-dlp's best audio, then the same conversion, as plain processes. */
async function byHandOnce(url: string): Promise<Sample & { downloadMs: number }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-bench-fetch-'));
  const cpu = await reapedChildrenCpuSeconds();
  const started = performance.now();
  await run('yt-dlp', ['-q', '-f', 'bestaudio/best', '-o', `${dir}/source.%(ext)s`, url]);
  const downloadMs = performance.now() - started;
  const [source] = (await readdir(dir)).filter((name) => name.startsWith('source.'));
  await run('ffmpeg', ['-v', 'error', '-i', `${dir}/${source}`, '-ar', '44100', '-c:a', 'pcm_s16le', `${dir}/out.wav`]);
  const wallMs = performance.now() - started;
  const cpuS = (await reapedChildrenCpuSeconds()) - cpu;
  await rm(dir, { recursive: true, force: true });
  return { wallMs, cpuS, downloadMs };
}

/** The floor: ffmpeg's conversion alone of the file on disk, then Node hashing the WAV it wrote (timed apart). */
async function ffmpegAloneOnce(file: string): Promise<Sample & { hashMs: number }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-bench-ffmpeg-'));
  const cpu = await reapedChildrenCpuSeconds();
  const started = performance.now();
  await run('ffmpeg', ['-v', 'error', '-i', file, '-ar', '44100', '-c:a', 'pcm_s16le', `${dir}/out.wav`]);
  const wallMs = performance.now() - started;
  const cpuS = (await reapedChildrenCpuSeconds()) - cpu;
  const hashStarted = performance.now();
  await sha256File(`${dir}/out.wav`);
  const hashMs = performance.now() - hashStarted;
  await rm(dir, { recursive: true, force: true });
  return { wallMs, cpuS, hashMs };
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
const loadAverage = () =>
  loadavg()
    .map((value) => value.toFixed(2))
    .join(' ');

/**
 * The case's media for each job, served at a route of its own: variant n is the same kind of file
 * with other samples (makeTone's pitch raised by n Hz). A job whose WAV has the bytes of one stored
 * before only hashes it and removes its copy; a new source is moved into the store and flushed.
 * Two variants are made at a time (a 3-minute mp3 takes ffmpeg a few seconds), once, in fixtureDir.
 */
async function variants(
  media: MediaServer,
  spec: ToneSpec,
  count: number,
): Promise<Array<{ route: string; file: string }>> {
  const served: Array<{ route: string; file: string }> = [];
  for (let first = 1; first <= count; first += 2) {
    const made = await Promise.all(
      [first, first + 1].filter((n) => n <= count).map((variant) => makeTone(fixtureDir, { ...spec, variant })),
    );
    for (const tone of made) {
      const route = `/${path.basename(tone.path)}`;
      media.serveFile(route, tone.path, { contentType: tone.contentType, ...paced });
      served.push({ route, file: tone.path });
    }
  }
  return served;
}

async function latency(
  media: MediaServer,
  svc: ServiceHandle,
  baseline: ServiceHandle | undefined,
  name: string,
  spec: ToneSpec,
) {
  const service: ServiceSample[] = [];
  const base: ServiceSample[] = [];
  const byHand: Array<Sample & { downloadMs: number }> = [];
  const alone: Array<Sample & { hashMs: number }> = [];
  // The warm-ups' and every run's: the service's and the baseline's never the same content.
  const [warm, baseWarm, ...rounds] = await variants(media, spec, 2 + 2 * RUNS);
  // One warm-up of each (the service's first job), not counted.
  await serviceOnce(svc, media.url(warm!.route));
  if (baseline) await serviceOnce(baseline, media.url(baseWarm!.route));
  await byHandOnce(media.url(`${warm!.route}?hand-warm`));
  await ffmpegAloneOnce(warm!.file);
  for (let i = 0; i < RUNS; i++) {
    const [ourMedia, theirMedia] = [rounds[2 * i]!, rounds[2 * i + 1]!];
    // The two services take turns at going first: run for run, the first of a round was 30-60 ms
    // slower, same code or not. By hand and ffmpeg alone convert the service's media of the round.
    const ours = async () => service.push(await serviceOnce(svc, media.url(ourMedia.route)));
    const theirs = async () => baseline && base.push(await serviceOnce(baseline, media.url(theirMedia.route)));
    for (const turn of i % 2 === 0 ? [ours, theirs] : [theirs, ours]) await turn();
    byHand.push(await byHandOnce(media.url(`${ourMedia.route}?hand`)));
    alone.push(await ffmpegAloneOnce(ourMedia.file));
  }
  const s = median(service.map((r) => r.wallMs));
  const h = median(byHand.map((r) => r.wallMs));
  const f = median(alone.map((r) => r.wallMs));
  const sCpu = median(service.map((r) => r.cpuS));
  const hCpu = median(byHand.map((r) => r.cpuS));
  const fCpu = median(alone.map((r) => r.cpuS));
  const list = (samples: Sample[]) => samples.map((r) => seconds(r.wallMs)).join(', ');
  process.stdout.write(
    `${name}, median of ${RUNS} (load average ${loadAverage()}):\n` +
      `  service, submit → done:               ${seconds(s)} s   cpu ${sCpu.toFixed(2)} s/job   (runs: ${list(service)})\n` +
      `  by hand, yt-dlp + ffmpeg, unconfined: ${seconds(h)} s   cpu ${hCpu.toFixed(2)} s/job   (runs: ${list(byHand)}; yt-dlp ${seconds(median(byHand.map((r) => r.downloadMs)))} s)\n` +
      `  ffmpeg's conversion alone:            ${seconds(f)} s   cpu ${fCpu.toFixed(2)} s/job   (runs: ${list(alone)}; Node's sha256 of its WAV ${seconds(median(alone.map((r) => r.hashMs)))} s)\n` +
      `  ratio service / by hand:              ${(s / h).toFixed(2)} (wall)   ${(sCpu / hCpu).toFixed(2)} (cpu)\n` +
      `  ratio service / ffmpeg alone:         ${(s / f).toFixed(2)} (wall)   ${(sCpu / fCpu).toFixed(2)} (cpu)\n`,
  );
  if (baseline) {
    const b = median(base.map((r) => r.wallMs));
    const bCpu = median(base.map((r) => r.cpuS));
    process.stdout.write(
      `  baseline (${BASELINE}), submit → done: ${seconds(b)} s   cpu ${bCpu.toFixed(2)} s/job   (runs: ${list(base)})\n` +
        `  ratio baseline / by hand:             ${(b / h).toFixed(2)} (wall)   ${(bCpu / hCpu).toFixed(2)} (cpu)\n` +
        `  ratio baseline / ffmpeg alone:        ${(b / f).toFixed(2)} (wall)   ${(bCpu / fCpu).toFixed(2)} (cpu)\n` +
        `  ratio service / baseline:             ${(s / b).toFixed(2)} (wall)   ${(sCpu / bCpu).toFixed(2)} (cpu)\n`,
    );
  }
  profile(service);
  if (baseline) profile(base, 'baseline');
}

/**
 * Every millisecond from the POST to done, means over the runs (means add up, medians do not), in order: the POST until the
 * job's row exists, the queue until a worker claimed it, each step of the task, the task's time
 * outside its steps (until its 'fetch steps' line, logged last), that line until this process saw
 * it, and the read back of the done job. The parts of one run add up to its wall time.
 */
function profile(runs: ServiceSample[], who = 'service') {
  const ms = (iso: unknown) => Date.parse(iso as string);
  const stepNames = Object.keys(runs[0]!.line).filter((key) => key.endsWith('_ms'));
  const parts: Array<[string, (r: ServiceSample) => number]> = [
    ['POST → job created', (r) => ms(r.job.created_at) - r.postedAt],
    ['created → claimed', (r) => ms(r.job.started_at) - ms(r.job.created_at)],
    ...stepNames.map((key): [string, (r: ServiceSample) => number] => [
      `step ${key.replace(/_ms$/, '')}`,
      (r) => Number(r.line[key]),
    ]),
    [
      'task, outside its steps',
      (r) => ms(r.line.time) - ms(r.job.started_at) - stepNames.reduce((sum, key) => sum + Number(r.line[key]), 0),
    ],
    ['steps line → seen here', (r) => r.seenAt - ms(r.line.time)],
    ['read back (GET)', (r) => r.endAt - r.seenAt],
  ];
  const mean = (values: number[]) => values.reduce((sum, v) => sum + v, 0) / values.length;
  const rows = parts.map(([label, of]) => [label, mean(runs.map(of))] as const);
  const width = Math.max(...rows.map(([label]) => label.length));
  const answered = Math.round(mean(runs.map((r) => r.answeredAt - r.postedAt)));
  const recorded = Math.round(mean(runs.map((r) => ms(r.job.finished_at) - r.postedAt)));
  // Parts of a step, within its time (the download's decision at its gate and the conversion
  // alongside it, the commit's parts), not added up; and how the conversion read its input.
  const within = ['download', 'commit'].flatMap((step) => {
    const of = (r: ServiceSample) => (r.line[`during_${step}`] ?? {}) as Record<string, unknown>;
    const keys = [...new Set(runs.flatMap((r) => Object.keys(of(r))))];
    return keys.map((key) =>
      key.endsWith('_ms')
        ? `      of step ${step}, ${key.replace(/_ms$/, '')}: ${Math.round(mean(runs.map((r) => Number(of(r)[key] ?? 0))))} ms\n`
        : `      of step ${step}, ${key}: ${[...new Set(runs.map((r) => String(of(r)[key])))].join(', ')}\n`,
    );
  });
  const streamed = runs.every((r) => r.finalEventAt !== undefined)
    ? `; the final state on an event stream ${Math.round(mean(runs.map((r) => r.finalEventAt! - ms(r.job.finished_at))))} ms after it`
    : '';
  process.stdout.write(
    `  ${who}, where the time goes (mean ms; POST answered at ${answered}, end recorded at ${recorded}${streamed}):\n` +
      rows.map(([label, value]) => `    ${label.padEnd(width)} ${String(Math.round(value)).padStart(5)}\n`).join('') +
      within.join('') +
      `    ${'sum'.padEnd(width)} ${String(Math.round(rows.reduce((sum, [, v]) => sum + v, 0))).padStart(5)}   (mean wall ${Math.round(mean(runs.map((r) => r.endAt - r.postedAt)))})\n`,
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

/** Resident kilobytes ('VmRSS' now, or 'VmHWM', the peak) of one process; 0 once it is gone. */
async function residentKb(pid: number, field: 'VmRSS' | 'VmHWM'): Promise<number> {
  const text = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  return Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? 0);
}

/** Resident kilobytes of a process's live descendants, summed (the sandboxes and their tools). */
async function descendantsRssKb(rootPid: number): Promise<number> {
  const parents = new Map<number, number>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const text = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    parents.set(Number(entry), Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[1]));
  }
  let total = 0;
  for (const pid of parents.keys()) {
    for (let p = parents.get(pid); p !== undefined && p > 1; p = parents.get(p)) {
      if (p === rootPid) {
        total += await residentKb(pid, 'VmRSS');
        break;
      }
    }
  }
  return total;
}

/** A one-hour 44.1 kHz stereo mp3 (the fixtures' tone generator would take longer than its time limit). */
async function hourMp3(): Promise<string> {
  const file = path.join(fixtureDir, 'bench-hour.mp3');
  if ((await readdir(fixtureDir)).includes(path.basename(file))) return file;
  const lavfi = 'sine=frequency=440:duration=3600:sample_rate=44100';
  const args = ['-nostdin', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', lavfi, '-ac', '2'];
  const result = await runProcess({
    command: 'ffmpeg',
    args: [...args, '-c:a', 'libmp3lame', '-b:a', '128k', `${file}.tmp.mp3`],
    timeoutMs: 900_000,
  });
  if (result.exitCode !== 0) throw new Error(result.stderrTail);
  await rename(`${file}.tmp.mp3`, file);
  return file;
}

/** One job of a one-hour file against by hand, and the memory the service and its tools held. */
async function hour(media: MediaServer, svc: ServiceHandle, file: string) {
  const pid = svc.process.pid!;
  const before = await residentKb(pid, 'VmHWM');
  let toolsPeak = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      toolsPeak = Math.max(toolsPeak, await descendantsRssKb(pid));
      await sleep(50);
    }
  })();
  const service = await serviceOnce(svc, media.url('/tone-3600s.mp3?hour'));
  sampling = false;
  await sampler;
  const peak = await residentKb(pid, 'VmHWM');
  const byHand = await byHandOnce(media.url('/tone-3600s.mp3?hand-hour'));
  const alone = await ffmpegAloneOnce(file);
  const mib = (kb: number) => (kb / 1024).toFixed(0);
  process.stdout.write(
    `one-hour mp3 (44.1 kHz stereo, ${((service.job.result?.artifacts[0]?.bytes ?? 0) / 1e6).toFixed(0)} MB WAV), one run (load average ${loadAverage()}):\n` +
      `  service ${seconds(service.wallMs)} s   cpu ${service.cpuS.toFixed(2)} s; by hand ${seconds(byHand.wallMs)} s; ffmpeg alone ${seconds(alone.wallMs)} s\n` +
      `  ratio service / by hand ${(service.wallMs / byHand.wallMs).toFixed(2)}; service / ffmpeg alone ${(service.wallMs / alone.wallMs).toFixed(2)}\n` +
      `  service's Node process: peak resident ${mib(peak)} MiB (peak before the job ${mib(before)} MiB); its sandboxes and tools, sampled every 50 ms: at most ${mib(toolsPeak)} MiB\n`,
  );
  profile([service]);
}

// The two cases of issue 27: a 3-minute mp3 (31.7 MB of WAV) and a 3.5-second AAC clip.
const LONG: ToneSpec = { seconds: 180, channels: 2, sampleRate: 44100, format: 'mp3' };
const SHORT: ToneSpec = { seconds: 3.5, channels: 2, sampleRate: 48000, format: 'm4a' };
const oneHour = HOUR ? { path: await hourMp3() } : undefined;
const clips: string[] = [];
if (THROUGHPUT) for (let n = 0; n < CLIPS; n++) clips.push(await clip(n));
const media = await startMediaServer();
const paced = RATE ? { throttleBytesPerSec: RATE } : {};
if (RATE) process.stdout.write(`the origin sends the latency cases at ${RATE} bytes/s\n`);
if (oneHour) media.serveFile('/tone-3600s.mp3', oneHour.path, { contentType: 'audio/mpeg' });
const serviceEnv = {
  FETCH_ALLOW_HOSTS: media.hostPort,
  WORKER_CONCURRENCY: '2',
  ...(process.env.LOUDNESS ? { LOUDNESS: process.env.LOUDNESS } : {}),
  ...(process.env.WAVEFORM_PEAKS ? { WAVEFORM_PEAKS: process.env.WAVEFORM_PEAKS } : {}),
  ...(process.env.CONVERTER_WAITING ? { CONVERTER_WAITING: process.env.CONVERTER_WAITING } : {}),
};
const svc = await startService({ env: serviceEnv });
const baseline = BASELINE ? await startService({ env: serviceEnv, root: BASELINE }) : undefined;

/** Waits until a service's tools run in its resident sandbox (a service that has one says so), and says how they run. */
async function toolRunsOf(who: string, handle: ServiceHandle): Promise<void> {
  for (let i = 0; i < 300 && !handle.logs.some((line) => line.msg === 'tool runs' && line.runs === 'resident'); i++)
    await sleep(100);
  const toolRuns = handle.logs.filter((line) => line.msg === 'tool runs').at(-1);
  if (toolRuns)
    process.stdout.write(
      `${who}'s tool runs: ${JSON.stringify({ runs: toolRuns.runs, ytdlp: toolRuns.ytdlp, reason: toolRuns.reason })}\n`,
    );
}

try {
  await toolRunsOf('service', svc);
  if (baseline) await toolRunsOf('baseline', baseline);
  if (oneHour) await hour(media, svc, oneHour.path);
  await latency(media, svc, baseline, '3-minute mp3 (44.1 kHz stereo) → 44.1 kHz WAV', LONG);
  await latency(media, svc, baseline, '3.5-second AAC (48 kHz stereo) → 44.1 kHz WAV', SHORT);
  if (THROUGHPUT) await throughput(media, svc, clips);
} finally {
  await svc.stop();
  await baseline?.stop();
  await media.close();
}
