import { close as closeFd, constants as fsConstants, fstat, open as openFd } from 'node:fs';
import fs, { type FileHandle } from 'node:fs/promises';
import { Socket } from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { jobError, type JobError } from '../../job-errors.js';
import { NotRegularFile, openRegularFile } from '../../tools/regular-file.js';
import { streamableContainer } from '../../tools/streamable-container.js';
import type { MakeFifo } from '../../tools/fifo.js';
import type { Converted, StreamedInput } from './convert.js';
import type { Downloaded } from './download.js';
import type { FetchContext, Outcome } from './step.js';
import type { WaitingConversion } from './waiting-converter.js';
import { downloadFolder, feedFifoPath, isDownloadFile } from './work-folder.js';

/**
 * The conversion started while the download runs, for containers ffmpeg reads from first byte to
 * last (../../tools/streamable-container.ts, told from the download's first bytes): ffmpeg reads
 * a FIFO in the job's folder (./work-folder.ts) (through its async reader: ../../tools/ffmpeg.ts), and this copies
 * the download into it as it grows (woken by each of yt-dlp's progress lines). ffmpeg is started
 * on the FIFO before the download (`start`), so that its own start (some 60 ms of loading its
 * libraries, and its sandbox's) overlaps yt-dlp's extraction; or, given `waiting`, the ffmpeg
 * started before the job (./waiting-converter.ts) is used, with its FIFO. A download that is not
 * to be streamed stops it unfed. The FIFO is closed, and ffmpeg sees the input's end, only once the
 * download step has succeeded: until then a download that fails (cut off, too large, stalled,
 * refused, canceled) stops ffmpeg, which has never seen an end of its input, and the job fails
 * with the download's error. A conversion that fails first stops the download (`stopDownload`),
 * and the job fails with the conversion's error. A conversion that ends early (cut at the
 * duration limit) keeps its result, and the download its own checks. Any other container, a file
 * that changes under the copy, or an error of the copy before ffmpeg starts leaves the download to
 * be converted whole, as before.
 *
 * Memory is one buffer of COPY_CHUNK_BYTES and the sniffed prefix (at most MAX_SNIFF_BYTES),
 * whatever the download's size.
 */
export interface ConversionAlongside {
  /**
   * Makes the FIFO and starts ffmpeg on it, waiting for its input: called before the download,
   * unless the download is likely to be converted whole. Otherwise both are made once the first
   * bytes say the download can be streamed.
   */
  start(): void;
  /** DownloadDeps.onGrowing: the file may have grown. */
  onGrowing(): void;
  /** DownloadDeps.stop: aborted with the conversion's error when it fails while the download runs. */
  readonly stopDownload: AbortSignal;
  /**
   * Given the download step's outcome, once it has ended: the conversion's outcome when the
   * conversion ran alongside and read the whole download; null when the download is to be
   * converted whole (or has failed: everything alongside is stopped).
   */
  finish(downloaded: Outcome<Downloaded | null>): Promise<Outcome<Converted> | null>;
  /** Stops the copy and ffmpeg, if still running, and waits for both; for every way out of the task. */
  close(): Promise<void>;
  /**
   * For the 'fetch steps' line: how the conversion read its input, and its ms within the download
   * step; when it was fed, the time from ffmpeg's run asked for (or, started before the job, taken)
   * to its input open at both ends, which also waits for the download's first bytes
   * (converter_ready), and how long those first bytes waited for ffmpeg (feed_wait).
   */
  report(): {
    converter_input: 'stream' | 'whole';
    converter_start: 'before_job' | 'before_download' | 'at_first_bytes' | 'none';
    conversion_during_download_ms?: number;
    converter_ready_ms?: number;
    feed_wait_ms?: number;
  };
}

export type ConvertFn = (input: StreamedInput) => Promise<Outcome<Converted>>;

const COPY_CHUNK_BYTES = 256 * 1024;
/** How often the FIFO's open is tried again while ffmpeg has not opened its end (it is still starting). */
const FEED_OPEN_POLL_MS = 2;
const COPY_FAILED: JobError = jobError('internal_error');
/** ffmpeg's reason to stop when its result is no longer wanted: never a job's error. */
const NOT_NEEDED: JobError = jobError('internal_error', { detail: 'The conversion was not needed.' });

type Settled = { outcome: Outcome<Converted> } | { thrown: unknown };

export function convertWhileDownloading(
  ctx: FetchContext,
  convert: ConvertFn,
  makeFifo: MakeFifo,
  waiting?: WaitingConversion,
): ConversionAlongside {
  const downloadDir = downloadFolder(ctx.workDir);
  const fifoPath = waiting?.fifo ?? feedFifoPath(ctx.workDir);
  const stopDownload = new AbortController();
  const stopConversion = new AbortController();
  let mode: 'undecided' | 'stream' | 'whole' = 'undecided';
  /** The download step's end: its file when it succeeded, null when it did not. */
  let downloadEnd: { file: Downloaded | null } | undefined;
  /** The FIFO made, and ffmpeg started on it unless the job stopped first. */
  let ready: Promise<void> | undefined;
  let startedEarly = false;
  let conversion: Promise<Settled> | undefined;
  let settled: Settled | undefined;
  /** Aborted once the conversion has ended or the job stops: nothing more is written. */
  const feedStop = new AbortController();
  /** When ffmpeg's run was asked for. */
  let conversionAskedAt = 0;
  /** When the first bytes were found streamable, with ffmpeg started: from then on they wait for its input's open. */
  let conversionStarted = 0;
  /** When ffmpeg's input was opened at both ends. */
  let feedOpenedAt: number | undefined;
  let conversionDuringMs: number | undefined;
  /** The FIFO is open at both ends: ffmpeg has been handed its input. */
  let feeding = false;
  /** The copy read the whole file the download step reported, and closed the FIFO after it. */
  let fedWhole = false;
  /** The FIFO is being closed: ffmpeg sees its input end from then on. */
  let feedClosing = false;
  /** The conversion ended while its input was still open: by itself (the duration limit, or a failure). */
  let endedByItself = false;
  let copy: Promise<void> | undefined;
  // A wake-up with no one waiting is kept for the next wait: none is lost between a check and the wait.
  let wake: (() => void) | undefined;
  let woken = false;
  const wakeUp = () => {
    const resolve = wake;
    wake = undefined;
    if (resolve) resolve();
    else woken = true;
  };
  const nextWake = () =>
    new Promise<void>((resolve) => {
      if (woken) {
        woken = false;
        resolve();
      } else wake = resolve;
    });
  const onJobStop = () => {
    feedStop.abort();
    wakeUp();
  };
  ctx.signal.addEventListener('abort', onJobStop, { once: true });
  const stopped = () => ctx.signal.aborted || (downloadEnd !== undefined && downloadEnd.file === null);

  async function prepare(): Promise<void> {
    await (waiting ? waiting.ready : makeFifo(fifoPath));
    if (!stopped() && !stopConversion.signal.aborted) startConversion();
  }

  function startConversion(): void {
    conversionAskedAt = performance.now();
    const stop = stopConversion.signal;
    conversion = convert(waiting ? { started: waiting, stop } : { fifo: fifoPath, stop }).then(
      (outcome) => ({ outcome }),
      (thrown: unknown) => ({ thrown }),
    );
    void conversion.then((result) => {
      settled = result;
      const stoppedHere = stopConversion.signal.aborted;
      endedByItself = feeding && !feedClosing && !stoppedHere;
      feedStop.abort();
      if (downloadEnd === undefined && !stoppedHere) {
        if (mode === 'stream') conversionDuringMs = Math.round(performance.now() - conversionStarted);
        // A conversion that failed stops the download (one that failed unfed could not start);
        // one that ended early (the duration limit) lets it finish, so that the download's own
        // checks still decide first.
        if ('outcome' in result && !result.outcome.ok) stopDownload.abort(result.outcome.error);
      }
      wakeUp();
    });
  }

  async function run(): Promise<void> {
    let source: FileHandle | undefined;
    let sink: Socket | undefined;
    try {
      source = await openDownload();
      if (source === undefined) return;
      const prefix = await sniff(source);
      if (prefix === undefined) return;
      await (ready ??= prepare());
      if (stopped() || conversion === undefined || settled !== undefined) return;
      mode = 'stream';
      conversionStarted = performance.now();
      sink = await openFeed();
      if (sink === undefined) return;
      feedOpenedAt = performance.now();
      feeding = true;
      await feed(source, sink, prefix);
    } catch (err) {
      ctx.log.warn({ err }, 'handing the download to the converter failed');
      if (mode === 'stream') {
        stopDownload.abort(COPY_FAILED);
        stopConversion.abort(COPY_FAILED);
      } else mode = 'whole';
    } finally {
      // ffmpeg must not see its input end unless the copy gave it all of it: stopped first (or
      // not started, when its FIFO is still being made).
      if (!fedWhole && settled === undefined) {
        await stopConversionAndWait(NOT_NEEDED);
      }
      feedClosing = true;
      sink?.destroy();
      await source?.close().catch(() => {});
      if (mode === 'undecided') mode = 'whole';
    }
  }

  /** The download's file, once it is there; undefined when the download ended without one or the file is not a plain file. */
  async function openDownload(): Promise<FileHandle | undefined> {
    for (;;) {
      if (stopped()) return undefined;
      const names = (await fs.readdir(downloadDir)).filter(isDownloadFile);
      if (names.length === 1) {
        // The download's file is what yt-dlp left: anything but a regular file is not read.
        return await openRegularFile(path.join(downloadDir, names[0]!)).catch((err: unknown) => {
          if (err instanceof NotRegularFile) return undefined;
          throw err;
        });
      }
      if (downloadEnd !== undefined) return undefined;
      await nextWake();
    }
  }

  /**
   * The download's first bytes, once they say it can be streamed; undefined when they cannot (or
   * the download stopped). A download that ended first is still streamed, whole: ffmpeg, started
   * early, is waiting for it.
   */
  async function sniff(source: FileHandle): Promise<Buffer | undefined> {
    let prefix = Buffer.alloc(0);
    const buf = Buffer.allocUnsafe(COPY_CHUNK_BYTES);
    for (;;) {
      const verdict = streamableContainer(prefix);
      if (verdict === 'stream') return prefix;
      if (verdict === 'whole' || stopped()) return undefined;
      const { bytesRead } = await source.read(buf, 0, buf.length, prefix.length);
      if (bytesRead > 0) prefix = Buffer.concat([prefix, buf.subarray(0, bytesRead)]);
      else if (downloadEnd !== undefined) return undefined;
      else await nextWake();
    }
  }

  /**
   * The FIFO, opened for writing once ffmpeg has opened it for reading, and checked to be one. The
   * open is non-blocking: it fails (ENXIO) while ffmpeg has not opened its end, and is tried again
   * every FEED_OPEN_POLL_MS. A blocking open would hold one of libuv's pool threads until then, or
   * for good if ffmpeg never came; a read-write open would return at once, but a short download
   * written and closed before ffmpeg opened its end would be lost with the FIFO's last
   * descriptor, and ffmpeg would wait for a writer. Undefined when the conversion ended or the job
   * stopped first.
   */
  async function openFeed(): Promise<Socket | undefined> {
    let fd: number | undefined;
    while (fd === undefined) {
      if (feedStop.signal.aborted) return undefined;
      try {
        fd = await promisify(openFd)(fifoPath, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK | fsConstants.O_NOFOLLOW);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENXIO') throw err;
        await sleep(FEED_OPEN_POLL_MS, undefined, { signal: feedStop.signal }).catch(() => {});
      }
    }
    try {
      if (!(await promisify(fstat)(fd)).isFIFO()) throw new Error('the feed is not a FIFO');
    } catch (err) {
      closeFd(fd, () => {});
      throw err;
    }
    // A pipe handle on the event loop, owning the descriptor: writes wait for ffmpeg to read, never in a pool thread.
    const sink = new Socket({ fd, readable: false, writable: true });
    sink.on('error', () => {});
    if (feedStop.signal.aborted) {
      sink.destroy();
      return undefined;
    }
    return sink;
  }

  /** Copies the file into the FIFO as it grows; closes it after the last byte once the download step succeeded. */
  async function feed(source: FileHandle, sink: Socket, prefix: Buffer): Promise<void> {
    if (!(await write(sink, prefix))) return;
    let position = prefix.length;
    const buf = Buffer.allocUnsafe(COPY_CHUNK_BYTES);
    for (;;) {
      if (stopped() || feedStop.signal.aborted) return;
      const { bytesRead } = await source.read(buf, 0, buf.length, position);
      if (bytesRead > 0) {
        position += bytesRead;
        if (!(await write(sink, buf.subarray(0, bytesRead)))) return;
        continue;
      }
      const file = downloadEnd?.file;
      if (file) {
        // The file the download step reports, whole: anything else is converted again, whole.
        const same = (await source.stat()).size === position && file.bytes === position;
        if (!same || path.resolve(file.path) !== path.join(downloadDir, path.basename(file.path))) return;
        // Every write has been taken by the pipe: closing it (in run) is ffmpeg's end of input.
        fedWhole = true;
        return;
      }
      if ((await source.stat()).size < position) return;
      await nextWake();
    }
  }

  /** Writes a chunk; false when the conversion ended or the job stopped before it was taken. */
  function write(sink: Socket, chunk: Buffer): Promise<boolean> {
    return new Promise((resolve) => {
      if (feedStop.signal.aborted) return resolve(false);
      const done = (ok: boolean) => {
        feedStop.signal.removeEventListener('abort', onStop);
        resolve(ok);
      };
      const onStop = () => done(false);
      feedStop.signal.addEventListener('abort', onStop, { once: true });
      sink.write(chunk, (err) => done(!err && !feedStop.signal.aborted));
    });
  }

  /** Stops ffmpeg, or keeps it from starting while its FIFO is being made, and waits for its end. */
  async function stopConversionAndWait(reason: JobError): Promise<void> {
    stopConversion.abort(reason);
    await ready?.catch(() => {});
    await conversion;
    // The converter started before the job, never handed to the conversion: stopped all the same.
    if (waiting && conversion === undefined) {
      waiting.stop();
      await waiting.run.catch(() => {});
    }
  }

  async function stopAll(reason: JobError): Promise<void> {
    feedStop.abort();
    wakeUp();
    await stopConversionAndWait(reason);
    await copy;
  }

  return {
    stopDownload: stopDownload.signal,
    start() {
      startedEarly = ready === undefined;
      ready ??= prepare();
      // Reported by the copy, which then has the download converted whole; unused, it does not matter.
      ready.catch(() => {});
    },
    onGrowing() {
      if (downloadEnd === undefined) copy ??= run();
      wakeUp();
    },
    async finish(downloaded) {
      downloadEnd = { file: downloaded.ok ? downloaded.value : null };
      if (mode === 'stream' && conversionDuringMs === undefined)
        conversionDuringMs = Math.round(performance.now() - conversionStarted);
      wakeUp();
      if (downloadEnd.file === null) {
        await stopAll(NOT_NEEDED);
        return null;
      }
      // A download that ended before any progress line is handed over whole.
      await (copy ??= run());
      if (mode !== 'stream' || conversion === undefined) {
        // Not streamed: ffmpeg, started early, is stopped unfed.
        mode = 'whole';
        await stopAll(NOT_NEEDED);
        return null;
      }
      const result = await conversion;
      if ('thrown' in result) throw result.thrown;
      // Read to its end, or ended by itself while reading (the duration limit, a failure): its outcome stands.
      if (fedWhole || endedByItself) return result.outcome;
      mode = 'whole';
      return null;
    },
    async close() {
      ctx.signal.removeEventListener('abort', onJobStop);
      downloadEnd ??= { file: null };
      await stopAll(NOT_NEEDED);
    },
    report() {
      return {
        converter_input: mode === 'stream' ? 'stream' : 'whole',
        converter_start:
          conversion === undefined
            ? 'none'
            : waiting
              ? 'before_job'
              : startedEarly
                ? 'before_download'
                : 'at_first_bytes',
        ...(conversionDuringMs !== undefined ? { conversion_during_download_ms: conversionDuringMs } : {}),
        ...(feedOpenedAt !== undefined
          ? {
              converter_ready_ms: Math.round(feedOpenedAt - conversionAskedAt),
              feed_wait_ms: Math.round(feedOpenedAt - conversionStarted),
            }
          : {}),
      };
    },
  };
}
