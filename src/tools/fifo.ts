import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Makes a FIFO at `file` that only its owner may open, with coreutils' mkfifo: Node has no call for it. */
export async function makeFifo(file: string): Promise<void> {
  await run('mkfifo', ['-m', '600', '--', file], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    timeout: 10_000,
  });
}

export type MakeFifo = typeof makeFifo;
