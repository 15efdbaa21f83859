import { close as fsClose, constants, open as fsOpen, read as fsRead } from 'node:fs';

/**
 * The bodies of fallback responses: bytes start..end (inclusive) of one file, never the whole
 * file in memory. Up to one chunk is read at once and sent as a buffer (cheapest for small
 * ranges); anything longer is a pull stream that reads one chunk ahead of the socket.
 * @hono/node-server cancels the stream when the client goes away, and the cancel lets go of the
 * file at once.
 *
 * Requests in flight for the same file share one descriptor: the first opens it, the last one to
 * finish closes it, and none is kept once no request needs it. Under load a hot artifact then
 * costs one read per request instead of open, read and close (three trips through libuv's thread
 * pool), which is what keeps the fallback ahead of a plain fs.createReadStream server on small
 * ranges. Reads are positional, so sharing is safe. The callback API is used throughout: the
 * FileHandle API's objects and promise plumbing cost a third of the app's time per request.
 *
 * Large chunks matter too: each costs one read, one promise round and one socket write, so 512 KiB
 * chunks move a 10 MB file in 20 rounds where fs.createReadStream's default 64 KiB needs 160.
 */
export const CHUNK_BYTES = 512 * 1024;

// O_NOFOLLOW: the path was resolved without symlinks; do not follow one swapped in since.
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW;

export type FileBody = (absolutePath: string, start: number, end: number) => Promise<Uint8Array | ReadableStream<Uint8Array>>;

interface SharedFile {
  fd: Promise<number>;
  users: number;
}

export function createFileBodies(): FileBody {
  const shared = new Map<string, SharedFile>();

  /** The file's descriptor, opened or shared; `release` exactly once when done with it. */
  async function acquire(absolutePath: string): Promise<{ fd: number; release: () => void }> {
    let entry = shared.get(absolutePath);
    if (!entry) {
      entry = { fd: openFile(absolutePath), users: 0 };
      shared.set(absolutePath, entry);
    }
    entry.users++;
    const current = entry;
    const leave = (fd: number | undefined) => {
      current.users--;
      if (current.users > 0) return;
      if (shared.get(absolutePath) === current) shared.delete(absolutePath);
      if (fd !== undefined) fsClose(fd, () => undefined);
    };
    let fd: number;
    try {
      fd = await current.fd;
    } catch (err) {
      leave(undefined);
      throw err;
    }
    let released = false;
    return {
      fd,
      release: () => {
        if (released) return;
        released = true;
        leave(fd);
      },
    };
  }

  return async (absolutePath, start, end) => {
    // Acquired before answering: a missing file is an error (404) before any header is sent.
    const file = await acquire(absolutePath);
    const length = end - start + 1;
    if (length <= CHUNK_BYTES) {
      try {
        return await readExactly(file.fd, start, length);
      } finally {
        file.release();
      }
    }
    return streamFrom(file, start, length);
  };
}

function openFile(absolutePath: string): Promise<number> {
  return new Promise((resolve, reject) => fsOpen(absolutePath, OPEN_FLAGS, (err, fd) => (err ? reject(err) : resolve(fd))));
}

function readExactly(fd: number, position: number, length: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const buffer = Buffer.allocUnsafe(length);
    const readFrom = (filled: number): void => {
      fsRead(fd, buffer, filled, length - filled, position + filled, (err, bytesRead) => {
        if (err) return reject(err);
        if (bytesRead === 0) return reject(new Error('artifact file is shorter than its recorded size'));
        if (filled + bytesRead < length) return readFrom(filled + bytesRead);
        resolve(buffer);
      });
    };
    readFrom(0);
  });
}

function streamFrom(file: { fd: number; release: () => void }, start: number, length: number): ReadableStream<Uint8Array> {
  let position = start;
  let remaining = length;
  let reading = false;
  let canceled = false;
  // Never while a read is in flight: a closed descriptor's number can be reused by the next
  // open, and a read still queued in the thread pool would then read another file.
  const releaseWhenIdle = () => {
    if (!reading) file.release();
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      reading = true;
      let chunk: Buffer;
      try {
        chunk = await readExactly(file.fd, position, Math.min(CHUNK_BYTES, remaining));
      } catch (err) {
        reading = false;
        file.release();
        // Erroring cuts the connection: a short file must not end a response below its Content-Length.
        if (!canceled) controller.error(err);
        return;
      }
      reading = false;
      if (canceled) return file.release();
      position += chunk.byteLength;
      remaining -= chunk.byteLength;
      controller.enqueue(chunk);
      if (remaining === 0) {
        file.release();
        controller.close();
      }
    },
    cancel() {
      canceled = true;
      releaseWhenIdle();
    },
  });
}
