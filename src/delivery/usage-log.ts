import { closeSync, constants, fstatSync, ftruncateSync, openSync, readSync } from 'node:fs';
import type { Logger } from '../logger.js';

/**
 * The uses nginx makes of content without the app: it answers signed URLs, and keys whose yes from
 * the app it remembers, alone, and writes one line per artifact it served to a usage log (`<unix
 * seconds with ms> <content id>`, see nginx/templates/default.conf.template), which this reads so
 * that content served that way stays hot for least-recently-used eviction.
 *
 * Each drain reads what was appended since the last one and, when it owns the file, empties it
 * (nginx appends with O_APPEND, so it carries on at the new end): the log stays a few seconds
 * long instead of growing for ever. A line nginx appends between the read and the truncation is
 * lost; that costs one missed use of content being served at that very moment, which its next
 * request records. When the file is not the app's to write (created by nginx as root), the
 * reader only follows it, and the operator rotates it like any nginx log: a new file (another
 * inode) or a shorter one is read from its start. The reader creates the file when it is missing,
 * so that the app, started before nginx, owns it.
 */
export interface UsageLogReader {
  /** Reads new lines and reports their uses; returns how many lines it read. */
  drain(): number;
}

const LINE = /^([0-9]{1,12}(?:\.[0-9]{1,3})?) ([0-9a-f]{64})$/;
// One drain reads at most this much; the rest waits for the next (every second).
const MAX_DRAIN_BYTES = 8 * 1024 * 1024;
const CHUNK_BYTES = 256 * 1024;

export function createUsageLogReader(deps: {
  file: string;
  /** A use of content at a time (ms since the epoch). */
  onUse: (contentId: string, atMs: number) => void;
  /** How many lines of one drain were not usage lines (skipped). */
  onMalformed?: (count: number) => void;
  /** The file could not be read or emptied; reported once per kind of failure. */
  onError?: (err: NodeJS.ErrnoException, action: 'read' | 'truncate') => void;
}): UsageLogReader {
  let inode: number | undefined;
  let position = 0;
  let partial = '';
  let canTruncate = true;
  const reported = new Set<string>();
  const report = (err: NodeJS.ErrnoException, action: 'read' | 'truncate') => {
    const key = `${action}:${err.code}`;
    if (reported.has(key)) return;
    reported.add(key);
    deps.onError?.(err, action);
  };

  function open(): number | undefined {
    if (canTruncate) {
      try {
        return openSync(deps.file, constants.O_RDWR | constants.O_CREAT | constants.O_NOFOLLOW, 0o644);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'EACCES' && code !== 'EPERM' && code !== 'EROFS') {
          report(err as NodeJS.ErrnoException, 'read');
          return undefined;
        }
        canTruncate = false;
        report(err as NodeJS.ErrnoException, 'truncate');
      }
    }
    try {
      return openSync(deps.file, constants.O_RDONLY | constants.O_NOFOLLOW);
    } catch (err) {
      // Not there (yet): nginx has served nothing alone since it started.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') report(err as NodeJS.ErrnoException, 'read');
      return undefined;
    }
  }

  let malformed = 0;
  function handle(line: string): boolean {
    const match = LINE.exec(line);
    if (!match) {
      malformed++;
      return false;
    }
    deps.onUse(match[2]!, Math.round(Number(match[1]) * 1000));
    return true;
  }

  return {
    drain() {
      const fd = open();
      if (fd === undefined) return 0;
      let lines = 0;
      malformed = 0;
      try {
        const info = fstatSync(fd);
        let size = info.size;
        if (info.ino !== inode || size < position) {
          // Another file, or one emptied or rotated by copy-and-truncate: read it from its start.
          inode = info.ino;
          position = 0;
          partial = '';
        }
        const end = Math.min(size, position + MAX_DRAIN_BYTES);
        const buffer = Buffer.allocUnsafe(CHUNK_BYTES);
        while (position < end) {
          const read = readSync(fd, buffer, 0, Math.min(CHUNK_BYTES, end - position), position);
          if (read === 0) break;
          position += read;
          const text = partial + buffer.toString('latin1', 0, read);
          const parts = text.split('\n');
          partial = parts.pop()!;
          for (const part of parts) if (handle(part)) lines++;
        }
        // Everything read, ending in a whole line, and nothing appended meanwhile: start afresh.
        size = fstatSync(fd).size;
        if (canTruncate && partial === '' && position === size && size > 0) {
          try {
            ftruncateSync(fd, 0);
            position = 0;
          } catch (err) {
            canTruncate = false;
            report(err as NodeJS.ErrnoException, 'truncate');
          }
        }
      } catch (err) {
        report(err as NodeJS.ErrnoException, 'read');
      } finally {
        closeSync(fd);
      }
      if (malformed > 0) deps.onMalformed?.(malformed);
      return lines;
    },
  };
}

/** NGINX_USAGE_LOG's reader, opened by the store's upkeep, its skipped lines and failures logged; undefined when unset. */
export function nginxUsageLog(
  file: string | null,
  log: Pick<Logger, 'warn'>,
): ((onUse: (contentId: string, atMs: number) => void) => UsageLogReader) | undefined {
  if (!file) return undefined;
  return (onUse) =>
    createUsageLogReader({
      file,
      onUse,
      onMalformed: (lines) =>
        log.warn({ file, lines }, 'nginx usage log: skipped lines that are not "<time> <content id>"'),
      onError: (err, action) => log.warn({ file, code: err.code, action }, 'nginx usage log: cannot read or empty it'),
    });
}
