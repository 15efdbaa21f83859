import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { waitingConverterNode } from '../../src/jobs/fetch/work-folder.js';
import type { LogLine } from './service.js';

/**
 * What a service left in its work folder (DATA_DIR/work) that no job may leave behind: every entry
 * but the folder of the converter waiting for the next job (CONVERTER_WAITING; its name is the
 * layout's, src/jobs/fetch/work-folder.ts), one at most: a second is a leftover.
 */
export async function workLeftovers(dataDir: string): Promise<string[]> {
  const entries = (await readdir(path.join(dataDir, 'work'))).sort();
  const waiting = entries.find((name) => waitingConverterNode(name) !== undefined);
  return entries.filter((name) => name !== waiting);
}

/**
 * For a failed check of leftovers: what each leftover holds (paths and sizes) and what the
 * service logged of the job whose attempt folder (`<job id>.<attempt>`) it is.
 */
export async function describeLeftovers(dataDir: string, logs: LogLine[], leftovers: string[]): Promise<string> {
  const parts: string[] = [];
  for (const name of leftovers) {
    const root = path.join(dataDir, 'work', name);
    const entries = await readdir(root, { recursive: true }).catch((err: Error) => [`(${err.message})`]);
    const sized = await Promise.all(
      entries.map(async (entry) => `${entry} ${(await stat(path.join(root, entry)).catch(() => null))?.size ?? '?'}`),
    );
    const jobId = name.split('.')[0];
    const lines = logs
      .filter((line) => line.job_id === jobId)
      .map(
        (line) => `${line.time as string} ${line.level} ${line.msg}${line.err ? ` ${JSON.stringify(line.err)}` : ''}`,
      );
    parts.push(`${name}: [${sized.join(', ')}]\n  ${lines.join('\n  ')}`);
  }
  return parts.join('\n');
}
