import { close as fsClose, constants, fstatSync, lstatSync, open as fsOpen, read as fsRead, readSync } from 'node:fs';
import type { ServerResponse } from 'node:http';

/**
 * The bodies of fallback responses: bytes start..end (inclusive) of one file, never the whole
 * file in memory. Up to one chunk is read at once and sent as a buffer (cheapest for small
 * ranges); anything longer is a pull stream that reads one chunk ahead of the socket.
 * @hono/node-server cancels the stream when the client goes away, and the cancel lets go of the
 * file at once.
 *
 * Requests for the same file share one descriptor: the first opens it, and it is closed once no
 * request has needed it for `lingerMs` (default 200 ms; 0: as soon as the last one finishes).
 * Under load a hot artifact then costs one read per request instead of open, read and close
 * (three trips through libuv's thread pool): small ranges finish so fast that requests in flight
 * seldom overlap, and without the linger most of them would open and close the file again. Reads
 * are positional, so sharing is safe. A shared descriptor is used again only while its file is
 * still the one at its path: an lstat of the path and an fstat of the descriptor (same inode) at
 * most every `linkCheckMs` (default 100 ms; 0: before every use) tell, and a file removed or
 * moved away since (evicted, by this node or another on the shared volume; quarantined by a
 * scrub) is opened afresh, which finds it gone (404). So no request
 * starting later than linkCheckMs after the removal is answered from it (nginx's
 * open_file_cache_valid allows 2 s); requests already under way finish, as a reader of an
 * unlinked file does. The interval because a system call is not free: on a virtual machine one
 * fstat costs about what a small range's read does (docs/benchmarks.md). The callback API is used
 * throughout: the FileHandle API's objects and promise plumbing cost more per request than the
 * read itself (docs/benchmarks.md).
 *
 * An answer of at most SYNC_READ_BYTES from a descriptor already open is read on the spot
 * (readSync), not through the thread pool: from the page cache that copy costs less than the
 * trip to a pool thread and back, which on a small machine also means waking a thread and two
 * context switches per request. The event loop then waits for the disk when those pages are not
 * cached, as nginx's own workers do when they read without `aio`; the bound keeps each such wait
 * to one small read. The first request of a file, and anything longer, goes through the pool.
 *
 * Large chunks matter too: each costs one read, one promise round and one socket write, so 512 KiB
 * chunks move a 10 MB file in 20 rounds where fs.createReadStream's default 64 KiB needs 160.
 */
export const CHUNK_BYTES = 512 * 1024;
export const SYNC_READ_BYTES = 128 * 1024;
// Chunk buffers `send` keeps for reuse: 32 MiB at most.
const MAX_SPARE_BUFFERS = 64;

// O_NOFOLLOW: the path was resolved without symlinks; do not follow one swapped in since.
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW;

export type FileBody = (
  absolutePath: string,
  start: number,
  end: number,
) => Promise<Uint8Array | ReadableStream<Uint8Array>>;

/**
 * Bytes start..end of a file straight to a node response (src/http/node-router.ts), with the
 * same chunks and descriptor sharing. `writeHead` is called once the
 * first chunk is read: a file that cannot be opened or read rejects before anything is written,
 * so the caller can still answer otherwise. Resolves once the last byte is handed to the socket,
 * or the client has gone.
 */
export type FileSender = (
  res: ServerResponse,
  absolutePath: string,
  start: number,
  end: number,
  writeHead: () => void,
) => Promise<void>;

export interface FileBodies {
  body: FileBody;
  send: FileSender;
}

interface SharedFile {
  fd: Promise<number>;
  /** The descriptor, once open. */
  opened: number | undefined;
  users: number;
  /** performance.now() when the last user left, or when the last read on the spot was made. */
  idleSince: number;
  /** performance.now() when the file was last known linked (opened, or its fstat said so). */
  linkedAt: number;
  /** Taken out of `shared` because its file was removed: closed as soon as no request uses it. */
  retired: boolean;
}

export function createFileBodies(options: { lingerMs?: number; linkCheckMs?: number } = {}): FileBodies {
  const lingerMs = options.lingerMs ?? 200;
  const linkCheckMs = options.linkCheckMs ?? 100;
  const shared = new Map<string, SharedFile>();
  let sweeper: NodeJS.Timeout | undefined;

  const forget = (absolutePath: string, entry: SharedFile, fd: number | undefined) => {
    if (shared.get(absolutePath) === entry) shared.delete(absolutePath);
    if (fd !== undefined) fsClose(fd, () => undefined);
  };

  /** Closes the files idle for lingerMs; runs while any file is idle. */
  function sweep(): void {
    const now = performance.now();
    let idle = 0;
    for (const [absolutePath, entry] of shared) {
      if (entry.users > 0) continue;
      if (now - entry.idleSince < lingerMs) {
        idle++;
        continue;
      }
      // An idle entry's descriptor has been opened (its users awaited it).
      void entry.fd.then((fd) => forget(absolutePath, entry, fd));
      shared.delete(absolutePath);
    }
    if (idle === 0 && sweeper) {
      clearInterval(sweeper);
      sweeper = undefined;
    }
  }

  /**
   * The shared entry of a file, unless its descriptor is open on a file found removed: that one
   * is retired (closed once unused), so that the next open finds the file gone.
   */
  function liveEntry(absolutePath: string, now: number): SharedFile | undefined {
    const entry = shared.get(absolutePath);
    if (entry?.opened === undefined || now - entry.linkedAt < linkCheckMs) return entry;
    if (stillAtItsPath(entry.opened, absolutePath)) {
      entry.linkedAt = now;
      return entry;
    }
    shared.delete(absolutePath);
    entry.retired = true;
    if (entry.users === 0) fsClose(entry.opened, () => undefined);
    return undefined;
  }

  /** The file's descriptor, opened or shared; `release` exactly once when done with it. */
  async function acquire(absolutePath: string): Promise<{ fd: number; release: () => void }> {
    let entry = liveEntry(absolutePath, performance.now());
    if (!entry) {
      const created: SharedFile = {
        fd: openFile(absolutePath),
        opened: undefined,
        users: 0,
        idleSince: 0,
        linkedAt: 0,
        retired: false,
      };
      created.fd.then(
        (fd) => {
          created.opened = fd;
          created.linkedAt = performance.now();
        },
        () => undefined,
      );
      entry = created;
      shared.set(absolutePath, entry);
    }
    entry.users++;
    const current = entry;
    const leave = (fd: number | undefined) => {
      current.users--;
      if (current.users > 0) return;
      if (fd === undefined || lingerMs === 0 || current.retired) return forget(absolutePath, current, fd);
      current.idleSince = performance.now();
      if (!sweeper) {
        sweeper = setInterval(sweep, lingerMs);
        sweeper.unref();
      }
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

  /**
   * The open descriptor of a still linked file, when `length` bytes of it are to be read on the
   * spot (the caller reads them before anything else runs); else undefined.
   */
  function openForReadOnTheSpot(absolutePath: string, length: number): number | undefined {
    if (length > SYNC_READ_BYTES) return undefined;
    const now = performance.now();
    const entry = liveEntry(absolutePath, now);
    if (entry?.opened === undefined) return undefined;
    // Used and done within this turn: the linger counts from now.
    if (entry.users === 0) entry.idleSince = now;
    return entry.opened;
  }

  const body: FileBody = async (absolutePath, start, end) => {
    const length = end - start + 1;
    const fd = openForReadOnTheSpot(absolutePath, length);
    if (fd !== undefined) {
      const buffer = Buffer.allocUnsafe(length);
      readSyncInto(fd, buffer, length, start);
      return buffer;
    }
    // Acquired before answering: a missing file is an error (404) before any header is sent.
    const file = await acquire(absolutePath);
    if (length <= CHUNK_BYTES) {
      try {
        return await readExactly(file.fd, start, length);
      } finally {
        file.release();
      }
    }
    return streamFrom(file, start, length);
  };

  // Chunk buffers of `send`, reused once the socket is done with them: fresh buffers of this
  // size are mapped and faulted in by the allocator each time, and that cost more than the
  // copies themselves when streaming whole files.
  const spare: Buffer[] = [];
  const takeBuffer = () => spare.pop() ?? Buffer.allocUnsafeSlow(CHUNK_BYTES);
  const giveBack = (buffer: Buffer) => () => {
    if (spare.length < MAX_SPARE_BUFFERS) spare.push(buffer);
  };

  const send: FileSender = async (res, absolutePath, start, end, writeHead) => {
    const length = end - start + 1;
    const fd = openForReadOnTheSpot(absolutePath, length);
    if (fd !== undefined) {
      const buffer = takeBuffer();
      try {
        readSyncInto(fd, buffer, length, start);
      } catch (err) {
        giveBack(buffer)();
        throw err;
      }
      writeHead();
      res.end(buffer.subarray(0, length), giveBack(buffer));
      return;
    }
    const file = await acquire(absolutePath);
    let position = start;
    let remaining = end - start + 1;
    let buffer = takeBuffer();
    let filled: number;
    try {
      filled = await readInto(file.fd, buffer, Math.min(CHUNK_BYTES, remaining), position);
    } catch (err) {
      file.release();
      giveBack(buffer)();
      throw err;
    }
    writeHead();
    try {
      for (;;) {
        position += filled;
        remaining -= filled;
        const chunk = buffer.subarray(0, filled);
        if (remaining === 0) {
          res.end(chunk, giveBack(buffer));
          return;
        }
        // Read the next chunk while this one drains; the written buffer goes back once written.
        const next = takeBuffer();
        const reading = readInto(file.fd, next, Math.min(CHUNK_BYTES, remaining), position);
        const drained = res.write(chunk, giveBack(buffer)) || (!res.destroyed && (await drainedOrClosed(res)));
        buffer = next;
        filled = await reading;
        if (!drained || res.destroyed) return;
      }
    } catch (err) {
      // A short file must not end a response below its Content-Length: cut the connection.
      res.destroy(err as Error);
    } finally {
      // Never while a read is in flight (see streamFrom): every read above is awaited first.
      file.release();
    }
  };

  return { body, send };
}

/** Resolves true once `res` drains, false if the client goes away first. */
function drainedOrClosed(res: ServerResponse): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (drained: boolean) => () => {
      res.off('drain', onDrain);
      res.off('close', onClose);
      resolve(drained);
    };
    const onDrain = done(true);
    const onClose = done(false);
    res.on('drain', onDrain);
    res.on('close', onClose);
  });
}

/**
 * True while the descriptor's file is still the one at its path: false once it was removed or
 * moved away (scrub's quarantine renames it), or either cannot be examined.
 */
function stillAtItsPath(fd: number, absolutePath: string): boolean {
  try {
    const named = lstatSync(absolutePath, { throwIfNoEntry: false });
    if (named === undefined) return false;
    const open = fstatSync(fd);
    return named.ino === open.ino && named.dev === open.dev;
  } catch {
    return false;
  }
}

/** Fills buffer[0, length) from the file at `position`, on the spot. */
function readSyncInto(fd: number, buffer: Buffer, length: number, position: number): void {
  for (let filled = 0; filled < length;) {
    const bytesRead = readSync(fd, buffer, filled, length - filled, position + filled);
    if (bytesRead === 0) throw new Error('artifact file is shorter than its recorded size');
    filled += bytesRead;
  }
}

function openFile(absolutePath: string): Promise<number> {
  return new Promise((resolve, reject) =>
    fsOpen(absolutePath, OPEN_FLAGS, (err, fd) => (err ? reject(err) : resolve(fd))),
  );
}

/** Fills buffer[0, length) from the file at `position`; resolves `length`. */
function readInto(fd: number, buffer: Buffer, length: number, position: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const readFrom = (filled: number): void => {
      fsRead(fd, buffer, filled, length - filled, position + filled, (err, bytesRead) => {
        if (err) return reject(err);
        if (bytesRead === 0) return reject(new Error('artifact file is shorter than its recorded size'));
        if (filled + bytesRead < length) return readFrom(filled + bytesRead);
        resolve(length);
      });
    };
    readFrom(0);
  });
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

function streamFrom(
  file: { fd: number; release: () => void },
  start: number,
  length: number,
): ReadableStream<Uint8Array> {
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
