import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { SendResult } from './webhooks/send.js';

/**
 * Prometheus metrics, named as Prometheus asks (base units in the name, `_total` for counters
 * only). The service's own carry METRIC_PREFIX; prom-client's process and Node.js metrics (CPU,
 * memory, descriptors, event-loop lag, GC) keep the standard names every Node.js service exports
 * (`process_*`, `nodejs_*`), which stock dashboards and alerts expect. HTTP series are labelled by
 * route template only (never a concrete path), so their number stays bounded whatever ids clients
 * send. Gauges that mirror state (queue depth, store size, ...) are read at scrape time through
 * the callbacks given here.
 */
export const METRIC_PREFIX = 'source_fetch_';

/**
 * prom-client's default metrics include gauges whose names end in `_total` (the sum of the gauge
 * of the same name without it over its `type` label), which Prometheus reserves for counters and
 * promtool rejects. The by-type gauges stay; `sum()` over them gives the same number.
 */
const GAUGES_NAMED_LIKE_COUNTERS = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

export interface MetricsSources {
  /** Global: jobs queued on every node's database. */
  queueDepth: () => Promise<number>;
  busyWorkers: () => number;
  storeTotals: () => Promise<{ bytes: number; artifacts: number }>;
  /** Bytes free on the artifact root's volume (null: it cannot be asked), and what one job needs (STORE_MIN_FREE_BYTES). */
  storeFreeBytes?: () => number | null;
  storeMinFreeBytes?: number;
  downloaderPresent: () => Promise<boolean>;
  /** The downloader's version and the release date it names (Unix ms); null when it names none. */
  downloaderRelease: () => Promise<{ version: string; releasedAtMs: number } | null>;
  /** Job event streams open on this node (one or many jobs each). */
  eventStreams?: () => number;
}

export type Metrics = ReturnType<typeof createMetrics>;

type EndedJob = {
  status: string;
  bornDone: boolean;
  errorCode: string | null;
  startedAt: number | null;
  finishedAt: number | null;
};

export function createMetrics(sources: MetricsSources) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  for (const name of GAUGES_NAMED_LIKE_COUNTERS) registry.removeSingleMetric(name);

  const prefixed = (name: string) => `${METRIC_PREFIX}${name}`;
  const httpRequests = new Counter({
    name: prefixed('http_requests_total'),
    help: 'HTTP requests by method, route template and status.',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const httpDuration = new Histogram({
    name: prefixed('http_request_duration_seconds'),
    help: 'HTTP request latency by method and route template.',
    labelNames: ['method', 'route'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  });
  const jobsFinished = new Counter({
    name: prefixed('jobs_finished_total'),
    help: 'Jobs by final status (born_done: done without a download).',
    labelNames: ['status', 'born_done'] as const,
    registers: [registry],
  });
  const jobFailures = new Counter({
    name: prefixed('job_failures_total'),
    help: 'Failed jobs by error code.',
    labelNames: ['code'] as const,
    registers: [registry],
  });
  const jobDuration = new Histogram({
    name: prefixed('job_duration_seconds'),
    help: 'Time from a job starting to run to its end, by final status.',
    labelNames: ['status'] as const,
    buckets: [0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800],
    registers: [registry],
  });
  const downloadedBytes = new Counter({
    name: prefixed('downloaded_bytes_total'),
    help: 'Bytes downloaded by the downloader.',
    registers: [registry],
  });
  const evictedArtifacts = new Counter({
    name: prefixed('store_evicted_artifacts_total'),
    help: 'Artifacts evicted by the size cap or for free space.',
    registers: [registry],
  });
  const evictedBytes = new Counter({
    name: prefixed('store_evicted_bytes_total'),
    help: 'Bytes evicted by the size cap or for free space.',
    registers: [registry],
  });
  new Gauge({
    name: prefixed('store_bytes'),
    help: 'Bytes of all stored artifacts.',
    registers: [registry],
    async collect() {
      this.set((await sources.storeTotals()).bytes);
    },
  });
  new Gauge({
    name: prefixed('store_artifacts'),
    help: 'Number of stored artifacts.',
    registers: [registry],
    async collect() {
      this.set((await sources.storeTotals()).artifacts);
    },
  });
  new Gauge({
    name: prefixed('store_free_bytes'),
    help: "Bytes free on the artifact root's volume; below STORE_MIN_FREE_BYTES the node takes no job (NaN: unknown).",
    registers: [registry],
    collect() {
      this.set(sources.storeFreeBytes?.() ?? Number.NaN);
    },
  });
  new Gauge({
    name: prefixed('store_min_free_bytes'),
    help: 'STORE_MIN_FREE_BYTES: the free space eviction keeps on the volume, what one job can need.',
    registers: [registry],
    collect() {
      this.set(sources.storeMinFreeBytes ?? Number.NaN);
    },
  });
  new Gauge({
    name: prefixed('jobs_queued'),
    help: 'Jobs waiting for a worker.',
    registers: [registry],
    async collect() {
      this.set(await sources.queueDepth());
    },
  });
  new Gauge({
    name: prefixed('workers_busy'),
    help: 'Workers running a job.',
    registers: [registry],
    collect() {
      this.set(sources.busyWorkers());
    },
  });
  new Gauge({
    name: prefixed('event_streams'),
    help: 'Job event streams open on this node, each counted once whatever the number of jobs it carries (NaN: not counted).',
    registers: [registry],
    collect() {
      this.set(sources.eventStreams?.() ?? Number.NaN);
    },
  });
  new Gauge({
    name: prefixed('downloader_present'),
    help: '1 when the downloader is installed and answers, else 0.',
    registers: [registry],
    async collect() {
      this.set((await sources.downloaderPresent()) ? 1 : 0);
    },
  });

  new Gauge({
    name: prefixed('downloader_release_timestamp_seconds'),
    help: "Release date the downloader's version names, Unix seconds, labelled by that version (no series when it names none).",
    labelNames: ['version'] as const,
    registers: [registry],
    async collect() {
      const release = await sources.downloaderRelease();
      this.reset();
      if (release !== null) this.set({ version: release.version }, release.releasedAtMs / 1000);
    },
  });
  const scrubCheckedArtifacts = new Counter({
    name: prefixed('store_scrub_checked_artifacts_total'),
    help: 'Stored artifacts read whole by the store scrub and compared with their content id, by this node.',
    registers: [registry],
  });
  const scrubReadBytes = new Counter({
    name: prefixed('store_scrub_read_bytes_total'),
    help: 'Bytes read by the store scrub on this node (paced to SCRUB_BYTES_PER_S).',
    registers: [registry],
  });
  const scrubCorruptArtifacts = new Counter({
    name: prefixed('store_scrub_corrupt_artifacts_total'),
    help: 'Stored artifacts whose bytes do not hash to their content id, found by the store scrub on this node (quarantined, or left for the next pass while a job stores that content).',
    registers: [registry],
  });
  const scrubUnreadableArtifacts = new Counter({
    name: prefixed('store_scrub_unreadable_artifacts_total'),
    help: 'Stored artifacts the store scrub on this node found missing or could not read (reported only).',
    registers: [registry],
  });
  let scrubCompletedAtMs: number | undefined;
  new Gauge({
    name: prefixed('store_scrub_last_completed_timestamp_seconds'),
    help: 'When this node last completed a pass of the store scrub, Unix seconds (NaN: none since it started; with many nodes, take the max).',
    registers: [registry],
    collect() {
      this.set(scrubCompletedAtMs === undefined ? Number.NaN : scrubCompletedAtMs / 1000);
    },
  });
  const callbackAttempts = new Counter({
    name: prefixed('callback_attempts_total'),
    help: 'Callback attempts made by this node, by result: the status class (2xx delivers), or the error code when no answer came.',
    labelNames: ['result'] as const,
    registers: [registry],
  });

  return {
    registry,
    observeRequest(method: string, route: string, status: number, seconds: number) {
      httpRequests.inc({ method, route, status: String(status) });
      httpDuration.observe({ method, route }, seconds);
    },
    /** A job and the followers that ended with it: each counted once, by the node that ended them. */
    observeEnded(ended: { job: EndedJob; followers: EndedJob[] }) {
      for (const job of [ended.job, ...ended.followers]) this.observeJobEnd(job);
    },
    observeJobEnd(job: EndedJob) {
      jobsFinished.inc({ status: job.status, born_done: String(job.bornDone) });
      if (job.status === 'failed' && job.errorCode) jobFailures.inc({ code: job.errorCode });
      if (job.startedAt !== null && job.finishedAt !== null && !job.bornDone) {
        jobDuration.observe({ status: job.status }, (job.finishedAt - job.startedAt) / 1000);
      }
    },
    /** Counted by the receiver's status class (`2xx`, `4xx`...), or the sender's error code (a fixed set) when no answer came. */
    observeCallbackAttempt(result: SendResult) {
      callbackAttempts.inc({ result: result.status !== null ? `${Math.floor(result.status / 100)}xx` : result.error });
    },
    addDownloadedBytes(bytes: number) {
      downloadedBytes.inc(bytes);
    },
    observeEviction(artifacts: number, bytes: number) {
      evictedArtifacts.inc(artifacts);
      evictedBytes.inc(bytes);
    },
    addScrubReadBytes(bytes: number) {
      scrubReadBytes.inc(bytes);
    },
    observeScrubChecked() {
      scrubCheckedArtifacts.inc();
    },
    observeScrubFinding(finding: { problem: 'corrupt' | 'missing' | 'unreadable' }) {
      (finding.problem === 'corrupt' ? scrubCorruptArtifacts : scrubUnreadableArtifacts).inc();
    },
    observeScrubCompleted(atMs: number) {
      scrubCompletedAtMs = atMs;
    },
  };
}
