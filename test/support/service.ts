/**
 * Starts the real service (node dist/main.js, built by the e2e global setup) as a child
 * process on 127.0.0.1 with its own data dir, and offers helpers to call and observe it.
 *
 *   const svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort } });
 *   const job = await svc.submit(media.url('/a.m4a'));          // 202 body
 *   const done = await svc.waitForJob(job.job_id, ['done']);
 *   await svc.stop();                                          // SIGTERM, waits for exit
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CURRENT_YTDLP } from './ytdlp-under-test.js';

export const ROOT = path.resolve(import.meta.dirname, '../..');

/**
 * For the tests that run dozens of real downloads across restarts or nodes: a bound on a hang, not
 * on speed. The e2e default (120 s) is met on a quiet machine and missed when other work shares
 * its cores (seen at load average 24).
 */
export const HEAVY_TEST_TIMEOUT_MS = 300_000;
const START_TIMEOUT_MS = 60_000;

export interface LogLine {
  level: number;
  msg: string;
  [key: string]: unknown;
}

export interface ServiceHandle {
  baseUrl: string;
  port: number;
  apiKey: string;
  dataDir: string;
  process: ChildProcess;
  /** Every stdout line (parsed JSON logs) so far. */
  logs: LogLine[];
  /** Raw stdout and stderr text so far. */
  output(): string;
  /** Raw stderr text so far (the plain words at start-up, src/ops/welcome.ts). */
  errorOutput(): string;
  /** fetch() against the service with the API key. */
  request(urlPath: string, init?: RequestInit & { auth?: boolean }): Promise<Response>;
  submit(url: string): Promise<JobBody>;
  getJob(id: string): Promise<JobBody>;
  waitForJob(id: string, statuses: string[], timeoutMs?: number): Promise<JobBody>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  kill(): Promise<void>;
  /** SIGKILL to the service's whole process group (needs `detached: true`). */
  killGroup(): Promise<void>;
}

export interface JobBody {
  job_id: string;
  status: string;
  born_done: boolean;
  progress: { bytes_done: number; bytes_total: number | null; percent: number | null } | null;
  result: {
    content_id: string;
    artifacts: Array<{
      name: string;
      path: string;
      signed_url: string;
      bytes: number;
      content_type: string;
      sample_rate: number | null;
      channels: number | null;
      duration: number | null;
    }>;
    loudness: { integrated_lufs: number; range_lu: number; true_peak_dbtp: number } | null;
  } | null;
  error: { code: string; message: string; detail: string | null; http_status: number | null } | null;
  [key: string]: unknown;
}

/**
 * apiKey: the API_KEYS value (default: a random key). null leaves API_KEYS unset, so the service
 * uses the key it generates into <dataDir>/api-key; the handle's apiKey is then read from there.
 */
export async function startService(
  opts: {
    env?: Record<string, string>;
    dataDir?: string;
    apiKey?: string | null;
    /** Its own process group, as a supervisor would run it, so that killGroup() can take it all down. */
    detached?: boolean;
    /** The checkout whose built dist/main.js runs, in that folder (a bench's baseline); default this one. */
    root?: string;
  } = {},
): Promise<ServiceHandle> {
  // A data dir made here is removed when the service stops; one passed in belongs to the caller.
  const ownsDataDir = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? (await mkdtemp(path.join(tmpdir(), 'sf-data-')));
  const generatedKey = opts.apiKey === null;
  let apiKey = opts.apiKey ?? randomBytes(24).toString('base64url');
  const root = opts.root ?? ROOT;
  const child = spawn(process.execPath, [path.join(root, 'dist/main.js')], {
    cwd: root,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/root',
      HOST: '127.0.0.1',
      PORT: '0',
      DATA_DIR: dataDir,
      ...(generatedKey ? {} : { API_KEYS: apiKey }),
      LOG_LEVEL: 'debug',
      SHUTDOWN_GRACE_S: '5',
      // A current yt-dlp's project runs its launcher (test/support/ytdlp-under-test.ts); a test's own YTDLP_PATH still wins.
      ...(CURRENT_YTDLP ? { YTDLP_PATH: CURRENT_YTDLP } : {}),
      ...opts.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: opts.detached ?? false,
  });
  const logs: LogLine[] = [];
  let raw = '';
  let pending = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    raw += chunk;
    pending += chunk;
    let nl: number;
    while ((nl = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      try {
        logs.push(JSON.parse(line) as LogLine);
      } catch {
        // not a log line
      }
    }
  });
  let rawStderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    raw += chunk;
    rawStderr += chunk;
  });
  const exited = once(child, 'exit');

  const port = await new Promise<number>((resolve, reject) => {
    // Generous: on a loaded machine the start (migrations, the resident sandbox) takes many times its usual second.
    const deadline = setTimeout(() => reject(new Error(`service did not start:\n${raw}`)), START_TIMEOUT_MS);
    const poll = setInterval(() => {
      const listening = logs.find((line) => line.msg === 'listening');
      if (listening) {
        clearInterval(poll);
        clearTimeout(deadline);
        resolve(listening.port as number);
      }
    }, 20);
    void exited.then(() => {
      clearInterval(poll);
      clearTimeout(deadline);
      reject(new Error(`service exited at start:\n${raw}`));
    });
  });
  const baseUrl = `http://127.0.0.1:${port}`;
  if (generatedKey) apiKey = (await readFile(path.join(dataDir, 'api-key'), 'utf8')).trim();

  const handle: ServiceHandle = {
    baseUrl,
    port,
    apiKey,
    dataDir,
    process: child,
    logs,
    output: () => raw,
    errorOutput: () => rawStderr,
    request(urlPath, init = {}) {
      const headers = new Headers(init.headers);
      if (init.auth !== false && !headers.has('authorization')) headers.set('authorization', `Bearer ${apiKey}`);
      return fetch(`${baseUrl}${urlPath}`, { ...init, headers });
    },
    async submit(url) {
      const res = await handle.request('/sources', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ url }),
      });
      const body = (await res.json()) as JobBody;
      if (res.status !== 202) throw new Error(`submit answered ${res.status}: ${JSON.stringify(body)}`);
      return body;
    },
    async getJob(id) {
      const res = await handle.request(`/jobs/${id}`);
      if (res.status !== 200) throw new Error(`getJob answered ${res.status}`);
      return (await res.json()) as JobBody;
    },
    async waitForJob(id, statuses, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      let last: JobBody | undefined;
      while (Date.now() < deadline) {
        last = await handle.getJob(id);
        if (statuses.includes(last.status)) return last;
        await sleep(100);
      }
      throw new Error(`job ${id} did not reach ${statuses.join('/')}: ${JSON.stringify(last)}`);
    },
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      const [code] = (await exited) as [number | null];
      if (ownsDataDir) await rm(dataDir, { recursive: true, force: true });
      return code;
    },
    async killGroup() {
      if (!opts.detached) throw new Error('killGroup needs a service started with detached: true');
      if (child.exitCode !== null || child.signalCode !== null) return;
      process.kill(-child.pid!, 'SIGKILL');
      await exited;
    },
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGKILL');
      await exited;
    },
  };
  return handle;
}
