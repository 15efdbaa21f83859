import { execFileSync } from 'node:child_process';
import { open, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { expect } from 'vitest';
import type { Database } from '../../src/db/database.js';
import type { GuardSession } from '../../src/egress/guard.js';
import type { FetchLimits } from '../../src/jobs/fetch/step.js';
import { createFetchTask } from '../../src/jobs/fetch/task.js';
import { claimNextJob, enqueueJob, getJobRow } from '../../src/jobs/queue.js';
import { createLogger } from '../../src/logger.js';
import { createSandbox } from '../../src/sandbox/sandbox.js';
import type { ContentStore } from '../../src/store/content-store.js';
import { makeFifo } from '../../src/tools/fifo.js';
import type { runProcess, RunProcessResult } from '../../src/tools/process.js';

/**
 * The fetch task in this process on a real database and artifact root, with stand-ins for yt-dlp
 * and ffmpeg: yt-dlp prints a fixed media identity, waits at its gate (a FIFO, as the real one)
 * and, let through, writes a small file; the conversion writes the WAV it is given.
 *
 *   const tools = fakeTools({ extractorKey: 'Generic', id: 'x' }, wav(1));
 *   const job = await runJob(fx, { url: 'https://media.example/x.m4a', run: tools.run, now: 5000 });
 */
/** Small limits for a fetch, or a listing, on the fakes. */
export const TEST_FETCH_LIMITS: FetchLimits = {
  timeoutMs: 10_000,
  metadataTimeoutMs: 10_000,
  downloadStall: { windowMs: 10_000, minBytes: 1 },
  maxDownloadBytes: 1_000_000,
  maxOutputBytes: 1_000_000,
  maxDurationS: 3600,
  tool: { memoryBytes: 256 * 1024 ** 2, cpuSeconds: 60, processes: 64 },
};

/** An egress session that refused nothing and contacted no host, unless `overrides` say otherwise. */
export function fakeGuardSession(overrides: Partial<GuardSession> = {}): GuardSession {
  return {
    proxyUrlAt: (at) => `http://job:secret@${at}`,
    refusals: () => [],
    upstreamFailures: () => [],
    hostsContacted: () => [],
    overByteLimit: () => false,
    close: () => {},
    ...overrides,
  };
}

const OK: RunProcessResult = {
  exitCode: 0,
  signal: null,
  timedOut: false,
  aborted: false,
  stderrTail: '',
  notFound: false,
  spawnError: null,
  stdout: '',
  stdoutTruncated: false,
};

/**
 * 44.1 kHz mono 16-bit silence (the format the conversion asks for) with a distinct first sample:
 * a tenth of a second, or `dataBytes` of samples (an even count).
 */
export function wav(seed: number, dataBytes = 8_820): Buffer {
  const data = Buffer.alloc(dataBytes);
  data.writeInt16LE(seed, 0);
  const fmt = Buffer.alloc(16);
  fmt.writeUInt16LE(1, 0);
  fmt.writeUInt16LE(1, 2);
  fmt.writeUInt32LE(44_100, 4);
  fmt.writeUInt32LE(88_200, 8);
  fmt.writeUInt16LE(2, 12);
  fmt.writeUInt16LE(16, 14);
  const chunk = (id: string, body: Buffer) => {
    const head = Buffer.alloc(8);
    head.write(id, 0, 'latin1');
    head.writeUInt32LE(body.length, 4);
    return Buffer.concat([head, body]);
  };
  const body = Buffer.concat([Buffer.from('WAVE', 'latin1'), chunk('fmt ', fmt), chunk('data', data)]);
  const head = Buffer.alloc(8);
  head.write('RIFF', 0, 'latin1');
  head.writeUInt32LE(body.length, 4);
  return Buffer.concat([head, body]);
}

export function fakeTools(media: { extractorKey: string; id: string; page?: string }, wavBytes: Buffer) {
  const calls: string[] = [];
  const run: typeof runProcess = async (wrapped) => {
    // Each tool runs under prlimit, which sets its limits and execs it.
    expect(wrapped.command).toBe('prlimit');
    const separator = wrapped.args.indexOf('--');
    const opts = { ...wrapped, command: wrapped.args[separator + 1]!, args: wrapped.args.slice(separator + 2) };
    if (opts.command === 'yt-dlp') {
      calls.push('ytdlp');
      const info = {
        extractor: media.extractorKey.toLowerCase(),
        extractor_key: media.extractorKey,
        id: media.id,
        webpage_url: media.page,
        formats: [{ protocol: 'https' }],
      };
      opts.onStdoutLine?.(`INFO ${JSON.stringify(info)}`);
      const fifo = path.join(opts.cwd!, 'gate');
      execFileSync('mkfifo', [fifo]);
      const gate = (async () => {
        const handle = await open(fifo, 'r');
        try {
          await handle.read(Buffer.alloc(16));
        } finally {
          await handle.close();
        }
      })();
      opts.onStdoutLine?.('GATE');
      const stopped = new Promise((resolve) => opts.signal?.addEventListener('abort', resolve, { once: true }));
      if ((await Promise.race([gate.then(() => 'go'), stopped])) !== 'go') {
        // Stopped at the gate: a writer of its own lets its read end.
        await (await open(fifo, 'r+')).close();
        await gate;
        return { ...OK, exitCode: null, signal: 'SIGTERM', aborted: true };
      }
      calls.push('download');
      const file = opts.args[opts.args.indexOf('-o') + 1]!.replace('%(ext)s', 'm4a');
      await writeFile(file, 'media bytes');
      opts.onStdoutLine?.(file);
      return OK;
    }
    if (opts.args.some((arg) => arg.startsWith('async:'))) {
      // Started early on the FIFO: the download here ('media bytes') is converted whole, so this
      // one is stopped unfed, as the real one would be.
      await new Promise((resolve) => opts.signal?.addEventListener('abort', resolve, { once: true }));
      return { ...OK, exitCode: null, signal: 'SIGTERM', aborted: true };
    }
    calls.push('ffmpeg');
    // The WAV is the output after `-f wav` (the input's tags are another, after it).
    await writeFile(opts.args[opts.args.indexOf('wav') + 1]!.replace(/^file:/, ''), wavBytes);
    return OK;
  };
  return { run, calls };
}

/** hostsContacted: the hosts the egress guard says the downloader fetched from. */
export async function runJob(
  fx: { database: Database; store: ContentStore; dir: string },
  opts: {
    id?: string;
    url: string;
    run: typeof runProcess;
    store?: ContentStore;
    now: number;
    hostsContacted?: string[];
  },
) {
  const id = opts.id ?? 'job';
  await enqueueJob(fx.database, { id, url: opts.url, urlKey: opts.url, createdAt: 1 });
  const job = (await claimNextJob(fx.database, { owner: 'node', now: 1, leaseMs: 60_000 }))!;
  const task = createFetchTask({
    database: fx.database,
    store: opts.store ?? fx.store,
    now: () => opts.now,
    mountView: false,
    sandbox: createSandbox({
      mode: 'off',
      run: opts.run,
      guardAuthority: '127.0.0.1:9',
      guardSocket: null,
      unshare: 'unshare',
      python: 'python3',
      hostNetns: 'net:[1]',
    }),
    tools: { ytdlp: 'yt-dlp', ffmpeg: 'ffmpeg' },
    makeFifo,
    workDir: path.join(fx.dir, 'work'),
    limits: TEST_FETCH_LIMITS,
    openEgressSession: () => fakeGuardSession({ hostsContacted: () => opts.hostsContacted ?? [] }),
  });
  await task(job, { signal: new AbortController().signal, log: createLogger('silent'), owner: 'node' });
  return (await getJobRow(fx.database, id))!;
}
