import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * The folders a confined tool must see read-only besides the system's programs and libraries
 * (confine.py's SYSTEM_PATHS): for each tool, the folder it lives in, or the whole prefix when
 * that folder is a `bin` (a virtualenv, /opt/<tool>), and the same for a script's interpreter.
 * Folders under /usr are in every view already.
 */
export async function toolFolders(files: Array<string | null>): Promise<string[]> {
  const folders = new Set<string>();
  const add = async (file: string) => {
    const real = await fs.realpath(file).catch(() => null);
    if (real === null) return;
    const dir = path.dirname(real);
    const folder = path.basename(dir) === 'bin' ? path.dirname(dir) : dir;
    if (folder !== '/usr' && !folder.startsWith('/usr/') && folder !== '/') folders.add(folder);
  };
  for (const file of files) {
    if (file === null) continue;
    await add(file);
    const interpreter = await scriptInterpreter(file);
    if (interpreter !== null) await add(interpreter);
  }
  return [...folders].sort();
}

/** The interpreter a script's #! line names (not `env`), or null. */
async function scriptInterpreter(file: string): Promise<string | null> {
  const head = await fs
    .open(file, 'r')
    .then(async (handle) => {
      try {
        const buf = Buffer.alloc(256);
        const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
        return buf.subarray(0, bytesRead).toString('latin1');
      } finally {
        await handle.close();
      }
    })
    .catch(() => '');
  const shebang = /^#!\s*(\S+)/.exec(head);
  if (!shebang || path.basename(shebang[1]!) === 'env') return null;
  return shebang[1]!;
}
