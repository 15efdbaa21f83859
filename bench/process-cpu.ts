import { readdir, readFile } from 'node:fs/promises';

/** CPU time of processes, from /proc, for the benches' CPU figures. */
const CLOCK_TICKS = 100; // getconf CLK_TCK on Linux

/** CPU seconds (user + system, reaped children included) of a process and all its live descendants. */
export async function treeCpuSeconds(rootPid: number): Promise<number> {
  const stats = new Map<number, { ppid: number; ticks: number }>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const text = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    // After "pid (comm) ": state ppid ... utime(14) stime(15) cutime(16) cstime(17), counted from 1.
    if (fields.length < 15) continue;
    const ticks = Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
    stats.set(Number(entry), { ppid: Number(fields[1]), ticks });
  }
  let total = 0;
  for (const [pid, stat] of stats) {
    for (let p: number | undefined = pid; p !== undefined && p > 1; p = stats.get(p)?.ppid) {
      if (p === rootPid) {
        total += stat.ticks;
        break;
      }
    }
  }
  return total / CLOCK_TICKS;
}

/** CPU seconds of the children this process has waited for (the hand-run tools). */
export async function reapedChildrenCpuSeconds(): Promise<number> {
  const text = await readFile('/proc/self/stat', 'utf8');
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[13]) + Number(fields[14])) / CLOCK_TICKS;
}
