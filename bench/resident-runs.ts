/**
 * A run through the resident sandbox, by itself (run by hand):
 *   npm run build && npx tsx bench/resident-runs.ts [runs per block, default 20] [--baseline DIR]
 *
 * Starts the resident sandbox of this checkout's build (dist/) and, with --baseline, of another
 * checkout's (DIR/dist, say main's), each with Debian's yt-dlp imported and no egress guard, and
 * times runs through them: `true` (a tool started by the run's PID 1) and `yt-dlp --version` (the
 * imported yt-dlp, in PID 1 itself), one at a time, 30 ms apart. Blocks of runs alternate between
 * the two, so that the machine's load drifts over both alike. Prints, for each, the median wall
 * time of a run (asked for → its exit status read) and CPU time per run: user + system of this
 * process's whole tree (Node, the resident's sandbox, every run; only one resident runs at a
 * time), over the block.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ResidentSandbox } from '../src/sandbox/resident.js';
import { treeCpuSeconds } from './process-cpu.js';

const RUNS = Number(process.argv.slice(2).find((arg) => /^\d+$/.test(arg)) ?? 20);
const baselineAt = process.argv.indexOf('--baseline');
const BASELINE = baselineAt >= 0 ? path.resolve(process.argv[baselineAt + 1]!) : undefined;
const ROOT = path.resolve(import.meta.dirname, '..');
const ROUNDS = 3;
const KINDS = [
  { label: 'true', command: 'true', args: [] },
  { label: 'yt-dlp --version', command: 'yt-dlp', args: ['--version'] },
];

/** The resident sandbox of the build in `root`/dist, ready. */
async function startResident(root: string, dir: string): Promise<ResidentSandbox> {
  const { createResidentSandbox } = (await import(
    path.join(root, 'dist/sandbox/resident.js')
  )) as typeof import('../src/sandbox/resident.js');
  const { createSandbox, readHostNetns } = (await import(
    path.join(root, 'dist/sandbox/sandbox.js')
  )) as typeof import('../src/sandbox/sandbox.js');
  const { runProcess } = (await import(
    path.join(root, 'dist/tools/process.js')
  )) as typeof import('../src/tools/process.js');
  const { createLogger } = (await import(path.join(root, 'dist/logger.js'))) as typeof import('../src/logger.js');
  const spawned = createSandbox({
    mode: 'netns',
    unshare: 'unshare',
    python: '/usr/bin/python3',
    guardSocket: path.join(dir, 'no-guard.sock'),
    guardAuthority: null,
    hostNetns: readHostNetns(),
    run: runProcess,
  });
  const resident = createResidentSandbox({
    spawned,
    ytdlpPath: '/usr/bin/yt-dlp',
    python: '/usr/bin/python3',
    socketPath: path.join(dir, 'resident.sock'),
    hostNetns: readHostNetns(),
    guardSocket: null,
    enabled: true,
    log: createLogger('silent'),
  });
  await resident.start();
  while (resident.runs() !== 'resident') await sleep(50);
  return resident;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const dir = await mkdtemp(path.join(tmpdir(), 'sf-resident-runs-'));
const builds = [
  { name: 'service', root: ROOT },
  ...(BASELINE ? [{ name: `baseline (${BASELINE})`, root: BASELINE }] : []),
];
const residents = await Promise.all(
  builds.map(async (build, i) => {
    const own = path.join(dir, String(i));
    await mkdir(own);
    return { ...build, cwd: own, resident: await startResident(build.root, own) };
  }),
);
// Both warm-ups over.
await sleep(1000);
const results = new Map<string, { walls: number[]; cpu: number; runs: number }>();
for (let round = 0; round < ROUNDS; round++) {
  for (const { name, cwd, resident } of round % 2 === 0 ? residents : [...residents].reverse()) {
    for (const kind of KINDS) {
      const key = `${name}: ${kind.label}`;
      const result = results.get(key) ?? { walls: [], cpu: 0, runs: 0 };
      const cpuBefore = await treeCpuSeconds(process.pid);
      for (let i = 0; i < RUNS; i++) {
        const started = performance.now();
        const run = await resident.run({
          command: kind.command,
          args: kind.args,
          cwd,
          network: 'none',
          stdoutCaptureBytes: 64,
        });
        result.walls.push(performance.now() - started);
        if (run.exitCode !== 0) throw new Error(`${key}: ${JSON.stringify(run)}`);
        await sleep(30);
      }
      // The last run's leader is reaped by the resident's sandbox once it has answered.
      await sleep(200);
      result.cpu += (await treeCpuSeconds(process.pid)) - cpuBefore;
      result.runs += RUNS;
      results.set(key, result);
    }
  }
}
for (const [key, { walls, cpu, runs }] of results) {
  console.log(
    `${key}: ${median(walls).toFixed(1)} ms a run (median of ${runs}), ${((cpu / runs) * 1000).toFixed(1)} ms CPU a run`,
  );
}
await Promise.all(residents.map(({ resident }) => resident.stop()));
await rm(dir, { recursive: true, force: true });
