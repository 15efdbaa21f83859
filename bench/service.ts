/**
 * The whole service for the benchmarks (bench/api.ts, bench/delivery): dist/main.js with
 * everything a request meets (request id, access log, metrics, rate limit unless turned off), its
 * log written to a file as a deployment would ship it. Its WAV gets there the way users' do: the
 * service fetches one source from a local media server, and the job is done when this returns.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const ROOT = path.resolve(import.meta.dirname, '..');

export interface BenchService {
  port: number;
  /** The service process's id (for its CPU time, /proc/<pid>/stat). */
  pid: number;
  apiKey: string;
  artifactRoot: string;
  /** The done job's id, and its record as GET /jobs/{id} answered it. */
  jobId: string;
  record: string;
  /** The stored WAV's signed URL path (with its query). */
  signedPath: string;
  stop(): Promise<void>;
}

export async function startBenchService(opts: {
  sourceUrl: string;
  allowHost: string;
  accelRedirectPrefix?: string | null;
  /** More of the service's environment (e.g. NGINX_USAGE_LOG, DATABASE_URL). */
  env?: Record<string, string>;
  /** Options for node itself, e.g. ['--cpu-prof'] to profile the service. */
  nodeArgs?: string[];
}): Promise<BenchService> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'sf-bench-service-'));
  const apiKey = randomBytes(24).toString('base64url');
  const logFile = path.join(dataDir, 'service.log');
  const log = createWriteStream(logFile);
  await once(log, 'open');
  const child = spawn(process.execPath, [...(opts.nodeArgs ?? []), path.join(ROOT, 'dist/main.js')], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOST: '127.0.0.1',
      PORT: '0',
      DATA_DIR: dataDir,
      API_KEYS: apiKey,
      FETCH_ALLOW_HOSTS: opts.allowHost,
      ...(opts.accelRedirectPrefix ? { ACCEL_REDIRECT_PREFIX: opts.accelRedirectPrefix } : {}),
      ...opts.env,
    },
    stdio: ['ignore', log, log],
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await once(child, 'exit');
    }
    log.close();
    await rm(dataDir, { recursive: true, force: true });
  };
  try {
    const port = await listeningPort(logFile, child);
    const base = `http://127.0.0.1:${port}`;
    const auth = { authorization: `Bearer ${apiKey}` };
    const submitted = await fetch(`${base}/sources`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ url: opts.sourceUrl }),
    });
    const { job_id: jobId } = (await submitted.json()) as { job_id: string };
    for (let i = 0; i < 600; i++) {
      const record = await (await fetch(`${base}/jobs/${jobId}`, { headers: auth })).text();
      const job = JSON.parse(record) as {
        status: string;
        error: unknown;
        result: { artifacts: Array<{ signed_url: string }> } | null;
      };
      if (job.status === 'done') {
        return {
          port,
          pid: child.pid!,
          apiKey,
          artifactRoot: path.join(dataDir, 'artifacts'),
          jobId,
          record,
          signedPath: job.result!.artifacts[0]!.signed_url,
          stop,
        };
      }
      if (job.status === 'failed' || job.status === 'canceled')
        throw new Error(`bench fetch ${job.status}: ${JSON.stringify(job.error)}`);
      await sleep(100);
    }
    throw new Error('bench fetch did not finish in 60 s');
  } catch (err) {
    await stop();
    throw err;
  }
}

async function listeningPort(logFile: string, child: ReturnType<typeof spawn>): Promise<number> {
  for (let i = 0; i < 300; i++) {
    if (child.exitCode !== null) throw new Error(`service exited at start:\n${await readFile(logFile, 'utf8')}`);
    for (const line of (await readFile(logFile, 'utf8')).split('\n')) {
      if (!line.includes('"listening"')) continue;
      return (JSON.parse(line) as { port: number }).port;
    }
    await sleep(50);
  }
  throw new Error('service did not start in 15 s (run `npm run build` first)');
}
