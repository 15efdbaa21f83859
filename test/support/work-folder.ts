import { readdir } from 'node:fs/promises';
import path from 'node:path';

/**
 * What a service left in its work folder (DATA_DIR/work) that no job may leave behind: every entry
 * but the folder of the converter waiting for the next job (CONVERTER_WAITING,
 * src/jobs/fetch/waiting-converter.ts), one at most: a second is a leftover.
 */
export async function workLeftovers(dataDir: string): Promise<string[]> {
  const entries = (await readdir(path.join(dataDir, 'work'))).sort();
  const waiting = entries.find((name) => name.startsWith('converter.'));
  return entries.filter((name) => name !== waiting);
}
