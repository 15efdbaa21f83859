import { constants } from 'node:fs';
import fs, { type FileHandle } from 'node:fs/promises';

/**
 * Opening a file a tool left in its folder, which the tool could have made anything: a FIFO whose
 * open would block a thread of libuv's pool until a writer comes (forever), a socket, a device, or
 * a symbolic link to a file elsewhere. The path is opened without following a link and without
 * blocking, then the descriptor's own fstat must say a regular file; every later read goes through
 * that descriptor, so the file checked is the file read.
 */
export const TOOL_FILE_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;

/** What was at the path instead of a regular file. */
export class NotRegularFile extends Error {
  constructor(
    readonly file: string,
    readonly found: string,
  ) {
    super(`not a regular file (${found})`);
  }
}

/** Opens `file` for reading if it is a regular file; NotRegularFile when it is anything else. */
export async function openRegularFile(file: string): Promise<FileHandle> {
  let handle: FileHandle;
  try {
    handle = await fs.open(file, TOOL_FILE_FLAGS);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // O_NOFOLLOW's refusal of a link; a socket cannot be opened at all.
    if (code === 'ELOOP') throw new NotRegularFile(file, 'a symbolic link');
    if (code === 'ENXIO') throw new NotRegularFile(file, 'a socket');
    throw err;
  }
  try {
    const stats = await handle.stat();
    if (!stats.isFile()) throw new NotRegularFile(file, kindOf(stats));
    return handle;
  } catch (err) {
    await handle.close();
    throw err;
  }
}

function kindOf(stats: { isFIFO(): boolean; isDirectory(): boolean; isSocket(): boolean }): string {
  if (stats.isFIFO()) return 'a FIFO';
  if (stats.isDirectory()) return 'a directory';
  if (stats.isSocket()) return 'a socket';
  return 'a device';
}
