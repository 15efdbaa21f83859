/**
 * Start-up time (run by hand: npm run build && npx tsx bench/startup.ts). Spawns the built
 * service (node dist/main.js) on an empty data dir, then again on the same data dir (a restart:
 * migrations already applied, recovery and reconciliation with nothing to do), 5 times each, and
 * prints the time from spawn to the 'listening' log line. Node's own boot is included.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');
const RUNS = 5;

function startOnce(dataDir: string): Promise<number> {
  const started = performance.now();
  const child = spawn(process.execPath, [path.join(ROOT, 'dist/main.js')], {
    env: { PATH: process.env.PATH, DATA_DIR: dataDir, PORT: '0', API_KEYS: 'startup-bench-key-0123456789' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let output = '';
    let listeningAfter: number | undefined;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
      if (listeningAfter === undefined && output.includes('"msg":"listening"')) {
        listeningAfter = performance.now() - started;
        child.kill('SIGTERM');
      }
    });
    child.once('exit', (code) => {
      if (listeningAfter !== undefined) resolve(listeningAfter);
      else reject(new Error(`exited with ${code} before listening:\n${output}`));
    });
  });
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const first: number[] = [];
const restart: number[] = [];
for (let i = 0; i < RUNS; i++) {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'sf-bench-startup-'));
  first.push(await startOnce(dataDir));
  restart.push(await startOnce(dataDir));
  await rm(dataDir, { recursive: true, force: true });
}
const show = (values: number[]) =>
  `median ${median(values).toFixed(0)} ms (${values.map((v) => v.toFixed(0)).join(', ')})`;
console.log(`first start, empty data dir: ${show(first)}`);
console.log(`restart, same data dir:      ${show(restart)}`);
