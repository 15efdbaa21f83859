import fs from 'node:fs/promises';

/**
 * After a crash (kill -9), the tools a worker had started may live on in their own process groups
 * (confined tools end with their sandbox when the service dies; unconfined ones do not). At
 * start-up, before any job runs, every process whose command line names a job folder under the
 * work folder that `isOrphan` says is nobody's any more is killed, so it cannot write into a
 * folder a new attempt is about to use. Folders of jobs that another live node on this machine
 * is running are left alone. Linux only (reads /proc); elsewhere it finds nothing.
 */
export async function killOrphanedTools(
  workDir: string,
  isOrphan: (jobFolder: string) => boolean,
  procRoot = '/proc',
): Promise<number> {
  const entries = await fs.readdir(procRoot).catch(() => [] as string[]);
  const prefix = `${workDir}/`;
  let killed = 0;
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    const cmdline = await fs.readFile(`${procRoot}/${entry}/cmdline`, 'utf8').catch(() => '');
    // The job folder each argument names: <workDir>/<folder>/...
    const folders = cmdline
      .split('\0')
      .filter((arg) => arg.includes(prefix))
      .map((arg) => arg.slice(arg.indexOf(prefix) + prefix.length).split('/')[0]!);
    if (!folders.some(isOrphan)) continue;
    try {
      process.kill(Number(entry), 'SIGKILL');
      killed++;
    } catch {
      // Already gone.
    }
  }
  return killed;
}
