import fs from 'node:fs/promises';

/**
 * After a crash (kill -9), the tools a worker had started live on in their own process groups.
 * At start-up, before any job runs, every process whose command line names our work folder is
 * one of them: kill it, so it cannot write into a folder a new attempt is about to use.
 * Linux only (reads /proc); elsewhere it finds nothing.
 */
export async function killOrphanedTools(workDir: string, procRoot = '/proc'): Promise<number> {
  const entries = await fs.readdir(procRoot).catch(() => [] as string[]);
  let killed = 0;
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    const cmdline = await fs.readFile(`${procRoot}/${entry}/cmdline`, 'utf8').catch(() => '');
    if (!cmdline.split('\0').some((arg) => arg.includes(`${workDir}/`))) continue;
    try {
      process.kill(Number(entry), 'SIGKILL');
      killed++;
    } catch {
      // Already gone.
    }
  }
  return killed;
}
