import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';

/**
 * The body of a fallback response: bytes start..end (inclusive) of one file, never the whole
 * file in memory. Up to one chunk is read at once and sent as a buffer (cheapest for small
 * ranges); anything longer is a pull stream over a FileHandle that reads one chunk ahead of
 * the socket. @hono/node-server cancels the stream when the client goes away, and the cancel
 * closes the file at once.
 *
 * Large chunks matter here: each chunk costs one read, one promise round and one socket
 * write, so 512 KiB chunks move a 10 MB file in 20 rounds where fs.createReadStream's default
 * 64 KiB needs 160.
 */
export const CHUNK_BYTES = 512 * 1024;

export async function fileBody(absolutePath: string, start: number, end: number): Promise<Uint8Array | ReadableStream<Uint8Array>> {
  // O_NOFOLLOW: the path was resolved without symlinks; do not follow one swapped in since.
  const handle = await open(absolutePath, constants.O_RDONLY | constants.O_NOFOLLOW);
  const length = end - start + 1;
  if (length <= CHUNK_BYTES) {
    try {
      return await readExactly(handle, start, length);
    } finally {
      await handle.close();
    }
  }
  return streamFrom(handle, start, length);
}

async function readExactly(handle: FileHandle, position: number, length: number): Promise<Uint8Array> {
  const buffer = Buffer.allocUnsafe(length);
  let filled = 0;
  while (filled < length) {
    const { bytesRead } = await handle.read(buffer, filled, length - filled, position + filled);
    if (bytesRead === 0) throw new Error('artifact file is shorter than its recorded size');
    filled += bytesRead;
  }
  return buffer;
}

function streamFrom(handle: FileHandle, start: number, length: number): ReadableStream<Uint8Array> {
  let position = start;
  let remaining = length;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await handle.close();
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const chunk = await readExactly(handle, position, Math.min(CHUNK_BYTES, remaining));
        position += chunk.byteLength;
        remaining -= chunk.byteLength;
        if (closed) return; // canceled while reading
        controller.enqueue(chunk);
        if (remaining === 0) {
          await close();
          controller.close();
        }
      } catch (err) {
        if (closed) return; // canceled: nobody is listening
        await close().catch(() => undefined);
        // Erroring cuts the connection: a short file must not end a response below its Content-Length.
        controller.error(err);
      }
    },
    cancel: close,
  });
}
