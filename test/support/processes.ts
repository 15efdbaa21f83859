import { readFile, readdir } from 'node:fs/promises';

/** Pids of live processes whose command line contains `needle` (read from /proc). */
export async function processesMatching(needle: string): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    // A zombie (state Z) has exited; its parent has not reaped it yet.
    if (cmdline.replaceAll('\0', ' ').includes(needle) && !/\) Z /.test(stat)) pids.push(Number(entry));
  }
  return pids;
}
