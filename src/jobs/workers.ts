import type { Database } from '../db/database.js';
import type { GuardSession, SessionOptions } from '../egress/guard.js';
import type { Logger } from '../logger.js';
import type { ResidentSandbox } from '../sandbox/resident.js';
import type { ContentStore } from '../store/content-store.js';
import { KEY_ALLOWANCE_WINDOW_MS } from '../store/key-allowance.js';
import type { MakeFifo } from '../tools/fifo.js';
import { createListCollection, type ListingLimits } from './collection/list-entries.js';
import { createCollectionRunner, type EntryTokens } from './collection/run.js';
import { createFetchTask, type FetchTaskDeps } from './fetch/task.js';
import type { SubmitDeps } from './submit.js';
import { createConverterWaiting } from './fetch/waiting-converter.js';
import type { Ended } from './queue.js';
import { createWorkerPool, type WorkerPool } from './worker-pool.js';

/** The part of the configuration (src/config.ts) the workers use. */
export interface WorkersConfig {
  workDir: string;
  confinement: { mountView: boolean };
  fetchTimeoutMs: number;
  metadataTimeoutMs: number;
  /** PLAYLIST_LISTING_MAX_BYTES and PLAYLIST_LISTING_TIMEOUT_S. */
  playlistListing: ListingLimits;
  downloadStall: FetchTaskDeps['limits']['downloadStall'];
  maxDownloadBytes: number;
  maxOutputBytes: number;
  maxDurationS: number;
  toolLimits: FetchTaskDeps['limits']['tool'];
  converterWaiting: boolean;
  ytdlpCookiesFile: string | undefined;
  audioAnalysis: NonNullable<FetchTaskDeps['audioAnalysis']>;
  storeBytesPerKeyPerDay: number | null;
  workerConcurrency: number;
  jobLeaseMs: number;
  maxAttempts: number;
}

export interface WorkersDeps {
  database: Database;
  store: ContentStore;
  /** The tools' paths, yt-dlp by its real path. */
  tools: { ytdlp: string; ffmpeg: string };
  sandbox: ResidentSandbox;
  openEgressSession: (label: string, options?: SessionOptions) => GuardSession;
  /** Whether the tools can be confined now: no job starts while not. */
  confined: () => boolean;
  /** Whether the store has room for one more job's output: no job starts while not. */
  roomForJob: () => boolean;
  /** Makes the FIFO through which the converter reads a download as it grows. */
  makeFifo: MakeFifo;
  /** Told about each stored content (the store's size cap hooks in here). */
  onStored: () => void;
  onDownloaded: (bytes: number) => void;
  /** Every job's end on this node's workers. */
  onJobEnded: (ended: Ended) => void;
  /** How a collection's entries are submitted as child jobs: as the API submits a URL. */
  submitChild: SubmitDeps;
  /** The tokens of its key's rate limit each entry takes; absent when there is no limit. */
  entryTokens?: EntryTokens;
  nodeId: string;
  now: () => number;
  log: Logger;
  drainWith: (drain: (graceMs: number) => Promise<void>) => void;
  onStop: (stop: () => void | Promise<void>) => void;
}

/**
 * The workers: each claims a job and runs it (yt-dlp, then ffmpeg, in the sandbox; then the
 * store), or lists a collection and submits its entries (./collection/run.ts).
 */
export function createWorkers(config: WorkersConfig, deps: WorkersDeps): WorkerPool {
  const { database, store, sandbox, makeFifo, nodeId, now, log } = deps;
  const limits = {
    timeoutMs: config.fetchTimeoutMs,
    metadataTimeoutMs: config.metadataTimeoutMs,
    downloadStall: config.downloadStall,
    maxDownloadBytes: config.maxDownloadBytes,
    maxOutputBytes: config.maxOutputBytes,
    maxDurationS: config.maxDurationS,
    tool: config.toolLimits,
  };
  const converterWaiting = config.converterWaiting
    ? createConverterWaiting({
        nodeId,
        workDir: config.workDir,
        sandbox,
        mountView: config.confinement.mountView,
        ffmpegPath: deps.tools.ffmpeg,
        limits,
        makeFifo,
        log,
      })
    : undefined;
  const runJob = createFetchTask({
    database,
    store,
    now,
    sandbox,
    mountView: config.confinement.mountView,
    tools: deps.tools,
    workDir: config.workDir,
    limits,
    converterWaiting,
    openEgressSession: deps.openEgressSession,
    cookiesFile: config.ytdlpCookiesFile,
    makeFifo,
    audioAnalysis: config.audioAnalysis,
    onStored: () => deps.onStored(),
    keyAllowance:
      config.storeBytesPerKeyPerDay === null
        ? undefined
        : { bytes: config.storeBytesPerKeyPerDay, windowMs: KEY_ALLOWANCE_WINDOW_MS },
    onDownloaded: deps.onDownloaded,
  });
  // A collection's listing: one yt-dlp run confined as a fetch's runs are, within its own limits.
  const listCollection = createListCollection({
    store,
    sandbox,
    mountView: config.confinement.mountView,
    tools: deps.tools,
    workDir: config.workDir,
    limits,
    openEgressSession: deps.openEgressSession,
    cookiesFile: config.ytdlpCookiesFile,
    listing: config.playlistListing,
    log,
  });
  const runCollection = createCollectionRunner({
    listCollection,
    submit: deps.submitChild,
    onJobEnded: deps.onJobEnded,
    entryTokens: deps.entryTokens,
  });
  const workers = createWorkerPool({
    database,
    nodeId,
    concurrency: config.workerConcurrency,
    leaseMs: config.jobLeaseMs,
    maxAttempts: config.maxAttempts,
    now,
    log,
    canClaim: () => deps.confined() && sandbox.settled() && deps.roomForJob(),
    runJob: async (job, ctx) => {
      const ended = await (job.kind === 'collection' ? runCollection : runJob)(job, ctx);
      if (ended) deps.onJobEnded(ended);
      return ended;
    },
    onJobEnded: deps.onJobEnded,
  });
  deps.drainWith((graceMs) => workers.stop(graceMs));
  // After the workers have drained, before the sandbox stops.
  if (converterWaiting) deps.onStop(() => converterWaiting.close());
  return workers;
}
