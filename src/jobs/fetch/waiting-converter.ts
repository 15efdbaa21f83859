import fs from 'node:fs/promises';
import type { Logger } from '../../logger.js';
import type { Sandbox, SandboxedResult } from '../../sandbox/sandbox.js';
import type { MakeFifo } from '../../tools/fifo.js';
import { conversionArgs, type StartedConversion } from './convert.js';
import { toolRunLimits, type FetchLimits } from './step.js';
import { feedFifoPath, newWavPath, waitingConverterFolder } from './work-folder.js';

/**
 * A converter started before its job (CONVERTER_WAITING=on): one ffmpeg per node waits between
 * jobs, blocked in the open of its FIFO, in a folder of its own under the work folder, for the
 * next job whose download is to be streamed (./convert-while-downloading.ts). Its start (some
 * 70 ms of CPU, loading its libraries, and its sandbox's) is then out of that job: the download's
 * first bytes do not wait for it, and it does not take the cores from yt-dlp's extraction.
 *
 * The job that takes it owns it from then on: the job's stops stop it, its task removes the
 * folder. The next one starts once that job has ended (`replenish`), so that its start does not
 * compete with a job. One that ends while waiting (the resident sandbox restarted under it, say)
 * is dropped, and the next job starts its own ffmpeg, as without this.
 *
 * Folders are named after their node (./work-folder.ts): at start-up, a dead node's is removed and
 * its ffmpeg killed (../../ops/startup.ts), a live neighbour's left alone.
 */
export interface WaitingConversion extends StartedConversion {
  /** Its folder: the FIFO it reads and the WAV it writes are in it. */
  folder: string;
  /** The FIFO made: the run is started, its input may be opened. Rejects when the folder or the FIFO could not be made. */
  ready: Promise<void>;
  /** ffmpeg's run; its result is checked by the job that takes it. */
  run: Promise<SandboxedResult>;
}

export interface ConverterWaiting {
  /** The converter waiting, for the job that takes it; undefined when none is. */
  take(): WaitingConversion | undefined;
  /** Starts one to wait for the next job, unless one is waiting already or the node is stopping. */
  replenish(): void;
  /** Stops the one waiting and removes its folder; none is started after. */
  close(): Promise<void>;
}

export interface ConverterWaitingDeps {
  nodeId: string;
  workDir: string;
  sandbox: Pick<Sandbox, 'mode' | 'run'>;
  /** Whether each tool run sees a root of its own (TOOL_MOUNT_VIEW); 'netns' mode only. */
  mountView: boolean;
  ffmpegPath: string;
  limits: FetchLimits;
  makeFifo: MakeFifo;
  log: Logger;
}

export function createConverterWaiting(deps: ConverterWaitingDeps): ConverterWaiting {
  let waiting: { conversion: WaitingConversion; ended: boolean } | undefined;
  let closed = false;

  function start(): { conversion: WaitingConversion; ended: boolean } {
    const folder = waitingConverterFolder(deps.workDir, deps.nodeId);
    const fifo = feedFifoPath(folder);
    const wavPath = newWavPath(folder);
    const stopping = new AbortController();
    const ready = (async () => {
      await fs.mkdir(deps.workDir, { recursive: true });
      await fs.mkdir(folder, { mode: 0o700 });
      await deps.makeFifo(fifo);
    })();
    const { limits } = deps;
    const run = ready.then(() =>
      deps.sandbox.run({
        command: deps.ffmpegPath,
        args: conversionArgs(limits, { input: fifo, fedThroughFifo: true, output: wavPath }),
        cwd: folder,
        signal: stopping.signal,
        network: 'none',
        limits: toolRunLimits(limits, limits.maxOutputBytes),
        mountView: deps.sandbox.mode === 'netns' && deps.mountView,
      }),
    );
    const entry = {
      conversion: { folder, fifo, wavPath, ready, run, stop: () => stopping.abort() },
      ended: false,
    };
    // Ended while waiting (not taken): dropped; the next job starts its own ffmpeg.
    void run
      .catch((err: unknown) => deps.log.warn({ err }, 'the waiting converter could not be started'))
      .finally(() => {
        entry.ended = true;
        if (waiting === entry) {
          waiting = undefined;
          void drop(entry.conversion);
        }
      });
    return entry;
  }

  async function drop(conversion: WaitingConversion): Promise<void> {
    conversion.stop();
    await conversion.run.catch(() => {});
    await fs.rm(conversion.folder, { recursive: true, force: true }).catch(() => {});
  }

  return {
    take() {
      const taken = waiting;
      waiting = undefined;
      return taken && !taken.ended ? taken.conversion : undefined;
    },
    replenish() {
      if (closed || waiting !== undefined) return;
      waiting = start();
    },
    async close() {
      closed = true;
      const left = waiting;
      waiting = undefined;
      if (left) await drop(left.conversion);
    },
  };
}
