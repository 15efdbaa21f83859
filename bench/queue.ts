/**
 * The job queue alone on PostgreSQL, run by hand (not part of the test suite):
 *
 *   npx tsx bench/queue.ts [--seconds=20] [--window=30] [--only=throughput,running]
 *
 * One throwaway cluster (test/support/postgres.ts, PostgreSQL's default durability, as a
 * deployment runs it), the service's own queue code (src/jobs/queue.ts, src/jobs/worker-pool.ts)
 * in child processes of this script, stand-in jobs (no tools, no store):
 *
 *   1. throughput: a queue pre-filled with 100,000 jobs over 1,000 API keys; 1, then 4 processes,
 *      each with 4 claimers in a loop of claimNextJob, then markDone in a transaction of its own
 *      (as a job's end commits), for --seconds; jobs/s claimed and completed, claim latency
 *      p50/p99. The queue is filled again before each run.
 *   2. running: 400 simulated running jobs: 100 nodes × WORKER_CONCURRENCY 4, each node a worker
 *      pool of its own (leases, their renewal, the sweep), 25 nodes to a process over 4 processes.
 *      Each job reports download progress every 500 ms (as the fetch task does) for 40 to 80 s,
 *      then ends done; the queue holds 20,000 jobs over 1,000 keys. Over a window of --window
 *      seconds with 400 running: the database's writes (pg_stat_database: rows inserted, updated
 *      and deleted; commits, reads included), per second and per running job; the CPU of every
 *      PostgreSQL process (/proc). Then, still with 400 running, claim latency p50/p99 of one
 *      more claimer (claim and complete, 10 a second) for 15 s.
 *
 * The machine's load average is printed with each figure (a shared machine).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readdir, readFile } from 'node:fs/promises';
import os from 'node:os';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import postgres from 'postgres';
import { openPostgres } from '../src/db/postgres.js';
import { claimNextJob, markDone, type Lease } from '../src/jobs/queue.js';
import { createWorkerPool, type WorkerPool } from '../src/jobs/worker-pool.js';
import { startPostgresCluster, type PostgresCluster } from '../test/support/postgres.js';

const args = new Map(
  process.argv
    .slice(2)
    .filter((arg) => arg.startsWith('--'))
    .map((arg) => {
      const [key, value] = arg.slice(2).split('=');
      return [key!, value ?? ''];
    }),
);
const SECONDS = Number(args.get('seconds') ?? 20);
const WINDOW_S = Number(args.get('window') ?? 30);
const ONLY = new Set((args.get('only') ?? 'throughput,running').split(','));
const LEASE_MS = 30_000;
const CLAIMERS_PER_PROCESS = 4;
const NODES = 100;
const NODE_PROCESSES = 4;
const CONCURRENCY = 4;

// ---------------------------------------------------------------------------------------------
// Child processes: claimers (1) and simulated nodes (2). Each says "ready" on stdout, waits for a
// line on stdin ("go"), and prints its result as one JSON line.

async function claimer(url: string, owner: string, seconds: number): Promise<void> {
  const database = await openPostgres(url, { poolSize: CLAIMERS_PER_PROCESS, applicationName: owner });
  const lease = (): Lease => ({ owner, now: Date.now(), leaseMs: LEASE_MS });
  console.log('ready');
  await once(createInterface({ input: process.stdin }), 'line');
  const latencies: number[] = [];
  let done = 0;
  const until = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: CLAIMERS_PER_PROCESS }, async () => {
      while (performance.now() < until) {
        const started = performance.now();
        const job = await claimNextJob(database, lease());
        latencies.push(performance.now() - started);
        if (!job) break;
        await database.transaction((q) => markDone(q, job.id, owner, 'bench-content', Date.now()));
        done++;
      }
    }),
  );
  console.log(JSON.stringify({ done, latencies }));
  await database.close();
}

async function nodes(url: string, first: number, count: number): Promise<void> {
  const database = await openPostgres(url, { poolSize: 10, applicationName: `nodes-${first}` });
  const log = pino({ level: 'warn' });
  const pools: WorkerPool[] = [];
  for (let n = first; n < first + count; n++) {
    const nodeId = `bench-node-${n}`;
    const pool = createWorkerPool({
      database,
      nodeId,
      concurrency: CONCURRENCY,
      leaseMs: LEASE_MS,
      maxAttempts: 3,
      now: Date.now,
      log,
      runJob: async (job, ctx) => {
        // A download reporting progress every 500 ms, as the fetch task's downloader does.
        const lasts = 40_000 + Math.random() * 40_000;
        const total = 50_000_000;
        const started = Date.now();
        while (Date.now() - started < lasts && !ctx.signal.aborted) {
          await sleep(500);
          const bytes = Math.round((total * (Date.now() - started)) / lasts);
          ctx.reportProgress?.(Math.min(bytes, total), total);
        }
        if (ctx.signal.aborted) return undefined;
        return database.transaction((q) => markDone(q, job.id, nodeId, 'bench-content', Date.now()));
      },
    });
    pools.push(pool);
  }
  console.log('ready');
  await once(createInterface({ input: process.stdin }), 'line');
  for (const pool of pools) await pool.start();
  // Until told to stop: then the jobs are left where they are (the cluster goes with them).
  await once(createInterface({ input: process.stdin }), 'line');
  console.log(JSON.stringify({ ok: true }));
  process.exit(0);
}

// ---------------------------------------------------------------------------------------------
// The parent.

interface Child {
  process: ChildProcess;
  lines: AsyncIterator<string, undefined>;
}

function startChild(role: string, ...rest: string[]): Child {
  const child = spawn(process.execPath, [...process.execArgv, import.meta.filename, role, ...rest], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  return { process: child, lines };
}

async function nextLine(child: Child): Promise<string> {
  const next = await child.lines.next();
  if (next.done === true) throw new Error('a child process ended early');
  return next.value;
}

async function fill(sql: postgres.Sql, jobs: number, keys: number): Promise<void> {
  await sql`truncate jobs, key_claims`;
  await sql`
    insert into jobs (id, url, url_key, status, created_at, api_key_id)
    select 'bench-' || g, 'https://media.example/' || g, 'https://media.example/' || g, 'queued',
           1700000000000 + g, 'key-' || (g % ${keys})
    from generate_series(1, ${jobs}) g`;
  await sql`vacuum analyze jobs`;
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
const load = () =>
  os
    .loadavg()
    .map((value) => value.toFixed(2))
    .join(' ');

/** CPU ticks (user + system) of every process of the cluster, found by its name in their command line. */
async function clusterTicks(cluster: PostgresCluster): Promise<Map<number, number>> {
  const ticks = new Map<number, number>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (!cmdline.includes(cluster.name)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const fields = stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number);
    ticks.set(Number(entry), (fields[11] ?? 0) + (fields[12] ?? 0));
  }
  return ticks;
}

const cpuSecondsBetween = (a: Map<number, number>, b: Map<number, number>) =>
  [...b].reduce((sum, [pid, t]) => sum + t - (a.get(pid) ?? 0), 0) / 100; // USER_HZ 100

async function throughput(url: string, sql: postgres.Sql, processes: number): Promise<void> {
  await fill(sql, 100_000, 1_000);
  const children = Array.from({ length: processes }, (_, i) =>
    startChild('claimer', url, `claimer-${i}`, `${SECONDS}`),
  );
  for (const child of children) await nextLine(child);
  const started = performance.now();
  for (const child of children) child.process.stdin!.write('go\n');
  const results = await Promise.all(
    children.map(async (child) => JSON.parse(await nextLine(child)) as { done: number; latencies: number[] }),
  );
  const seconds = (performance.now() - started) / 1000;
  const done = results.reduce((sum, r) => sum + r.done, 0);
  const latencies = results.flatMap((r) => r.latencies).sort((a, b) => a - b);
  console.log(
    `throughput, ${processes} process(es) × ${CLAIMERS_PER_PROCESS} claimers: ${done} jobs in ${seconds.toFixed(1)} s = ` +
      `${(done / seconds).toFixed(0)} jobs/s; claim p50 ${percentile(latencies, 0.5).toFixed(2)} ms, ` +
      `p99 ${percentile(latencies, 0.99).toFixed(2)} ms (load ${load()})`,
  );
}

async function databaseCounters(sql: postgres.Sql) {
  const [row] = await sql<Array<{ commits: string; inserted: string; updated: string; deleted: string }>>`
    select xact_commit as commits, tup_inserted as inserted, tup_updated as updated, tup_deleted as deleted
    from pg_stat_database where datname = current_database()`;
  return {
    commits: Number(row!.commits),
    rows: Number(row!.inserted) + Number(row!.updated) + Number(row!.deleted),
  };
}

const countRunning = async (sql: postgres.Sql) =>
  Number((await sql`select count(*)::int as n from jobs where status = 'running'`)[0]!.n);

async function running(url: string, sql: postgres.Sql, cluster: PostgresCluster): Promise<void> {
  await fill(sql, 20_000, 1_000);
  const perProcess = NODES / NODE_PROCESSES;
  const children = Array.from({ length: NODE_PROCESSES }, (_, i) =>
    startChild('nodes', url, `${i * perProcess}`, `${perProcess}`),
  );
  try {
    for (const child of children) await nextLine(child);
    for (const child of children) child.process.stdin!.write('go\n');
    const target = NODES * CONCURRENCY;
    while ((await countRunning(sql)) < target) await sleep(200);
    // Past the first renewals and progress reports of every job.
    await sleep(10_000);

    const before = { counters: await databaseCounters(sql), ticks: await clusterTicks(cluster), at: performance.now() };
    const endedBefore = Number((await sql`select count(*)::int as n from jobs where status = 'done'`)[0]!.n);
    const runningSeen: number[] = [];
    const until = performance.now() + WINDOW_S * 1000;
    while (performance.now() < until) {
      runningSeen.push(await countRunning(sql));
      await sleep(1000);
    }
    // The statistics a backend gathers reach pg_stat_database within a second or so of its transaction.
    const after = { counters: await databaseCounters(sql), ticks: await clusterTicks(cluster), at: performance.now() };
    const endedAfter = Number((await sql`select count(*)::int as n from jobs where status = 'done'`)[0]!.n);
    const seconds = (after.at - before.at) / 1000;
    const meanRunning = runningSeen.reduce((a, b) => a + b, 0) / runningSeen.length;
    const rows = after.counters.rows - before.counters.rows;
    const commits = after.counters.commits - before.counters.commits;
    const cpu = cpuSecondsBetween(before.ticks, after.ticks);
    console.log(
      `running: ${meanRunning.toFixed(0)} running jobs (min ${Math.min(...runningSeen)}) over ${seconds.toFixed(1)} s; ` +
        `${endedAfter - endedBefore} ended (and as many claimed) meanwhile\n` +
        `  rows written ${(rows / seconds).toFixed(0)}/s = ${(rows / seconds / meanRunning).toFixed(3)} per running job per s\n` +
        `  commits (reads included) ${(commits / seconds).toFixed(0)}/s = ${(commits / seconds / meanRunning).toFixed(3)} per running job per s\n` +
        `  PostgreSQL CPU ${(cpu / seconds).toFixed(2)} cores (load ${load()})`,
    );

    // Claim latency with them running: one more claimer, 10 claims a second.
    const database = await openPostgres(url, { poolSize: 2, applicationName: 'probe' });
    const latencies: number[] = [];
    const probeUntil = performance.now() + 15_000;
    while (performance.now() < probeUntil) {
      const started = performance.now();
      const job = await claimNextJob(database, { owner: 'probe', now: Date.now(), leaseMs: LEASE_MS });
      latencies.push(performance.now() - started);
      if (job) await database.transaction((q) => markDone(q, job.id, 'probe', 'bench-content', Date.now()));
      await sleep(100);
    }
    await database.close();
    latencies.sort((a, b) => a - b);
    console.log(
      `  claim with ${await countRunning(sql)} running: p50 ${percentile(latencies, 0.5).toFixed(2)} ms, ` +
        `p99 ${percentile(latencies, 0.99).toFixed(2)} ms over ${latencies.length} claims (load ${load()})`,
    );
  } finally {
    for (const child of children) child.process.stdin!.write('stop\n');
    await Promise.all(children.map((child) => once(child.process, 'exit')));
  }
}

async function main(): Promise<void> {
  const [role, ...rest] = process.argv.slice(2).filter((arg) => !arg.startsWith('--'));
  if (role === 'claimer') return claimer(rest[0]!, rest[1]!, Number(rest[2]));
  if (role === 'nodes') return nodes(rest[0]!, Number(rest[1]), Number(rest[2]));

  console.log(`machine: ${os.cpus().length} cores, ${os.cpus()[0]?.model}; load ${load()}`);
  const cluster = await startPostgresCluster({ durable: true });
  const onSignal = () => void cluster.stop().finally(() => process.exit(130));
  process.once('SIGINT', onSignal);
  try {
    const url = await cluster.createDatabase();
    // Migrated by the first open.
    await (await openPostgres(url, { poolSize: 1 })).close();
    const sql = postgres(url, { max: 2, onnotice: () => {} });
    if (ONLY.has('throughput')) {
      await throughput(url, sql, 1);
      await throughput(url, sql, 4);
    }
    if (ONLY.has('running')) await running(url, sql, cluster);
    await sql.end();
  } finally {
    await cluster.stop();
  }
}

await main();
