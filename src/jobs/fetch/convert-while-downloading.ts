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
  const s = newState(ctx, convert, makeFifo, waiting);
  const onJobStop = () => {
    s.feedStop.abort();
    s.waker.wakeUp();
  };
  ctx.signal.addEventListener('abort', onJobStop, { once: true });
  return {
    stopDownload: s.stopDownload.signal,
    start() {
      s.startedEarly = s.ready === undefined;
      s.ready ??= prepare(s);
      // Reported by the copy, which then has the download converted whole; unused, it does not matter.
      s.ready.catch(() => {});
    },
    onGrowing() {
      if (s.downloadEnd === undefined) s.copy ??= copyToConverter(s);
      s.waker.wakeUp();
    },
    finish: (downloaded) => finish(s, downloaded),
    async close() {
      ctx.signal.removeEventListener('abort', onJobStop);
      s.downloadEnd ??= { file: null };
      await stopAll(s, NOT_NEEDED);
    },
    report: () => report(s),
  };
}

/** What the conversion alongside knows, shared by its parts below. */
interface State {
  ctx: FetchContext;
  convert: ConvertFn;
  makeFifo: MakeFifo;
  waiting: WaitingConversion | undefined;
  downloadDir: string;
  fifoPath: string;
  stopDownload: AbortController;
  stopConversion: AbortController;
  /** Aborted once the conversion has ended or the job stops: nothing more is written. */
  feedStop: AbortController;
  mode: 'undecided' | 'stream' | 'whole';
  /** The download step's end: its file when it succeeded, null when it did not. */
  downloadEnd: { file: Downloaded | null } | undefined;
  /** The FIFO made, and ffmpeg started on it unless the job stopped first. */
  ready: Promise<void> | undefined;
  startedEarly: boolean;
  conversion: Promise<Settled> | undefined;
  settled: Settled | undefined;
  /** When ffmpeg's run was asked for. */
  conversionAskedAt: number;
  /** When the first bytes were found streamable, with ffmpeg started: from then on they wait for its input's open. */
  conversionStarted: number;
  /** When ffmpeg's input was opened at both ends. */
  feedOpenedAt: number | undefined;
  conversionDuringMs: number | undefined;
  /** The FIFO is open at both ends: ffmpeg has been handed its input. */
  feeding: boolean;
  /** The copy read the whole file the download step reported, and closed the FIFO after it. */
  fedWhole: boolean;
  /** The FIFO is being closed: ffmpeg sees its input end from then on. */
  feedClosing: boolean;
  /** The conversion ended while its input was still open: by itself (the duration limit, or a failure). */
  endedByItself: boolean;
  copy: Promise<void> | undefined;
  waker: Waker;
}

function newState(ctx: FetchContext, convert: ConvertFn, makeFifo: MakeFifo, waiting?: WaitingConversion): State {
  return {
    ctx,
    convert,
    makeFifo,
    waiting,
    downloadDir: downloadFolder(ctx.workDir),
    fifoPath: waiting?.fifo ?? feedFifoPath(ctx.workDir),
    stopDownload: new AbortController(),
    stopConversion: new AbortController(),
    feedStop: new AbortController(),
    mode: 'undecided',
    downloadEnd: undefined,
    ready: undefined,
    startedEarly: false,
    conversion: undefined,
    settled: undefined,
    conversionAskedAt: 0,
    conversionStarted: 0,
    feedOpenedAt: undefined,
    conversionDuringMs: undefined,
    feeding: false,
    fedWhole: false,
    feedClosing: false,
    endedByItself: false,
    copy: undefined,
    waker: createWaker(),
  };
}

interface Waker {
  wakeUp(): void;
  nextWake(): Promise<void>;
}

/** A wake-up with no one waiting is kept for the next wait: none is lost between a check and the wait. */
function createWaker(): Waker {
  let wake: (() => void) | undefined;
  let woken = false;
  return {
    wakeUp() {
      const resolve = wake;
      wake = undefined;
      if (resolve) resolve();
      else woken = true;
    },
    nextWake: () =>
      new Promise<void>((resolve) => {
        if (woken) {
          woken = false;
          resolve();
        } else wake = resolve;
      }),
  };
}

function stopped(s: State): boolean {
  return s.ctx.signal.aborted || (s.downloadEnd !== undefined && s.downloadEnd.file === null);
}

async function prepare(s: State): Promise<void> {
  await (s.waiting ? s.waiting.ready : s.makeFifo(s.fifoPath));
  if (!stopped(s) && !s.stopConversion.signal.aborted) startConversion(s);
}

function startConversion(s: State): void {
  s.conversionAskedAt = performance.now();
  const stop = s.stopConversion.signal;
  const conversion = s.convert(s.waiting ? { started: s.waiting, stop } : { fifo: s.fifoPath, stop }).then(
    (outcome): Settled => ({ outcome }),
    (thrown: unknown): Settled => ({ thrown }),
  );
  s.conversion = conversion;
  void conversion.then((result) => {
    s.settled = result;
    const stoppedHere = s.stopConversion.signal.aborted;
    s.endedByItself = s.feeding && !s.feedClosing && !stoppedHere;
    s.feedStop.abort();
    if (s.downloadEnd === undefined && !stoppedHere) {
      if (s.mode === 'stream') s.conversionDuringMs = Math.round(performance.now() - s.conversionStarted);
      // A conversion that failed stops the download (one that failed unfed could not start);
      // one that ended early (the duration limit) lets it finish, so that the download's own
      // checks still decide first.
      if ('outcome' in result && !result.outcome.ok) s.stopDownload.abort(result.outcome.error);
    }
    s.waker.wakeUp();
  });
}

/** The copy: the download's file, once it says it can be streamed, into ffmpeg's FIFO as it grows. */
async function copyToConverter(s: State): Promise<void> {
  let source: FileHandle | undefined;
  let sink: Socket | undefined;
  try {
    source = await openDownload(s);
    if (source === undefined) return;
    const prefix = await sniff(s, source);
    if (prefix === undefined) return;
    await (s.ready ??= prepare(s));
    if (stopped(s) || s.conversion === undefined || s.settled !== undefined) return;
    s.mode = 'stream';
    s.conversionStarted = performance.now();
    sink = await openFeed(s.fifoPath, s.feedStop.signal);
    if (sink === undefined) return;
    s.feedOpenedAt = performance.now();
    s.feeding = true;
    await feed(s, source, sink, prefix);
  } catch (err) {
    s.ctx.log.warn({ err }, 'handing the download to the converter failed');
    if (s.mode === 'stream') {
      s.stopDownload.abort(COPY_FAILED);
      s.stopConversion.abort(COPY_FAILED);
    } else s.mode = 'whole';
  } finally {
    // ffmpeg must not see its input end unless the copy gave it all of it: stopped first (or
    // not started, when its FIFO is still being made).
    if (!s.fedWhole && s.settled === undefined) {
      await stopConversionAndWait(s, NOT_NEEDED);
    }
    s.feedClosing = true;
    sink?.destroy();
    await source?.close().catch(() => {});
    if (s.mode === 'undecided') s.mode = 'whole';
  }
}

/** The download's file, once it is there; undefined when the download ended without one or the file is not a plain file. */
async function openDownload(s: State): Promise<FileHandle | undefined> {
  for (;;) {
    if (stopped(s)) return undefined;
    const names = (await fs.readdir(s.downloadDir)).filter(isDownloadFile);
    if (names.length === 1) {
      // The download's file is what yt-dlp left: anything but a regular file is not read.
      return await openRegularFile(path.join(s.downloadDir, names[0]!)).catch((err: unknown) => {
        if (err instanceof NotRegularFile) return undefined;
        throw err;
      });
    }
    if (s.downloadEnd !== undefined) return undefined;
    await s.waker.nextWake();
  }
}

/**
 * The download's first bytes, once they say it can be streamed; undefined when they cannot (or
 * the download stopped). A download that ended first is still streamed, whole: ffmpeg, started
 * early, is waiting for it.
 */
async function sniff(s: State, source: FileHandle): Promise<Buffer | undefined> {
  let prefix = Buffer.alloc(0);
  const buf = Buffer.allocUnsafe(COPY_CHUNK_BYTES);
  for (;;) {
    const verdict = streamableContainer(prefix);
    if (verdict === 'stream') return prefix;
    if (verdict === 'whole' || stopped(s)) return undefined;
    const { bytesRead } = await source.read(buf, 0, buf.length, prefix.length);
    if (bytesRead > 0) prefix = Buffer.concat([prefix, buf.subarray(0, bytesRead)]);
    else if (s.downloadEnd !== undefined) return undefined;
    else await s.waker.nextWake();
  }
}

/**
 * The FIFO, opened for writing once ffmpeg has opened it for reading, and checked to be one. The
 * open is non-blocking: it fails (ENXIO) while ffmpeg has not opened its end, and is tried again
 * every FEED_OPEN_POLL_MS. A blocking open would hold one of libuv's pool threads until then, or
 * for good if ffmpeg never came; a read-write open would return at once, but a short download
 * written and closed before ffmpeg opened its end would be lost with the FIFO's last
 * descriptor, and ffmpeg would wait for a writer. Undefined when the conversion ended or the job
 * stopped first (`feedStop`).
 */
async function openFeed(fifoPath: string, feedStop: AbortSignal): Promise<Socket | undefined> {
  let fd: number | undefined;
  while (fd === undefined) {
    if (feedStop.aborted) return undefined;
    try {
      fd = await promisify(openFd)(fifoPath, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK | fsConstants.O_NOFOLLOW);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENXIO') throw err;
      await sleep(FEED_OPEN_POLL_MS, undefined, { signal: feedStop }).catch(() => {});
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
  if (feedStop.aborted) {
    sink.destroy();
    return undefined;
  }
  return sink;
}

/** Copies the file into the FIFO as it grows; closes it after the last byte once the download step succeeded. */
async function feed(s: State, source: FileHandle, sink: Socket, prefix: Buffer): Promise<void> {
  if (!(await write(sink, prefix, s.feedStop.signal))) return;
  let position = prefix.length;
  const buf = Buffer.allocUnsafe(COPY_CHUNK_BYTES);
  for (;;) {
    if (stopped(s) || s.feedStop.signal.aborted) return;
    const { bytesRead } = await source.read(buf, 0, buf.length, position);
    if (bytesRead > 0) {
      position += bytesRead;
      if (!(await write(sink, buf.subarray(0, bytesRead), s.feedStop.signal))) return;
      continue;
    }
    const file = s.downloadEnd?.file;
    if (file) {
      // The file the download step reports, whole: anything else is converted again, whole.
      const same = (await source.stat()).size === position && file.bytes === position;
      if (!same || path.resolve(file.path) !== path.join(s.downloadDir, path.basename(file.path))) return;
      // Every write has been taken by the pipe: closing it (in copyToConverter) is ffmpeg's end of input.
      s.fedWhole = true;
      return;
    }
    if ((await source.stat()).size < position) return;
    await s.waker.nextWake();
  }
}

/** Writes a chunk; false when the conversion ended or the job stopped (`feedStop`) before it was taken. */
function write(sink: Socket, chunk: Buffer, feedStop: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (feedStop.aborted) return resolve(false);
    const done = (ok: boolean) => {
      feedStop.removeEventListener('abort', onStop);
      resolve(ok);
    };
    const onStop = () => done(false);
    feedStop.addEventListener('abort', onStop, { once: true });
    sink.write(chunk, (err) => done(!err && !feedStop.aborted));
  });
}

/** Stops ffmpeg, or keeps it from starting while its FIFO is being made, and waits for its end. */
async function stopConversionAndWait(s: State, reason: JobError): Promise<void> {
  s.stopConversion.abort(reason);
  await s.ready?.catch(() => {});
  await s.conversion;
  // The converter started before the job, never handed to the conversion: stopped all the same.
  if (s.waiting && s.conversion === undefined) {
    s.waiting.stop();
    await s.waiting.run.catch(() => {});
  }
}

async function stopAll(s: State, reason: JobError): Promise<void> {
  s.feedStop.abort();
  s.waker.wakeUp();
  await stopConversionAndWait(s, reason);
  await s.copy;
}

/** ConversionAlongside.finish. */
async function finish(s: State, downloaded: Outcome<Downloaded | null>): Promise<Outcome<Converted> | null> {
  s.downloadEnd = { file: downloaded.ok ? downloaded.value : null };
  if (s.mode === 'stream' && s.conversionDuringMs === undefined)
    s.conversionDuringMs = Math.round(performance.now() - s.conversionStarted);
  s.waker.wakeUp();
  if (s.downloadEnd.file === null) {
    await stopAll(s, NOT_NEEDED);
    return null;
  }
  // A download that ended before any progress line is handed over whole.
  await (s.copy ??= copyToConverter(s));
  if (s.mode !== 'stream' || s.conversion === undefined) {
    // Not streamed: ffmpeg, started early, is stopped unfed.
    s.mode = 'whole';
    await stopAll(s, NOT_NEEDED);
    return null;
  }
  const result = await s.conversion;
  if ('thrown' in result) throw result.thrown;
  // Read to its end, or ended by itself while reading (the duration limit, a failure): its outcome stands.
  if (s.fedWhole || s.endedByItself) return result.outcome;
  s.mode = 'whole';
  return null;
}

/** ConversionAlongside.report. */
function report(s: State): ReturnType<ConversionAlongside['report']> {
  return {
    converter_input: s.mode === 'stream' ? 'stream' : 'whole',
    converter_start:
      s.conversion === undefined
        ? 'none'
        : s.waiting
          ? 'before_job'
          : s.startedEarly
            ? 'before_download'
            : 'at_first_bytes',
    ...(s.conversionDuringMs !== undefined ? { conversion_during_download_ms: s.conversionDuringMs } : {}),
    ...(s.feedOpenedAt !== undefined
      ? {
          converter_ready_ms: Math.round(s.feedOpenedAt - s.conversionAskedAt),
          feed_wait_ms: Math.round(s.feedOpenedAt - s.conversionStarted),
        }
      : {}),
  };
}
