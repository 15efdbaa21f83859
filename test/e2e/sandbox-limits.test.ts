import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { exceededLimit, type ToolLimits } from '../../src/sandbox/limits.js';
import { createResidentSandbox, type ResidentSandbox } from '../../src/sandbox/resident.js';
import { createSandbox, readHostNetns, type Sandbox } from '../../src/sandbox/sandbox.js';
import { runProcess } from '../../src/tools/process.js';
import { unprivilegedSandbox } from '../support/unprivileged-sandbox.js';

/**
 * The ceilings a sandbox sets on a tool run (src/sandbox/limits.ts), with real processes: in a
 * sandbox of its own (confine.py), in a child of the resident sandbox, and unconfined (prlimit).
 * Each ceiling is met by a run that goes past it, beside a control that stays under it; and each
 * is shown to matter: the same run without limits goes past.
 */
const MIB = 1024 * 1024;
const LIMITS: ToolLimits = { dataBytes: 128 * MIB, cpuSeconds: 1, fileBytes: MIB, processes: 32 };

let dir: string;
let confined: Sandbox;
let unconfined: Sandbox;
let resident: ResidentSandbox;

const python = (code: string) => ({ command: '/usr/bin/python3', args: ['-I', '-S', '-c', code] });
const ALLOCATE_300_MIB = python('x = bytearray(300 * 1024 * 1024); x[-1] = 1; print("allocated")');
const ALLOCATE_32_MIB = python('x = bytearray(32 * 1024 * 1024); x[-1] = 1; print("allocated")');
const SPIN_FOREVER = python('while True: pass');
const SPIN_BRIEFLY = python('print(sum(range(200_000)))');
const WRITE_2_MIB_PYTHON = python('open("big.bin", "wb").write(b"x" * 2 * 1024 * 1024)');
const WRITE_2_MIB_HEAD = { command: '/bin/sh', args: ['-c', 'head -c 2097152 /dev/zero > big.bin'] };
const WRITE_HALF_MIB = python('open("small.bin", "wb").write(b"x" * 512 * 1024)');

async function waitFor(check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-sandbox-limits-'));
  const common = {
    unshare: 'unshare',
    python: '/usr/bin/python3',
    guardSocket: path.join(dir, 'absent.sock'),
    hostNetns: readHostNetns(),
    run: runProcess,
  };
  confined = createSandbox({ mode: 'netns', guardAuthority: null, ...common });
  unconfined = createSandbox({ mode: 'off', guardAuthority: '127.0.0.1:9', ...common, guardSocket: null });
  resident = createResidentSandbox({
    spawned: confined,
    ytdlpPath: null,
    python: '/usr/bin/python3',
    socketPath: path.join(dir, 'resident.sock'),
    hostNetns: readHostNetns(),
    guardSocket: null,
    enabled: true,
    log: createLogger('silent'),
  });
  await resident.start();
  await waitFor(() => resident.runs() === 'resident', 60_000);
});

afterAll(async () => {
  await resident?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const WAYS = [
  ['in a sandbox of its own', () => confined],
  ['in the resident sandbox', () => resident],
  ['unconfined, under prlimit', () => unconfined],
] as const;

describe.each(WAYS)('%s', (_way, sandboxOf) => {
  const run = (tool: { command: string; args: string[] }, limits?: ToolLimits) =>
    sandboxOf().run({ ...tool, cwd: dir, network: 'none', limits, timeoutMs: 30_000, stdoutCaptureBytes: 4096 });

  it('memory: an allocation past dataBytes is refused (memory); under it, and without limits, it succeeds', async () => {
    const refused = await run(ALLOCATE_300_MIB, LIMITS);
    expect(refused.exitCode).not.toBe(0);
    expect(exceededLimit(refused)).toBe('memory');
    const small = await run(ALLOCATE_32_MIB, LIMITS);
    expect(small.stdout.trim()).toBe('allocated');
    expect(exceededLimit(small)).toBeNull();
    const free = await run(ALLOCATE_300_MIB);
    expect(free.stdout.trim()).toBe('allocated');
  });

  it('CPU: a run that spins is stopped after cpuSeconds (cpu); a brief one ends', async () => {
    const started = Date.now();
    const spun = await run(SPIN_FOREVER, LIMITS);
    expect(exceededLimit(spun)).toBe('cpu');
    expect(spun.timedOut).toBe(false);
    expect(Date.now() - started).toBeLessThan(15_000);
    const brief = await run(SPIN_BRIEFLY, LIMITS);
    expect(brief.exitCode).toBe(0);
    expect(exceededLimit(brief)).toBeNull();
  });

  it('file size: a write past fileBytes is refused, by EFBIG (Python) or SIGXFSZ (a C program); a smaller one and an unlimited one succeed', async () => {
    const efbig = await run(WRITE_2_MIB_PYTHON, LIMITS);
    expect(exceededLimit(efbig)).toBe('file_size');
    const sigxfsz = await run(WRITE_2_MIB_HEAD, LIMITS);
    expect(exceededLimit(sigxfsz)).toBe('file_size');
    expect((await stat(path.join(dir, 'big.bin'))).size).toBeLessThanOrEqual(MIB);
    const small = await run(WRITE_HALF_MIB, LIMITS);
    expect(small.exitCode).toBe(0);
    const free = await run(WRITE_2_MIB_HEAD);
    expect(free.exitCode).toBe(0);
    expect((await stat(path.join(dir, 'big.bin'))).size).toBe(2 * MIB);
  });
});

it('processes: an unprivileged run cannot start more than its processes (the kernel exempts a real root)', async () => {
  const unprivileged = await unprivilegedSandbox(dir);
  const FORK_64 = python(
    'import os, time\nkids = []\nfor _ in range(64):\n    pid = os.fork()\n    if pid == 0:\n        time.sleep(2); os._exit(0)\n    kids.append(pid)\nprint(len(kids))',
  );
  const refused = await unprivileged.run({
    ...FORK_64,
    cwd: '/',
    network: 'none',
    limits: LIMITS,
    timeoutMs: 30_000,
    stdoutCaptureBytes: 4096,
  });
  expect(refused.exitCode).not.toBe(0);
  expect(exceededLimit(refused)).toBe('processes');
  const free = await unprivileged.run({
    ...FORK_64,
    cwd: '/',
    network: 'none',
    timeoutMs: 30_000,
    stdoutCaptureBytes: 4096,
  });
  expect(free.stdout.trim()).toBe('64');
});
