import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/**
 * A secret kept in the data dir when the configuration gives none: made at first start with
 * mode 0600, read at every start after. Returns the value and whether it was just created.
 */
export function loadOrCreateSecret(dataDir: string, fileName: string, bytes = 32): { value: string; file: string; created: boolean } {
  const file = path.join(dataDir, fileName);
  try {
    const value = fs.readFileSync(file, 'utf8').trim();
    if (value !== '') return { value, file, created: false };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  fs.mkdirSync(dataDir, { recursive: true });
  const value = randomBytes(bytes).toString('base64url');
  // wx: never overwrite a secret another process wrote meanwhile.
  try {
    fs.writeFileSync(file, `${value}\n`, { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return loadOrCreateSecret(dataDir, fileName, bytes);
    throw err;
  }
  return { value, file, created: true };
}
