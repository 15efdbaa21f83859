/**
 * API benchmark, run by hand (not part of the test suite):
 *
 *   npm run build && npx tsx bench/api.ts [seconds per case, default 10] [rounds, default 3]
 *
 * BENCH_BACKENDS (sqlite,postgres) and BENCH_CASES (a pattern on the case names) pick cases;
 * BENCH_SERVICE_NODE_ARGS passes Node options to the service, e.g. a CPU profile:
 *   BENCH_BACKENDS=sqlite BENCH_CASES=GET BENCH_SERVICE_NODE_ARGS='--cpu-prof --cpu-prof-dir=/tmp/prof' npx tsx bench/api.ts
 *
 * The whole service (dist/main.js: request id, access log at info written to a file, metrics;
 * RATE_LIMIT_PER_MINUTE=0, the per-key rate limit off) on loopback, against a trivial Node JSON
 * server (http.createServer answering the same job record bytes) on the same machine, driven by
 * wrk -t2 -c32 (Debian package wrk):
 *   GET /jobs/{id}          a done job's record (its signed URL made per request)
 *   GET /jobs/{id} (100)    the same, each request for the next of 100 done jobs in turn
 *                           (on PostgreSQL, polls made together are read together: with one
 *                           job they share one read, with 100 they share its round trip)
 *   POST /sources           a URL already stored: a born-done job, committed durably before its 202
 * on SQLite (a file in a temp data dir) and on PostgreSQL (DATABASE_URL if set, else a throwaway
 * cluster started here with PostgreSQL's durable defaults: fsync and synchronous_commit on).
 * Each round measures the trivial server and then the service, case by case; the figures printed
 * are medians over the rounds of req/s, of the ratio service ÷ trivial (per round), of each
 * server's CPU time per request and the ratio trivial ÷ service of those (per round), and of p99.
 */
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { makeTone } from '../test/support/media.js';
import { startMediaServer, type MediaServer } from '../test/support/media-server.js';
import { startPostgresCluster } from '../test/support/postgres.js';
import { startBenchService } from './service.js';

const SECONDS = Number(process.argv[2] ?? 10);
const ROUNDS = Number(process.argv[3] ?? 3);
const THREADS = 2;
const CONNECTIONS = 32;
const run = promisify(execFile);
// For profiling one case: BENCH_BACKENDS=sqlite BENCH_CASES=GET (a pattern on the case names).
const BACKENDS = (process.env.BENCH_BACKENDS ?? 'sqlite,postgres').split(',');
const CASES = process.env.BENCH_CASES ? new RegExp(process.env.BENCH_CASES) : undefined;

interface Measure {
  requestsPerSecond: number;
  /** CPU time (user + system) the server spent per request answered: steadier than req/s on a shared machine. */
  cpuMicrosPerRequest: number;
  p99Ms: number;
  /** Non-2xx answers and socket errors. */
  errors: number;
}

interface Target {
  port: number;
  /** The server's CPU time so far, in microseconds. */
  cpuMicros(): Promise<number>;
  stop(): Promise<void>;
}

interface ServiceTarget extends Target {
  apiKey: string;
  /** A done job's id, and the URL whose submission is born done. */
  jobId: string;
  sourceUrl: string;
  /** The job record as GET /jobs/{id} answers it: the trivial server answers these bytes. */
  record: string;
}

async function main(): Promise<void> {
  const scratch = await mkdtemp(path.join(tmpdir(), 'sf-bench-api-'));
  const media = await startMediaServer();
  const tone = await makeTone(path.join(scratch, 'media'), {
    seconds: 3,
    channels: 2,
    sampleRate: 44100,
    format: 'm4a',
  });
  media.serveFile('/bench.m4a', tone.path, { contentType: tone.contentType });
  const postScript = path.join(scratch, 'post.lua');
  await writeFile(
    postScript,
    `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = ${JSON.stringify(JSON.stringify({ url: media.url('/bench.m4a') }))}\n`,
  );

  const ownCluster =
    process.env.DATABASE_URL || !BACKENDS.includes('postgres')
      ? undefined
      : await startPostgresCluster({ durable: true });
  const postgresUrl = process.env.DATABASE_URL ?? (await ownCluster?.createDatabase()) ?? '';
  const stops: Array<() => Promise<void>> = [
    () => media.close(),
    async () => ownCluster?.stop(),
    () => rm(scratch, { recursive: true, force: true }),
  ];
  try {
    console.log(
      `API benchmark: wrk -t${THREADS} -c${CONNECTIONS} -d${SECONDS}s per case, ${ROUNDS} rounds, loopback; rate limit off (RATE_LIMIT_PER_MINUTE=0); ` +
        `load average before: ${loadavg()
          .map((n) => n.toFixed(2))
          .join(' ')}`,
    );
    for (const [backend, env] of [
      ['sqlite', {}],
      ['postgres', { DATABASE_URL: postgresUrl }],
    ] as const) {
      if (!BACKENDS.includes(backend)) continue;
      const service = await startService(env, media);
      stops.unshift(() => service.stop());
      const trivial = await startTrivialServer(service.record);
      stops.unshift(() => trivial.stop());
      const auth = ['-H', `Authorization: Bearer ${service.apiKey}`];
      const manyJobsScript = path.join(scratch, `get-many-${backend}.lua`);
      await writeFile(manyJobsScript, pollInTurn(await bornDoneJobs(service, 100)));
      const cases = {
        'GET /jobs/{id}': { path: `/jobs/${service.jobId}`, args: auth },
        'GET /jobs/{id} (100 jobs)': { path: '/', args: [...auth, '-s', manyJobsScript] },
        'POST /sources (born done)': { path: '/sources', args: [...auth, '-s', postScript] },
      };
      const results = new Map<string, { trivial: Measure[]; service: Measure[] }>();
      for (let round = 0; round < ROUNDS; round++) {
        for (const [name, { path: urlPath, args }] of Object.entries(cases)) {
          if (CASES && !CASES.test(name)) continue;
          const entry = results.get(name) ?? { trivial: [], service: [] };
          entry.trivial.push(await wrk(trivial, urlPath, args));
          entry.service.push(await wrk(service, urlPath, args));
          results.set(name, entry);
        }
      }
      console.log(`\n${backend}`);
      console.log(
        `${'case'.padEnd(28)}${'trivial req/s'.padStart(15)}${'service req/s'.padStart(15)}${'× trivial'.padStart(11)}${'CPU µs/req'.padStart(14)}${'× trivial'.padStart(11)}${'p99 ms'.padStart(9)}${'errors'.padStart(8)}   rounds (req/s, p99 ms)`,
      );
      for (const [name, { trivial: base, service: measured }] of results) {
        const ratios = measured.map((m, i) => m.requestsPerSecond / base[i]!.requestsPerSecond);
        // The trivial server's CPU per request over the service's: the same ratio, free of how wrk and the server share the cores.
        const cpuRatios = measured.map((m, i) => base[i]!.cpuMicrosPerRequest / m.cpuMicrosPerRequest);
        console.log(
          name.padEnd(28) +
            median(base.map((m) => m.requestsPerSecond))
              .toFixed(0)
              .padStart(15) +
            median(measured.map((m) => m.requestsPerSecond))
              .toFixed(0)
              .padStart(15) +
            median(ratios).toFixed(3).padStart(11) +
            `${median(base.map((m) => m.cpuMicrosPerRequest)).toFixed(0)}/${median(measured.map((m) => m.cpuMicrosPerRequest)).toFixed(0)}`.padStart(
              14,
            ) +
            median(cpuRatios).toFixed(3).padStart(11) +
            median(measured.map((m) => m.p99Ms))
              .toFixed(1)
              .padStart(9) +
            String(measured.reduce((sum, m) => sum + m.errors, 0)).padStart(8) +
            '   ' +
            measured.map((m) => `${m.requestsPerSecond.toFixed(0)}/${m.p99Ms.toFixed(1)}`).join(', '),
        );
      }
      await stops.shift()!();
      await stops.shift()!();
    }
    console.log(
      `\nload average after: ${loadavg()
        .map((n) => n.toFixed(2))
        .join(' ')}`,
    );
  } finally {
    for (const stop of stops) await stop();
  }
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

/** `count` born-done jobs' ids, submitted one after the other. */
async function bornDoneJobs(service: ServiceTarget, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const response = await fetch(`http://127.0.0.1:${service.port}/sources`, {
      method: 'POST',
      headers: { authorization: `Bearer ${service.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: service.sourceUrl }),
    });
    const { job_id: id } = (await response.json()) as { job_id: string };
    ids.push(id);
  }
  return ids;
}

/** A wrk script whose requests go to GET /jobs/{id} for each of `ids` in turn. */
function pollInTurn(ids: string[]): string {
  return `local ids = {${ids.map((id) => JSON.stringify(id)).join(', ')}}\nlocal next = 0\nrequest = function()\n  next = next % #ids + 1\n  return wrk.format("GET", "/jobs/" .. ids[next])\nend\n`;
}

/** The baseline: plain Node answering the job record for any GET, and after reading the body for any POST. */
async function startTrivialServer(body: string): Promise<Target> {
  const server: Server = createServer((req, res) => {
    const answer = () => {
      res.writeHead(req.method === 'POST' ? 202 : 200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      });
      res.end(body);
    };
    if (req.method === 'POST') req.resume().once('end', answer);
    else answer();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  // In this process, which does nothing else while wrk runs.
  const cpuMicros = () => {
    const usage = process.cpuUsage();
    return Promise.resolve(usage.user + usage.system);
  };
  return {
    port: (server.address() as AddressInfo).port,
    cpuMicros,
    stop: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** The whole service (bench/service.ts), rate limit off; it fetches the tone once so that its URL is stored. */
async function startService(env: Record<string, string>, media: MediaServer): Promise<ServiceTarget> {
  const sourceUrl = media.url('/bench.m4a');
  const service = await startBenchService({
    sourceUrl,
    allowHost: media.hostPort,
    env: {
      RATE_LIMIT_PER_MINUTE: '0',
      // Room for every born-done job wrk makes (born-done jobs are never queued, but be explicit).
      MAX_QUEUED_JOBS: '1000000',
      ...env,
    },
    // e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`, to profile the service under load.
    nodeArgs: (process.env.BENCH_SERVICE_NODE_ARGS ?? '').split(' ').filter(Boolean),
  });
  return { ...service, sourceUrl, cpuMicros: () => processCpuMicros(service.pid) };
}

/** utime + stime of a process (/proc/<pid>/stat fields 14 and 15, in clock ticks of 10 ms). */
async function processCpuMicros(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

async function wrk(target: Target, urlPath: string, args: string[]): Promise<Measure> {
  const cpuBefore = await target.cpuMicros();
  const { stdout } = await run(
    'wrk',
    [
      `-t${THREADS}`,
      `-c${CONNECTIONS}`,
      `-d${SECONDS}s`,
      '--latency',
      ...args,
      `http://127.0.0.1:${target.port}${urlPath}`,
    ],
    { maxBuffer: 1 << 20 },
  );
  const cpu = (await target.cpuMicros()) - cpuBefore;
  const number = (pattern: RegExp) => Number(pattern.exec(stdout)?.[1] ?? 0);
  const p99 = /^\s+99%\s+([\d.]+)(us|ms|s)\s*$/m.exec(stdout);
  const ms: Record<string, number> = { us: 1e-3, ms: 1, s: 1000 };
  return {
    requestsPerSecond: number(/Requests\/sec:\s+([\d.]+)/),
    cpuMicrosPerRequest: cpu / number(/(\d+) requests in/),
    p99Ms: p99 ? Number(p99[1]) * ms[p99[2]!]! : NaN,
    errors: number(/Non-2xx or 3xx responses:\s+(\d+)/) + number(/Socket errors:.*?timeout (\d+)/),
  };
}

await main();
