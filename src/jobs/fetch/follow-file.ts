import type { FileHandle } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { openRegularFile } from '../../tools/regular-file.js';

/**
 * A file read as another process writes it: its bytes are handed on in order, from its first, as
 * they appear, so that work on them (the loudness meter) overlaps the writing instead of following
 * it. The writer's end is told with finish(length): the reading goes on to that length and stops.
 * Bytes the writer rewrites behind the reader (a WAV's header) are not read again, and bytes it
 * wrote past `length` may have been handed on already: for a file that must end at `length`.
 *
 * The bytes are read into one buffer of CHUNK_BYTES and handed on synchronously, at most that
 * many at a time; the buffer is read into again once onBytes returns, so a consumer copies what it
 * keeps. Memory is bounded whatever the file's size, and a fresh megabyte per chunk (its pages
 * faulted in, then freed) would cost more CPU than the copy. A read that finds less than a chunk
 * has caught up with the writer: the reader waits POLL_MS and looks again (also for the file to
 * appear), instead of reading each few kilobytes as they are written.
 *
 * The file is a tool's output: it is opened as ../../tools/regular-file.ts says (anything but a
 * regular file fails the reading at once, never blocks it), and `opened` tells which file was
 * read, so that the caller can check it is still the one at the path once the writer is done.
 */
export interface FileFollower {
  /** The writer is done: hands on the file's bytes up to `length` (fewer if it holds fewer) and stops. */
  finish(length: number): Promise<void>;
  /** The writer failed: stops at once. Never rejects. */
  abandon(): Promise<void>;
  /** The file read (device and inode), once it has been opened. */
  opened(): { dev: number; ino: number } | undefined;
}

const CHUNK_BYTES = 1024 * 1024;
const POLL_MS = 10;

export function followFile(file: string, onBytes: (bytes: Buffer) => void): FileFollower {
  /** Set by finish(): the length to read up to. */
  let end: number | undefined;
  let abandoned = false;
  let wake: (() => void) | undefined;
  let identity: { dev: number; ino: number } | undefined;

  async function pause(): Promise<void> {
    const timer = new AbortController();
    await Promise.race([
      sleep(POLL_MS, undefined, { signal: timer.signal }).catch(() => {}),
      new Promise<void>((resolve) => (wake = resolve)),
    ]);
    timer.abort();
    wake = undefined;
  }

  async function open(): Promise<FileHandle | undefined> {
    for (;;) {
      if (abandoned) return undefined;
      const finishing = end !== undefined;
      try {
        const handle = await openRegularFile(file);
        const { dev, ino } = await handle.stat();
        identity = { dev, ino };
        return handle;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || finishing) throw err;
      }
      await pause();
    }
  }

  const reading = (async () => {
    const handle = await open();
    if (!handle) return;
    try {
      let position = 0;
      const buffer = Buffer.allocUnsafe(CHUNK_BYTES);
      for (;;) {
        if (abandoned) return;
        const finishing = end !== undefined;
        const room = finishing ? Math.min(CHUNK_BYTES, end! - position) : CHUNK_BYTES;
        if (room <= 0) return;
        const { bytesRead } = await handle.read(buffer, 0, room, position);
        if (bytesRead > 0) {
          position += bytesRead;
          onBytes(buffer.subarray(0, bytesRead));
        } else if (finishing) {
          return; // the file holds fewer bytes than its writer said
        }
        if (bytesRead < room && !finishing) await pause();
      }
    } finally {
      await handle.close();
    }
  })();
  // Seen by finish(); abandon() swallows it.
  reading.catch(() => {});

  return {
    async finish(length) {
      end = length;
      wake?.();
      await reading;
    },
    async abandon() {
      abandoned = true;
      wake?.();
      await reading.catch(() => {});
    },
    opened: () => identity,
  };
}
