import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/**
 * SQLite's WAL checkpoints, made in a worker thread on a connection of its own. Left to SQLite,
 * the connection whose COMMIT takes the WAL past 1000 pages checkpoints it inside that COMMIT:
 * copies the pages into the database file and fsyncs both files, on the event loop, while every
 * request waits; made less often, each waits longer (docs/benchmarks.md).
 * Here the worker looks every `intervalMs` whether another connection has committed since its
 * last look (PRAGMA data_version) and, if so, makes a PASSIVE checkpoint: it copies what no reader
 * still needs and never waits for, or blocks, a reader or the writer. The service's connection
 * keeps SQLite's own checkpoint as a backstop, at BACKSTOP_PAGES, for a worker that falls behind.
 * As durable as SQLite's own checkpoints: the worker's connection syncs the WAL before it copies
 * and the database file after (synchronous=FULL, SQLite's default for a connection).
 */
export interface Checkpointer {
  /** Stops after the checkpoint under way, if any; the last connection to close checkpoints what is left. */
  close(): Promise<void>;
}

/** The service's connection checkpoints by itself only past this many pages in the WAL (about 80 MB). */
export const BACKSTOP_PAGES = 20_000;
export const DEFAULT_CHECKPOINT_INTERVAL_MS = 200;

// CommonJS in the worker (eval: true), given the module's resolved path: the worker shares no module graph with this one.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file, { fileMustExist: true });
db.pragma('busy_timeout = 5000');
// The first look checkpoints whatever was committed before this connection opened.
let version;
const look = () => {
  const now = db.pragma('data_version', { simple: true });
  if (now === version) return;
  version = now;
  db.pragma('wal_checkpoint(PASSIVE)');
};
const stop = () => {
  clearInterval(timer);
  db.close();
  parentPort.close();
};
const timer = setInterval(() => {
  try {
    look();
  } catch (err) {
    parentPort.postMessage({ failed: String(err && err.message) });
    stop();
  }
}, workerData.intervalMs);
parentPort.once('message', stop);
`;

/** `onFailed`: the worker has stopped on an error (it makes no more checkpoints). */
export function startCheckpointer(
  file: string,
  options: { intervalMs: number; onFailed: (message: string) => void },
): Checkpointer {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const worker = new Worker(WORKER_SOURCE, {
    eval: true,
    workerData: { driver, file, intervalMs: options.intervalMs },
  });
  worker.on('message', (message: { failed: string }) => options.onFailed(message.failed));
  // A SqliteError thrown in the worker arrives as a plain object that keeps only its code.
  worker.on('error', (err: unknown) => {
    const { message, code } = (err ?? {}) as { message?: string; code?: string };
    options.onFailed(message ?? code ?? String(err));
  });
  // It must not keep the process alive by itself.
  worker.unref();
  const exited = new Promise((resolve) => worker.once('exit', resolve));
  return {
    async close() {
      worker.postMessage('close');
      await exited;
    },
  };
}
