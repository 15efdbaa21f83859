/**
 * Scale-out benchmark, run by hand (not part of the test suite):
 *
 *   npm run build && npx tsx bench/scale-out.ts [--runs=3] [--only=latency,standin,real,submit]
 *                                               [--warmup=60] [--seconds=10] [--quick]
 *
 * The built service (node dist/main.js) as separate processes on loopback, on SQLite (one node,
 * DATA_DIR) or on one throwaway PostgreSQL cluster (test/support/postgres.ts: initdb as the
 * postgres user, with PostgreSQL's default durability, as a deployment runs it), with fresh
 * nodes, data dirs, database and shared ARTIFACT_ROOT for each measurement. Setups: SQLite 1 node,
 * Postgres 1 node, Postgres 3 nodes. Every node runs with RATE_LIMIT_PER_MINUTE=0 (no per-key
 * limit), MAX_QUEUED_JOBS=10000000 (a queue filled by the submission load never answers 429), and
 * writes its log (info) to a file, as a deployment would ship it. Each measurement runs --runs
 * times, the runs interleaving the setups so that the machine's noise spreads over all of them;
 * the table shows medians over runs and ratios against SQLite 1 node and Postgres 1 node from
 * this same run of the script:
 *
 *   1. claim latency: jobs one at a time on idle workers (WORKER_CONCURRENCY=2 per node), each
 *      submitted to the next node in turn, stand-in tools (below) so that each ends fast. "202 →
 *      claimed" is the job record's started_at (the worker's clock as it claimed the job) minus
 *      this process's clock when the 202 reached it: same machine, same clock, no polling in the
 *      figure; negative when the job was claimed before its 202 arrived. "created → claimed" is
 *      started_at − created_at, both from the record.
 *   2. jobs/s: N jobs submitted at once (8 requests in flight, spread over the nodes), from the
 *      first submission to the last finished_at; every job must end done.
 *      - queue alone: YTDLP_PATH and FFMPEG_PATH are stand-in shell scripts that answer at once
 *        (probe JSON, an 8 KiB WAV made distinct by the job's info JSON, a copy) with
 *        TOOL_CONFINEMENT=off: what is left is the service's own work per job (claim, lease,
 *        three tool spawns, hashing, store, commit transaction).
 *      - real tools: yt-dlp and ffmpeg as a user runs them (confined: netns), a distinct
 *        1 s mono AAC file per job from a media server on 127.0.0.1.
 *   3. submissions/s: wrk (3 threads; with 3 nodes one thread per node) POSTs /sources with a
 *      distinct URL per request on the loopback media server (allowed by FETCH_ALLOW_HOSTS, so the
 *      destination check resolves nothing outside); all nodes API-only (WORKER_CONCURRENCY=0), so
 *      jobs stay queued; every answer must be a 202.
 *
 * Beside each rate, the CPU time (user + system, from /proc) the nodes, their tools and every
 * Postgres process spent per job or per submission: on this shared 2-core machine other people's
 * load moves rates far more than it moves CPU time. Before each measurement, unmeasured warm-up
 * work (submissions, jobs, --warmup seconds of load) lets V8 optimise the nodes' code: a node that
 * gets a third of the load takes three times as long to warm up, which made 3 nodes look far worse
 * than they are after a short warm-up. The jobs the submission warm-up queued are canceled in the
 * database before the measured load, since the admission check counts queued jobs on every
 * submission (its cost grows with the queue).
 *
 * The machine's load (os.loadavg) is printed before each measurement and summed up at the end;
 * warnings and errors the nodes logged are counted and printed. Everything started here (nodes,
 * cluster, media server, wrk) is stopped at the end, on failure and on Ctrl-C too, and every temp
 * folder removed.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { closeSync, openSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import BetterSqlite3 from 'better-sqlite3';
import postgres from 'postgres';
import { makeTone } from '../test/support/media.js';
import { startMediaServer, type MediaServer } from '../test/support/media-server.js';
import { psql, startPostgresCluster, type PostgresCluster } from '../test/support/postgres.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const argv = process.argv.slice(2);
const QUICK = argv.includes('--quick');
const RUNS = Number(argv.find((arg) => arg.startsWith('--runs='))?.slice('--runs='.length) ?? (QUICK ? 1 : 3));
/** --only=latency,standin,real,submit: some of the measurements (default: all). */
const ONLY = new Set(
  (argv.find((arg) => arg.startsWith('--only='))?.slice('--only='.length) ?? 'latency,standin,real,submit').split(','),
);
const SUBMIT_WARMUP_S = Number(
  argv.find((arg) => arg.startsWith('--warmup='))?.slice('--warmup='.length) ?? (QUICK ? 2 : 60),
);
const SUBMIT_SECONDS = Number(
  argv.find((arg) => arg.startsWith('--seconds='))?.slice('--seconds='.length) ?? (QUICK ? 3 : 10),
);
const LATENCY_SAMPLES = QUICK ? 10 : 40;
/** Submissions and jobs before each measurement, unmeasured: a fresh node's code is not optimised yet. */
const LATENCY_WARMUP = QUICK ? 3 : 10;
const STANDIN_WARMUP_JOBS = QUICK ? 10 : 150;
const STANDIN_JOBS = QUICK ? 30 : 150;
const REAL_JOBS = QUICK ? 4 : 16;
const WRK_THREADS = 3;
const WRK_CONNECTIONS = 12;
const SUBMIT_IN_FLIGHT = 8;
const WORKERS_PER_NODE = 2;
const API_KEY = 'scale-out-bench-key-0123456789';
const STANDIN_WAV_DATA_BYTES = 8192;

// ---------------------------------------------------------------------------------------------
// Everything started is registered here and stopped in reverse order, whatever happens.

const cleanups: Array<() => Promise<void>> = [];
function onCleanup(fn: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | undefined;
  const once = () => (done ??= fn().catch((err: unknown) => console.error('cleanup failed:', err)));
  cleanups.push(once);
  return once;
}
async function cleanUpAll(): Promise<void> {
  while (cleanups.length > 0) await cleanups.pop()!();
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`\n${signal}: stopping everything`);
    void cleanUpAll().finally(() => process.exit(130));
  });
}

// ---------------------------------------------------------------------------------------------
// Statistics and the machine's load.

const sorted = (values: number[]) => [...values].sort((a, b) => a - b);
const median = (values: number[]) => {
  const s = sorted(values);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};
/** Nearest rank. */
const percentile = (values: number[], p: number) =>
  sorted(values)[Math.max(0, Math.ceil((p / 100) * values.length) - 1)]!;
const loads: number[] = [];
function load(): string {
  const [one, five, fifteen] = os.loadavg() as [number, number, number];
  loads.push(one);
  return `load ${one.toFixed(2)} ${five.toFixed(2)} ${fifteen.toFixed(2)}`;
}

// ---------------------------------------------------------------------------------------------
// Service nodes.

interface Node {
  baseUrl: string;
  port: number;
  nodeId: string;
  pid: number;
  /** Its DATA_DIR, made here and removed by stop(). */
  dataDir: string;
  /** Submissions it answered so far, by its access log. */
  submissionsAnswered(): Promise<number>;
  stop(): Promise<void>;
}

/** Warnings and errors logged by the nodes, by setup and message. */
const nodeComplaints = new Map<string, number>();

async function startNode(env: Record<string, string>, label: string): Promise<Node> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'sf-bench-node-'));
  const logFile = path.join(dataDir, 'service.log');
  const fd = openSync(logFile, 'a');
  let child: ChildProcess;
  try {
    child = spawn(process.execPath, [path.join(ROOT, 'dist/main.js')], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: process.env.HOME ?? '/root',
        HOST: '127.0.0.1',
        PORT: '0',
        DATA_DIR: dataDir,
        API_KEYS: API_KEY,
        LOG_LEVEL: 'info',
        SHUTDOWN_GRACE_S: '5',
        RATE_LIMIT_PER_MINUTE: '0',
        MAX_QUEUED_JOBS: '10000000',
        ...env,
      },
      stdio: ['ignore', fd, fd],
    });
  } finally {
    closeSync(fd);
  }
  const exited = once(child, 'exit');
  const stop = onCleanup(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    }
    await countComplaints(logFile, label);
    await rm(dataDir, { recursive: true, force: true });
  });
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) break;
    const text = await readFile(logFile, 'utf8').catch(() => '');
    const line = text.split('\n').find((l) => l.includes('"msg":"listening"'));
    if (line) {
      const { port, node_id } = JSON.parse(line) as { port: number; node_id: string };
      const submissionsAnswered = async () => {
        const log = await readFile(logFile, 'utf8');
        return log
          .split('\n')
          .filter(
            (l) => l.includes('"msg":"request"') && l.includes('"method":"POST"') && l.includes('"route":"/sources"'),
          ).length;
      };
      return {
        baseUrl: `http://127.0.0.1:${port}`,
        port,
        nodeId: node_id,
        pid: child.pid!,
        dataDir,
        submissionsAnswered,
        stop,
      };
    }
    await sleep(25);
  }
  const text = await readFile(logFile, 'utf8').catch(() => '');
  await stop();
  throw new Error(`node did not start:\n${text.slice(-4000)}`);
}

async function countComplaints(logFile: string, label: string): Promise<void> {
  const text = await readFile(logFile, 'utf8').catch(() => '');
  for (const line of text.split('\n')) {
    if (line === '') continue;
    let entry: { level?: number; msg?: string; err?: { message?: string } };
    try {
      entry = JSON.parse(line) as typeof entry;
    } catch {
      entry = { level: 50, msg: `(not JSON) ${line.slice(0, 120)}` };
    }
    if ((entry.level ?? 0) < 40) continue;
    // Expected at every start of the bench's nodes, by configuration.
    if (/FETCH_ALLOW_HOSTS is set|TOOL_CONFINEMENT=off/.test(entry.msg ?? '')) continue;
    const key = `${label}: [${entry.level! >= 50 ? 'error' : 'warn'}] ${entry.msg}${entry.err?.message ? ` (${entry.err.message.slice(0, 160)})` : ''}`;
    nodeComplaints.set(key, (nodeComplaints.get(key) ?? 0) + 1);
  }
}

// ---------------------------------------------------------------------------------------------
// CPU time, which the other engineers' load on this machine disturbs far less than rates do.

const TICK_MS = 10; // USER_HZ is 100 on Linux

/**
 * CPU ticks by pid: user + system, and for the nodes also their children's once reaped (the
 * tools, stand-ins included). Postgres processes are found by the cluster's name in their
 * command line (postmaster and every backend).
 */
async function cpuTicks(
  nodePids: number[],
  clusterName: string | undefined,
): Promise<{ nodes: Map<number, number>; database: Map<number, number> }> {
  const ticksOf = async (pid: number, withChildren: boolean) => {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    const fields = stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number);
    // Fields 14-17 of proc(5): utime stime cutime cstime; fields[0] is field 3.
    return (fields[11] ?? 0) + (fields[12] ?? 0) + (withChildren ? (fields[13] ?? 0) + (fields[14] ?? 0) : 0);
  };
  const nodes = new Map<number, number>();
  for (const pid of nodePids) nodes.set(pid, await ticksOf(pid, true));
  const database = new Map<number, number>();
  if (clusterName) {
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
      if (cmdline.includes(clusterName)) database.set(Number(entry), await ticksOf(Number(entry), false));
    }
  }
  return { nodes, database };
}

/** CPU ms spent between two snapshots by the nodes and by Postgres (a process that ended in between is lost: none should). */
function cpuMsBetween(
  before: Awaited<ReturnType<typeof cpuTicks>>,
  after: Awaited<ReturnType<typeof cpuTicks>>,
): { nodes: number; database: number } {
  const spent = (a: Map<number, number>, b: Map<number, number>) =>
    [...b].reduce((sum, [pid, ticks]) => sum + ticks - (a.get(pid) ?? 0), 0) * TICK_MS;
  return { nodes: spent(before.nodes, after.nodes), database: spent(before.database, after.database) };
}

// ---------------------------------------------------------------------------------------------
// Setups: the nodes, plus a read-only view of their database for the bench's observations.

interface JobTimes {
  id: string;
  status: string;
  createdAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  errorCode: string | null;
}

interface JobReader {
  job(id: string): Promise<JobTimes | undefined>;
  /** Jobs queued or running. */
  active(): Promise<number>;
  /**
   * Cancels every queued job in the database itself (the API would take one request per job):
   * the admission check counts queued jobs on every submission, so each setup's measured load
   * must start from the same, empty, queue whatever its warm-up queued.
   */
  cancelQueued(): Promise<void>;
  all(): Promise<JobTimes[]>;
  close(): Promise<void>;
}

interface SetupSpec {
  label: string;
  db: 'sqlite' | 'postgres';
  nodes: number;
}

const SETUPS: SetupSpec[] = [
  { label: 'SQLite, 1 node', db: 'sqlite', nodes: 1 },
  { label: 'Postgres, 1 node', db: 'postgres', nodes: 1 },
  { label: 'Postgres, 3 nodes', db: 'postgres', nodes: 3 },
];
const BASELINE = SETUPS[0]!.label;
const PG_ONE = SETUPS[1]!.label;

interface Setup {
  nodes: Node[];
  reader: JobReader;
  cpu(): ReturnType<typeof cpuTicks>;
  stop(): Promise<void>;
}

const JOB_COLUMNS = 'id, status, created_at, started_at, finished_at, error_code';
const toTimes = (row: Record<string, unknown>): JobTimes => ({
  id: row.id as string,
  status: row.status as string,
  createdAt: Number(row.created_at),
  startedAt: row.started_at === null ? null : Number(row.started_at),
  finishedAt: row.finished_at === null ? null : Number(row.finished_at),
  errorCode: (row.error_code as string | null) ?? null,
});

async function startSetup(spec: SetupSpec, cluster: PostgresCluster, env: Record<string, string>): Promise<Setup> {
  if (spec.db === 'sqlite') {
    const node = await startNode(env, spec.label);
    const file = new BetterSqlite3(path.join(node.dataDir, 'source-fetch.sqlite'), {
      readonly: true,
      fileMustExist: true,
    });
    const byId = file.prepare(`select ${JOB_COLUMNS} from jobs where id = ?`);
    const reader: JobReader = {
      job: (id) => {
        const row = byId.get(id) as Record<string, unknown> | undefined;
        return Promise.resolve(row ? toTimes(row) : undefined);
      },
      active: () =>
        Promise.resolve(
          (file.prepare(`select count(*) as n from jobs where status in ('queued', 'running')`).get() as { n: number })
            .n,
        ),
      all: () =>
        Promise.resolve(
          (file.prepare(`select ${JOB_COLUMNS} from jobs`).all() as Array<Record<string, unknown>>).map(toTimes),
        ),
      cancelQueued: () => {
        const writer = new BetterSqlite3(path.join(node.dataDir, 'source-fetch.sqlite'), { fileMustExist: true });
        try {
          writer.pragma('busy_timeout = 5000');
          writer
            .prepare(`update jobs set status = 'canceled', finished_at = ? where status = 'queued'`)
            .run(Date.now());
        } finally {
          writer.close();
        }
        return Promise.resolve();
      },
      close: () => {
        file.close();
        return Promise.resolve();
      },
    };
    const stop = onCleanup(async () => {
      await reader.close();
      await node.stop();
    });
    return { nodes: [node], reader, cpu: () => cpuTicks([node.pid], undefined), stop };
  }

  const url = await cluster.createDatabase();
  const databaseName = new URL(url).pathname.slice(1);
  const artifactRoot = await mkdtemp(path.join(os.tmpdir(), 'sf-bench-shared-'));
  const nodes: Node[] = [];
  let sql: postgres.Sql | undefined;
  const stop = onCleanup(async () => {
    await sql?.end({ timeout: 5 });
    await Promise.all(nodes.map((node) => node.stop()));
    await rm(artifactRoot, { recursive: true, force: true });
    await psql(cluster.adminUrl, `DROP DATABASE IF EXISTS ${databaseName}`).catch((err: unknown) =>
      console.error('dropping the database failed:', err),
    );
  });
  try {
    // Started together, as in a deployment: they take turns to migrate.
    const started = await Promise.allSettled(
      Array.from({ length: spec.nodes }, () =>
        startNode({ ...env, DATABASE_URL: url, ARTIFACT_ROOT: artifactRoot }, spec.label),
      ),
    );
    for (const result of started) if (result.status === 'fulfilled') nodes.push(result.value);
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    sql = postgres(url, { max: 2, onnotice: () => {} });
    const db = sql;
    const reader: JobReader = {
      job: async (id) => {
        const [row] = await db.unsafe(`select ${JOB_COLUMNS} from jobs where id = $1`, [id]);
        return row ? toTimes(row) : undefined;
      },
      active: async () =>
        Number((await db`select count(*) as n from jobs where status in ('queued', 'running')`)[0]!.n),
      all: async () => (await db.unsafe(`select ${JOB_COLUMNS} from jobs`)).map((row) => toTimes(row)),
      cancelQueued: async () =>
        void (await db`update jobs set status = 'canceled', finished_at = ${Date.now()} where status = 'queued'`),
      close: async () => {},
    };
    return {
      nodes,
      reader,
      cpu: () =>
        cpuTicks(
          nodes.map((node) => node.pid),
          cluster.name,
        ),
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// Talking to the nodes.

async function submit(node: Node, url: string): Promise<{ jobId: string; acceptedAt: number }> {
  const res = await fetch(`${node.baseUrl}/sources`, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url }),
  });
  const acceptedAt = Date.now();
  const body = (await res.json()) as { job_id?: string };
  if (res.status !== 202 || !body.job_id)
    throw new Error(`POST /sources answered ${res.status}: ${JSON.stringify(body)}`);
  return { jobId: body.job_id, acceptedAt };
}

async function waitFor<T>(
  what: string,
  timeoutMs: number,
  intervalMs: number,
  probe: () => Promise<T | undefined>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await probe();
    if (value !== undefined) return value;
    await sleep(intervalMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

const FINAL = new Set(['done', 'failed', 'canceled']);

// ---------------------------------------------------------------------------------------------
// The measurements.

interface LatencyResult {
  acceptedToClaimedMedian: number;
  acceptedToClaimedP95: number;
  createdToClaimedMedian: number;
  createdToClaimedP95: number;
}

async function measureLatency(setup: Setup, media: MediaServer, runIndex: number): Promise<LatencyResult> {
  const afterAccepted: number[] = [];
  const afterCreated: number[] = [];
  for (let i = -LATENCY_WARMUP; i < LATENCY_SAMPLES; i++) {
    // A random pause: submissions must not fall in step with the workers' 1 s poll.
    await sleep(20 + Math.random() * 60);
    const node = setup.nodes[(i + LATENCY_WARMUP) % setup.nodes.length]!;
    const { jobId, acceptedAt } = await submit(node, media.url(`/latency/${runIndex}-${i}.m4a`));
    const job = await waitFor(`job ${jobId}`, 30_000, 5, async () => {
      const row = await setup.reader.job(jobId);
      return row && FINAL.has(row.status) ? row : undefined;
    });
    if (job.status !== 'done' || job.startedAt === null)
      throw new Error(`latency job ended ${job.status} (${job.errorCode})`);
    if (i < 0) continue;
    afterAccepted.push(job.startedAt - acceptedAt);
    afterCreated.push(job.startedAt - job.createdAt);
  }
  return {
    acceptedToClaimedMedian: median(afterAccepted),
    acceptedToClaimedP95: percentile(afterAccepted, 95),
    createdToClaimedMedian: median(afterCreated),
    createdToClaimedP95: percentile(afterCreated, 95),
  };
}

interface ThroughputResult {
  jobsPerSecond: number;
  submitSeconds: number;
  totalSeconds: number;
  /** CPU ms per job: nodes (with their tools) and Postgres. */
  cpuNodesMs: number;
  cpuDatabaseMs: number;
}

/** Runs the warm-up jobs to their end, then measures the others. */
async function measureThroughput(setup: Setup, warmupUrls: string[], urls: string[]): Promise<ThroughputResult> {
  if (warmupUrls.length > 0) await runJobs(setup, warmupUrls);
  const cpuBefore = await setup.cpu();
  const { startedAt, submittedAt, jobs } = await runJobs(setup, urls);
  const cpu = cpuMsBetween(cpuBefore, await setup.cpu());
  const lastFinished = Math.max(...jobs.map((job) => job.finishedAt!));
  const totalSeconds = (lastFinished - startedAt) / 1000;
  return {
    jobsPerSecond: urls.length / totalSeconds,
    submitSeconds: (submittedAt - startedAt) / 1000,
    totalSeconds,
    cpuNodesMs: cpu.nodes / urls.length,
    cpuDatabaseMs: cpu.database / urls.length,
  };
}

/** Submits the URLs (SUBMIT_IN_FLIGHT at a time, spread over the nodes) and waits for every job to end; throws unless all are done. */
async function runJobs(
  setup: Setup,
  urls: string[],
): Promise<{ startedAt: number; submittedAt: number; jobs: JobTimes[] }> {
  const startedAt = Date.now();
  let next = 0;
  const submitter = async () => {
    while (next < urls.length) {
      const i = next++;
      await submit(setup.nodes[i % setup.nodes.length]!, urls[i]!);
    }
  };
  await Promise.all(Array.from({ length: SUBMIT_IN_FLIGHT }, submitter));
  const submittedAt = Date.now();
  await waitFor('every job to end', 600_000, 50, async () => ((await setup.reader.active()) === 0 ? true : undefined));
  // The nodes' clock is this machine's: the jobs of these URLs are the ones created since.
  const jobs = (await setup.reader.all()).filter((job) => job.createdAt >= startedAt);
  const notDone = jobs.filter((job) => job.status !== 'done');
  if (jobs.length !== urls.length || notDone.length > 0) {
    const codes = [...new Set(notDone.map((job) => `${job.status}:${job.errorCode}`))].join(', ');
    throw new Error(`${jobs.length} jobs for ${urls.length} URLs, ${notDone.length} not done (${codes})`);
  }
  return { startedAt, submittedAt, jobs };
}

interface SubmitResult {
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  queued: number;
  /** wrk's "Socket errors" line, if any (time-outs, say). */
  socketErrors: string | undefined;
  /** Submissions each node answered during the measured load (the spread of the load). */
  answeredBy: number[];
  /** CPU ms per submission: nodes and Postgres. */
  cpuNodesMs: number;
  cpuDatabaseMs: number;
}

/** wrk, one thread per node (round robin), distinct URLs; throws unless every answer was a 202. */
async function measureSubmissions(
  setup: Setup,
  media: MediaServer,
  scriptDir: string,
  runIndex: number,
): Promise<SubmitResult> {
  const wrkRun = async (tag: string, seconds: number) => {
    const script = path.join(scriptDir, `submit-${runIndex}-${tag}.lua`);
    await writeFile(
      script,
      submitLua(
        setup.nodes.map((node) => node.port),
        media.url(`/submitted/${runIndex}-${tag}`),
      ),
    );
    const child = execFileTracked('wrk', [
      `-t${WRK_THREADS}`,
      `-c${WRK_CONNECTIONS}`,
      `-d${seconds}s`,
      '--latency',
      '-s',
      script,
      setup.nodes[0]!.baseUrl,
    ]);
    const stdout = await child;
    const requests = Number(/(\d+) requests in/.exec(stdout)?.[1] ?? NaN);
    const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(stdout)?.[1] ?? 0);
    // Every answer must be a 202; time-outs (no answer within wrk's 2 s) are reported, not fatal.
    if (non2xx > 0) throw new Error(`wrk saw ${non2xx} answers other than 202:\n${stdout}`);
    const socketErrors = /Socket errors:.*/.exec(stdout)?.[0];
    // wrk stops reading at its deadline; requests it left in flight are still being handled:
    // wait until the queue stops growing.
    let queued = await setup.reader.active();
    for (;;) {
      await sleep(300);
      const now = await setup.reader.active();
      if (now === queued) break;
      queued = now;
    }
    return { stdout, requests, queued, socketErrors };
  };
  await wrkRun('warmup', SUBMIT_WARMUP_S);
  const answeredBefore = await Promise.all(setup.nodes.map((node) => node.submissionsAnswered()));
  await setup.reader.cancelQueued();
  const queuedBefore = await setup.reader.active();
  const cpuBefore = await setup.cpu();
  const { stdout, requests, queued, socketErrors } = await wrkRun('measured', SUBMIT_SECONDS);
  const cpu = cpuMsBetween(cpuBefore, await setup.cpu());
  const answeredBy = (await Promise.all(setup.nodes.map((node) => node.submissionsAnswered()))).map(
    (n, i) => n - answeredBefore[i]!,
  );
  // wrk counts only the answers it read in time; the database holds every job it was answered for, and maybe a few in flight.
  if (queued - queuedBefore < requests)
    throw new Error(`wrk counted ${requests} answers, but only ${queued - queuedBefore} jobs were queued`);
  const ms = (value: string, unit: string) =>
    Number(value) * ({ us: 1e-3, ms: 1, s: 1000 } as Record<string, number>)[unit]!;
  const p = (pct: number) => {
    const match = new RegExp(`^\\s+${pct}%\\s+([\\d.]+)(us|ms|s)\\s*$`, 'm').exec(stdout);
    return match ? ms(match[1]!, match[2]!) : NaN;
  };
  const submitted = queued - queuedBefore;
  return {
    requestsPerSecond: Number(/Requests\/sec:\s+([\d.]+)/.exec(stdout)?.[1] ?? NaN),
    p50Ms: p(50),
    p99Ms: p(99),
    queued,
    socketErrors,
    answeredBy,
    cpuNodesMs: cpu.nodes / submitted,
    cpuDatabaseMs: cpu.database / submitted,
  };
}

/**
 * Each wrk thread on its own node (threads are handed the nodes in turn), each request a new URL:
 * <prefix>/<thread>-<n>. The API key rides in a header of every request.
 */
function submitLua(ports: number[], urlPrefix: string): string {
  return `
local ports = { ${ports.join(', ')} }
local created = 0
function setup(thread)
  local port = ports[(created % #ports) + 1]
  thread.addr = wrk.lookup("127.0.0.1", tostring(port))[1]
  thread:set("tid", created)
  created = created + 1
end
local counter = 0
request = function()
  counter = counter + 1
  local body = '{"url":"${urlPrefix}/' .. tid .. '-' .. counter .. '.m4a"}'
  return wrk.format("POST", "/sources", {
    ["Authorization"] = "Bearer ${API_KEY}",
    ["Content-Type"] = "application/json",
  }, body)
end
`;
}

/** execFile whose child is stopped by the cleanup if the bench stops first. */
function execFileTracked(file: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(file, args, { maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      void forget();
      if (err) reject(new Error(`${file} failed: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
    const forget = onCleanup(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return Promise.resolve();
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Stand-in tools: answer at once with a valid result, fetch nothing.

async function writeStandInTools(dir: string): Promise<Record<'YTDLP_PATH' | 'FFMPEG_PATH', string>> {
  // A mono 16-bit 44.1 kHz WAV of 8 KiB of silence; the download overwrites part of it with the
  // job's info JSON (which holds its URL), so every job stores distinct content.
  const header = Buffer.alloc(44);
  header.write('RIFF', 0, 'latin1');
  header.writeUInt32LE(36 + STANDIN_WAV_DATA_BYTES, 4);
  header.write('WAVEfmt ', 8, 'latin1');
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);
  header.writeUInt16LE(1, 22);
  header.writeUInt32LE(44100, 24);
  header.writeUInt32LE(44100 * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36, 'latin1');
  header.writeUInt32LE(STANDIN_WAV_DATA_BYTES, 40);
  await mkdir(dir, { recursive: true });
  const template = path.join(dir, 'template.wav');
  await writeFile(template, Buffer.concat([header, Buffer.alloc(STANDIN_WAV_DATA_BYTES)]));
  const blocks = Math.floor(STANDIN_WAV_DATA_BYTES / 44);

  const script = async (name: string, body: string) => {
    const file = path.join(dir, name);
    await writeFile(file, `#!/bin/sh\n${body}\n`);
    await chmod(file, 0o755);
    return file;
  };
  const ytdlp = await script(
    'yt-dlp',
    `[ "$1" = "--version" ] && { echo 2023.03.04; exit 0; }
probe=; out=; info=; url=
while [ $# -gt 0 ]; do
  case "$1" in
    --dump-single-json) probe=1 ;;
    -o) out=$2; shift ;;
    --load-info-json) info=$2; shift ;;
    --) url=$2; shift ;;
  esac
  shift
done
if [ -n "$probe" ]; then
  name=\${url##*/}
  printf '{"id":"%s","title":"%s","extractor":"generic","extractor_key":"Generic","webpage_url":"%s","url":"%s","ext":"wav","protocol":"http","direct":true}\\n' "$name" "$name" "$url" "$url"
  exit 0
fi
file="\${out%".%(ext)s"}.wav"
cat '${template}' > "$file"
dd if="$info" of="$file" bs=44 seek=1 count=${blocks} conv=notrunc 2>/dev/null
echo "PROGRESS ${44 + STANDIN_WAV_DATA_BYTES} ${44 + STANDIN_WAV_DATA_BYTES} NA"
echo "$file"`,
  );
  const ffmpeg = await script(
    'ffmpeg',
    `[ "$1" = "-version" ] && { echo "ffmpeg version 5.1.stand-in"; exit 0; }
in=; out=
for arg; do
  case "$arg" in file:*) if [ -z "$in" ]; then in=\${arg#file:}; else out=\${arg#file:}; fi ;; esac
done
cp "$in" "$out"`,
  );
  return { YTDLP_PATH: ytdlp, FFMPEG_PATH: ffmpeg };
}

// ---------------------------------------------------------------------------------------------
// The run.

type Metric =
  | 'latency202Median'
  | 'latency202P95'
  | 'latencyCreatedMedian'
  | 'latencyCreatedP95'
  | 'standinJobsPerSecond'
  | 'realJobsPerSecond'
  | 'submissionsPerSecond'
  | 'submitP50'
  | 'submitP99'
  | 'standinCpu'
  | 'standinCpuDatabase'
  | 'realCpu'
  | 'realCpuDatabase'
  | 'submitCpu'
  | 'submitCpuDatabase';

const results = new Map<string, Map<Metric, number[]>>();
function record(setup: string, metric: Metric, value: number): void {
  if (!results.has(setup)) results.set(setup, new Map());
  const bySetup = results.get(setup)!;
  if (!bySetup.has(metric)) bySetup.set(metric, []);
  bySetup.get(metric)!.push(value);
}

async function main(): Promise<void> {
  const startedAt = Date.now();
  console.log(
    `scale-out benchmark: ${RUNS} run(s), ${os.cpus().length} CPUs, ${load()} at start (${os.cpus().length} = fully busy)\n` +
      `PostgreSQL: throwaway cluster on 127.0.0.1 with its default durability (fsync, synchronous_commit on), as SQLite syncs its commits\n` +
      `every node: RATE_LIMIT_PER_MINUTE=0 (rate limit off), MAX_QUEUED_JOBS=10000000, LOG_LEVEL=info to a file; ` +
      `WORKER_CONCURRENCY=${WORKERS_PER_NODE} per node for latency and jobs/s (3 nodes: ${3 * WORKERS_PER_NODE} workers), 0 for submissions\n`,
  );
  const scratch = await mkdtemp(path.join(os.tmpdir(), 'sf-bench-scale-'));
  onCleanup(() => rm(scratch, { recursive: true, force: true }));
  const cluster = await startPostgresCluster({ durable: true });
  onCleanup(() => cluster.stop());
  const media = await startMediaServer();
  onCleanup(() => media.close());
  const standIns = await writeStandInTools(path.join(scratch, 'tools'));
  const tones = await Promise.all(
    Array.from({ length: REAL_JOBS }, (_, i) =>
      makeTone(path.join(scratch, 'media'), { seconds: 1 + i / 100, channels: 1, sampleRate: 48000, format: 'm4a' }),
    ),
  );
  tones.forEach((tone, i) => media.serveFile(`/real/${i}.m4a`, tone.path, { contentType: tone.contentType }));

  const standInEnv = {
    ...standIns,
    TOOL_CONFINEMENT: 'off',
    FETCH_ALLOW_HOSTS: media.hostPort,
    WORKER_CONCURRENCY: String(WORKERS_PER_NODE),
  };
  const realEnv = { FETCH_ALLOW_HOSTS: media.hostPort, WORKER_CONCURRENCY: String(WORKERS_PER_NODE) };
  const apiOnlyEnv = { FETCH_ALLOW_HOSTS: media.hostPort, WORKER_CONCURRENCY: '0' };

  /** One measurement on a setup started for it alone, stopped after. */
  const measure = async (spec: SetupSpec, env: Record<string, string>, fn: (setup: Setup) => Promise<void>) => {
    const setup = await startSetup(spec, cluster, env);
    try {
      await fn(setup);
    } finally {
      await setup.stop();
    }
  };

  for (let r = 0; r < RUNS; r++) {
    for (const spec of SETUPS) {
      const tag = `run ${r + 1}/${RUNS}, ${spec.label}`;

      if (ONLY.has('latency')) {
        await measure(spec, standInEnv, async (setup) => {
          process.stdout.write(`${tag}: claim latency (${load()}) ... `);
          const latency = await measureLatency(setup, media, r);
          record(spec.label, 'latency202Median', latency.acceptedToClaimedMedian);
          record(spec.label, 'latency202P95', latency.acceptedToClaimedP95);
          record(spec.label, 'latencyCreatedMedian', latency.createdToClaimedMedian);
          record(spec.label, 'latencyCreatedP95', latency.createdToClaimedP95);
          console.log(
            `202→claimed median ${latency.acceptedToClaimedMedian} ms, p95 ${latency.acceptedToClaimedP95} ms; ` +
              `created→claimed median ${latency.createdToClaimedMedian} ms, p95 ${latency.createdToClaimedP95} ms`,
          );
        });
      }

      if (ONLY.has('standin')) {
        await measure(spec, standInEnv, async (setup) => {
          process.stdout.write(`${tag}: ${STANDIN_JOBS} stand-in jobs (${load()}) ... `);
          const warmup = Array.from({ length: STANDIN_WARMUP_JOBS }, (_, i) =>
            media.url(`/standin-warmup/${r}-${i}.m4a`),
          );
          const urls = Array.from({ length: STANDIN_JOBS }, (_, i) => media.url(`/standin/${r}-${i}.m4a`));
          const t = await measureThroughput(setup, warmup, urls);
          record(spec.label, 'standinJobsPerSecond', t.jobsPerSecond);
          record(spec.label, 'standinCpu', t.cpuNodesMs + t.cpuDatabaseMs);
          record(spec.label, 'standinCpuDatabase', t.cpuDatabaseMs);
          console.log(
            `${t.jobsPerSecond.toFixed(1)} jobs/s (submitted in ${t.submitSeconds.toFixed(2)} s, all done in ${t.totalSeconds.toFixed(2)} s); ${cpuText(t)} per job`,
          );
        });
      }

      if (ONLY.has('real')) {
        await measure(spec, realEnv, async (setup) => {
          process.stdout.write(`${tag}: ${REAL_JOBS} real jobs (${load()}) ... `);
          const urls = tones.map((_, i) => media.url(`/real/${i}.m4a`));
          const t = await measureThroughput(setup, [], urls);
          record(spec.label, 'realJobsPerSecond', t.jobsPerSecond);
          record(spec.label, 'realCpu', t.cpuNodesMs + t.cpuDatabaseMs);
          record(spec.label, 'realCpuDatabase', t.cpuDatabaseMs);
          console.log(
            `${t.jobsPerSecond.toFixed(2)} jobs/s (submitted in ${t.submitSeconds.toFixed(2)} s, all done in ${t.totalSeconds.toFixed(2)} s); ${cpuText(t)} per job`,
          );
        });
      }

      if (ONLY.has('submit')) {
        await measure(spec, apiOnlyEnv, async (setup) => {
          process.stdout.write(`${tag}: submissions, API-only (${load()}) ... `);
          const s = await measureSubmissions(setup, media, scratch, r);
          record(spec.label, 'submissionsPerSecond', s.requestsPerSecond);
          record(spec.label, 'submitP50', s.p50Ms);
          record(spec.label, 'submitP99', s.p99Ms);
          record(spec.label, 'submitCpu', s.cpuNodesMs + s.cpuDatabaseMs);
          record(spec.label, 'submitCpuDatabase', s.cpuDatabaseMs);
          console.log(
            `${s.requestsPerSecond.toFixed(0)} req/s, p50 ${s.p50Ms.toFixed(2)} ms, p99 ${s.p99Ms.toFixed(2)} ms (${s.queued} jobs queued at the end; answered by node: ${s.answeredBy.join('/')}); ` +
              `${cpuText(s)} per submission${s.socketErrors ? `; wrk: ${s.socketErrors}` : ''}`,
          );
        });
      }
    }
  }

  printTable();
  const minutes = ((Date.now() - startedAt) / 60_000).toFixed(1);
  console.log(
    `\nmachine load (1-min loadavg, ${os.cpus().length} CPUs) seen before the measurements: min ${Math.min(...loads).toFixed(2)}, ` +
      `median ${median(loads).toFixed(2)}, max ${Math.max(...loads).toFixed(2)}; at the end ${load()}; took ${minutes} min`,
  );
}

function cpuText(cpu: { cpuNodesMs: number; cpuDatabaseMs: number }): string {
  return `CPU ${(cpu.cpuNodesMs + cpu.cpuDatabaseMs).toFixed(2)} ms (nodes ${cpu.cpuNodesMs.toFixed(2)}, Postgres ${cpu.cpuDatabaseMs.toFixed(2)})`;
}

function printTable(): void {
  const rows: Array<[string, Metric, number]> = [
    ['claim latency, 202 → claimed, median (ms)', 'latency202Median', 0],
    ['claim latency, 202 → claimed, p95 (ms)', 'latency202P95', 0],
    ['claim latency, created → claimed, median (ms)', 'latencyCreatedMedian', 0],
    ['claim latency, created → claimed, p95 (ms)', 'latencyCreatedP95', 0],
    [`jobs/s, queue alone (stand-in tools, ${STANDIN_JOBS} jobs)`, 'standinJobsPerSecond', 1],
    ['CPU ms per job, queue alone (nodes + Postgres)', 'standinCpu', 1],
    ['… of which Postgres', 'standinCpuDatabase', 1],
    [`jobs/s, real tools (1 s AAC, ${REAL_JOBS} jobs)`, 'realJobsPerSecond', 2],
    ['CPU ms per job, real tools (nodes with tools + Postgres)', 'realCpu', 0],
    ['… of which Postgres', 'realCpuDatabase', 1],
    ['submissions/s, API-only nodes (wrk)', 'submissionsPerSecond', 0],
    ['submission latency p50 (ms)', 'submitP50', 2],
    ['submission latency p99 (ms)', 'submitP99', 2],
    ['CPU ms per submission (nodes + Postgres)', 'submitCpu', 2],
    ['… of which Postgres', 'submitCpuDatabase', 2],
  ];
  console.log(
    `\nMedians of ${RUNS} run(s); × = ratio to the same row's SQLite 1 node / Postgres 1 node figure of this run of the script.\n`,
  );
  console.log(
    `| measurement | ${SETUPS.map((s) => s.label).join(' | ')} | PG 1 × SQLite | PG 3 × SQLite | PG 3 × PG 1 |`,
  );
  console.log(`|---|${SETUPS.map(() => '---|').join('')}---|---|---|`);
  for (const [label, metric, digits] of rows) {
    if (!SETUPS.some((s) => results.get(s.label)?.has(metric))) continue;
    const value = (setup: string) => median(results.get(setup)?.get(metric) ?? [NaN]);
    const cells = SETUPS.map((s) => {
      const values = results.get(s.label)?.get(metric) ?? [];
      return `${value(s.label).toFixed(digits)} (${values.map((v) => v.toFixed(digits)).join(', ')})`;
    });
    const ratio = (a: string, b: string) => {
      // A ratio of a negative or zero figure says nothing.
      const x = value(a) / value(b);
      return value(a) > 0 && value(b) > 0 && Number.isFinite(x) ? x.toFixed(2) : '–';
    };
    const pg3 = SETUPS[2]!.label;
    console.log(
      `| ${label} | ${cells.join(' | ')} | ${ratio(PG_ONE, BASELINE)} | ${ratio(pg3, BASELINE)} | ${ratio(pg3, PG_ONE)} |`,
    );
  }
  console.log(
    [
      '',
      'Each cell: median over runs (each run in brackets). Every measurement on fresh nodes, a fresh database and store.',
      `- claim latency: ${LATENCY_SAMPLES} jobs one at a time (after ${LATENCY_WARMUP} unmeasured), to the nodes in turn, stand-in tools.`,
      '  202 → claimed: the claim time the worker wrote in the job record (started_at) minus the time the 202 reached this',
      '  client (same clock; no polling in the figure). Negative: claimed before the 202 arrived. created → claimed:',
      '  started_at − created_at, both from the record (created_at is taken as the submission starts its database work).',
      `- jobs/s: N jobs submitted at once (${SUBMIT_IN_FLIGHT} requests in flight over the nodes), first submission to last finished_at.`,
      `  queue alone: stand-in yt-dlp/ffmpeg (shell scripts that answer at once; TOOL_CONFINEMENT=off), after ${STANDIN_WARMUP_JOBS} unmeasured jobs.`,
      '  real tools: yt-dlp, ffmpeg confined (netns), a distinct 1 s mono AAC (48 kHz) per job from a loopback media server.',
      '  CPU ms per job: user+system time of the nodes (their tools included) and of every Postgres process, over the measured jobs.',
      `- submissions/s: wrk -t${WRK_THREADS} -c${WRK_CONNECTIONS}, one thread per node (3 nodes) or all on the one node, POST /sources of a`,
      `  distinct loopback URL each, API-only nodes (WORKER_CONCURRENCY=0), every answer a 202. ${SUBMIT_WARMUP_S} s unmeasured, then the`,
      `  queued jobs are canceled in the database (the admission check counts queued jobs on every submission), then ${SUBMIT_SECONDS} s measured.`,
    ].join('\n'),
  );
  if (nodeComplaints.size > 0) {
    console.log('\nwarnings and errors the nodes logged (count):');
    for (const [line, count] of [...nodeComplaints].sort((a, b) => b[1] - a[1]))
      console.log(`  ${String(count).padStart(6)}  ${line}`);
  } else {
    console.log('\nthe nodes logged no warnings or errors');
  }
}

try {
  await main();
} finally {
  await cleanUpAll();
}
