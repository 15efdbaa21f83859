/**
 * What open job event streams cost a node (run by hand: npm run build && npx tsx bench/job-events.ts
 * [streams] [rounds]). The built service (SQLite, no workers, so the jobs stay queued and nothing
 * changes) gets `streams` jobs; then, for 10 s each, its CPU time (utime + stime from /proc) is
 * measured while idle, while `streams` clients hold one event stream each, and while the same
 * number of clients poll getJob once a second instead (what a client without streams does). Each
 * round measures all three; the medians and the ratios to polling are printed. The clients run
 * in this process, on the same machine: the last line says whether the pollers kept up.
 */
import { spawn } from 'node:child_process';
import { setMaxListeners } from 'node:events';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const ROOT = path.resolve(import.meta.dirname, '..');
const STREAMS = Number(process.argv[2] ?? 200);
const ROUNDS = Number(process.argv[3] ?? 3);
const WINDOW_MS = 10_000;
const KEY = 'events-bench-key-0123456789';
/** Linux's USER_HZ: /proc/<pid>/stat counts CPU time in these ticks. */
const TICKS_PER_S = 100;

const dataDir = await mkdtemp(path.join(tmpdir(), 'sf-bench-events-'));
const child = spawn(process.execPath, [path.join(ROOT, 'dist/main.js')], {
  env: {
    PATH: process.env.PATH,
    DATA_DIR: dataDir,
    PORT: '0',
    API_KEYS: KEY,
    WORKER_CONCURRENCY: '0',
    RATE_LIMIT_PER_MINUTE: '0',
    EVENT_STREAMS_PER_KEY: String(STREAMS * 2),
    EVENT_STREAMS_PER_NODE: String(STREAMS * 2),
    FETCH_ALLOW_HOSTS: '127.0.0.1:9',
  },
  stdio: ['ignore', 'pipe', 'inherit'],
});
// Its log (a line per request, as in production) is read and dropped.
const port = await new Promise<number>((resolve, reject) => {
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    if (output.length < 100_000) output += chunk;
    const m = /"port":(\d+),[^\n]*"msg":"listening"/.exec(output);
    if (m) resolve(Number(m[1]));
  });
  child.once('exit', (code) => reject(new Error(`exited with ${code} before listening:\n${output}`)));
});
const base = `http://127.0.0.1:${port}`;
const auth = { authorization: `Bearer ${KEY}` };

function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

/** CPU milliseconds the service spends per second of wall time while `load` runs. */
async function measure(load: (signal: AbortSignal) => Promise<void>): Promise<number> {
  const stop = new AbortController();
  // Each client's requests and waits listen to it.
  setMaxListeners(0, stop.signal);
  const running = load(stop.signal);
  await sleep(1000); // let the load settle in
  const before = cpuTicks(child.pid!);
  const started = performance.now();
  await sleep(WINDOW_MS);
  const ticks = cpuTicks(child.pid!) - before;
  const elapsed = performance.now() - started;
  stop.abort();
  await running.catch(() => {});
  return ((ticks / TICKS_PER_S) * 1000) / (elapsed / 1000);
}

const jobIds: string[] = [];
for (let i = 0; i < STREAMS; i++) {
  const res = await fetch(`${base}/sources`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ url: `http://127.0.0.1:9/job-${i}.wav` }),
  });
  jobIds.push(((await res.json()) as { job_id: string }).job_id);
}

const idle = () => measure(async (signal) => void (await sleep(WINDOW_MS * 2, undefined, { signal }).catch(() => {})));
const streams = () =>
  measure(async (signal) => {
    await Promise.all(
      jobIds.map(async (id) => {
        const res = await fetch(`${base}/jobs/${id}/events`, { headers: auth, signal });
        if (res.status !== 200) throw new Error(`stream answered ${res.status}`);
        try {
          for await (const _ of res.body as unknown as AsyncIterable<Uint8Array>) {
            // read and drop
          }
        } catch {
          // aborted
        }
      }),
    );
  });
let polls = 0;
const polling = () =>
  measure(async (signal) => {
    await Promise.all(
      jobIds.map(async (id, i) => {
        await sleep((i * 1000) / jobIds.length, undefined, { signal }).catch(() => {});
        while (!signal.aborted) {
          await fetch(`${base}/jobs/${id}`, { headers: auth, signal })
            .then((res) => res.arrayBuffer())
            .then(() => polls++)
            .catch(() => {});
          await sleep(1000, undefined, { signal }).catch(() => {});
        }
      }),
    );
  });

const results = { idle: [] as number[], streams: [] as number[], polling: [] as number[] };
for (let round = 0; round < ROUNDS; round++) {
  results.idle.push(await idle());
  results.streams.push(await streams());
  results.polling.push(await polling());
}
child.kill('SIGTERM');
await new Promise((resolve) => child.once('exit', resolve));
await rm(dataDir, { recursive: true, force: true });

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const show = (values: number[]) =>
  `median ${median(values).toFixed(1)} CPU ms/s (${values.map((v) => v.toFixed(1)).join(', ')})`;
console.log(`${STREAMS} queued jobs, ${ROUNDS} rounds of ${WINDOW_MS / 1000} s each`);
console.log(`idle:                          ${show(results.idle)}`);
console.log(`${STREAMS} open event streams:        ${show(results.streams)}`);
console.log(`${STREAMS} clients polling getJob 1/s: ${show(results.polling)}`);
console.log(`streams / polling: ${(median(results.streams) / median(results.polling)).toFixed(2)}`);
// The clients share the machine with the service: this says whether they kept up.
console.log(
  `polls answered: ${(polls / ((ROUNDS * (WINDOW_MS + 1000)) / 1000)).toFixed(0)} a second (asked: ${STREAMS})`,
);
