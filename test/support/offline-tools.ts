/**
 * Stand-ins for yt-dlp and ffmpeg that never touch the network, for a service that is
 * sent addresses off this machine (169.254.169.254, 10.0.0.1, example.org...) and must refuse
 * them. If the address policy ever regressed and let such a job run, the worker would start
 * these instead of the real tools: nothing connects anywhere, and the job fails.
 *
 * They answer the version questions of the start-up and health checks like the real tools, so
 * the service starts as usual; any other invocation is recorded (one line of arguments per call)
 * and exits 1.
 *
 *   const tools = await writeOfflineTools(dir);
 *   const svc = await startService({ env: { ...tools.env } });   // YTDLP_PATH, FFMPEG_PATH, TOOL_MOUNT_VIEW
 *   expect(await tools.calls()).toEqual([]);                       // no job ever ran a tool
 */
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

export interface OfflineTools {
  /**
   * Service environment that points every tool at its stand-in, and lets the stand-ins write their
   * call log beside them: a tool's mount view (TOOL_MOUNT_VIEW) shows their folder read-only.
   */
  env: { YTDLP_PATH: string; FFMPEG_PATH: string; TOOL_MOUNT_VIEW: 'off' };
  /** Every invocation other than a version question, as "<tool> <args...>", in order. */
  calls(): Promise<string[]>;
}

export async function writeOfflineTools(dir: string): Promise<OfflineTools> {
  if (dir.includes("'")) throw new Error(`offline tools need a folder without quotes: ${dir}`);
  await mkdir(dir, { recursive: true });
  const log = path.join(dir, 'calls.log');
  await writeFile(log, '');

  async function stub(name: string, versionArg: string, versionLine: string): Promise<string> {
    const file = path.join(dir, name);
    const body = [
      '#!/bin/sh',
      `if [ "$1" = "${versionArg}" ] && [ $# -eq 1 ]; then echo '${versionLine}'; exit 0; fi`,
      `printf '%s %s\\n' '${name}' "$*" >> '${log}'`,
      `echo 'ERROR: ${name} stand-in: this test never lets a tool reach the network' >&2`,
      'exit 1',
    ].join('\n');
    await writeFile(file, `${body}\n`);
    await chmod(file, 0o755);
    return file;
  }

  const env = {
    YTDLP_PATH: await stub('yt-dlp', '--version', '2023.03.04'),
    FFMPEG_PATH: await stub('ffmpeg', '-version', 'ffmpeg version 0.0-offline-stand-in'),
    TOOL_MOUNT_VIEW: 'off' as const,
  };
  return {
    env,
    async calls() {
      return (await readFile(log, 'utf8')).split('\n').filter((line) => line !== '');
    },
  };
}
