import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import { createServer, type RequestListener, type ServerOptions } from 'node:http';
import { serve } from '@hono/node-server';
import { createApp } from './app.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import { openDatabase } from './db/client.js';
import { createArtifactDelivery } from './delivery/handler.js';
import { createUrlSigner } from './delivery/signed-url.js';
import { createUsageLogReader } from './delivery/usage-log.js';
import { createTcpDialer, startEgressGuard } from './egress/guard.js';
import { ServiceError } from './errors.js';
import { createHealthCheck } from './health.js';
import { createKeyChecker } from './http/api-key.js';
import { createTokenBucketLimiter } from './http/middleware/rate-limit.js';
import { acceptedRequestId } from './http/middleware/request-id.js';
import { problemResponse } from './http/problem.js';
import { toJobRecord } from './http/job-record.js';
import { cancelJob } from './jobs/cancel.js';
import { createFetchTask } from './jobs/fetch-task.js';
import { countQueued, FINAL_STATUSES, followersOf, getJobRow, recoverAbandonedJobs } from './jobs/queue.js';
import { killOrphanedTools } from './jobs/orphaned-tools.js';
import { submitSource } from './jobs/submit.js';
import { createWorkerPool, type WorkerPool } from './jobs/worker-pool.js';
import { createLogger } from './logger.js';
import { createMetrics } from './metrics.js';
import { checkDestination, createSystemResolver } from './policy/destination.js';
import { destinationOf } from './policy/source-url.js';
import { loadOrCreateSecret } from './secrets.js';
import { cacheEntriesFor } from './store/cache-entries.js';
import { createContentStore } from './store/content-store.js';
import { readStoreTotals } from './store/eviction.js';
import { reconcileStore } from './store/reconcile.js';
import { createSizeCap } from './store/size-cap.js';
import { createUsageRecorder } from './store/usage.js';
import { AUDIO_ARTIFACT_NAME } from './store/layout.js';
import { locateTool, toolVersion } from './tools/locate.js';
import { runProcess } from './tools/process.js';

/**
 * The composition root: configuration → database (migrations, recovery) → dependencies →
 * app and workers → serve. The real clock, spawner, resolver and file system are wired here
 * and nowhere else. SIGTERM and SIGINT drain both the server and the workers.
 */
async function main(): Promise<void> {
  let config: Config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }
  const log = createLogger(config.logLevel);
  const now = () => Date.now();

  await fs.mkdir(config.dataDir, { recursive: true });
  await fs.mkdir(config.artifactRoot, { recursive: true });
  const orphansKilled = await killOrphanedTools(config.workDir);
  await fs.rm(config.workDir, { recursive: true, force: true });
  await fs.mkdir(config.workDir, { recursive: true });

  let apiKeys = config.apiKeys;
  if (apiKeys.length === 0) {
    const generated = loadOrCreateSecret(config.dataDir, 'api-key');
    apiKeys = [generated.value];
    log.warn({ file: generated.file, created: generated.created }, 'API_KEYS is not set: using the generated key kept in this file');
  }
  const signingSecret = config.urlSigningSecret ?? loadOrCreateSecret(config.dataDir, 'url-signing-secret').value;

  const allowHosts = config.allowHosts;
  if (allowHosts.length > 0) {
    log.warn({ hosts: config.fetchAllowHosts }, 'FETCH_ALLOW_HOSTS is set: these destinations bypass the address policy');
  }

  const db = openDatabase(config.databasePath);
  const recovered = recoverAbandonedJobs(db, config.maxAttempts, now());
  const store = createContentStore(config.artifactRoot);
  const leftovers = await store.clearIncoming();
  const reconciled = await reconcileStore({ db, store, now });
  log.info(
    {
      ...recovered,
      incoming_removed: leftovers,
      orphaned_tools_killed: orphansKilled,
      files_adopted: reconciled.adopted,
      files_removed: reconciled.filesRemoved,
      rows_dropped: reconciled.rowsDropped,
      aliases_cleared: reconciled.aliasesCleared,
    },
    'start-up recovery',
  );

  const checkHealth = createHealthCheck({
    tools: config.tools,
    locate: (tool) => locateTool(tool, config.searchPath),
    version: toolVersion,
    pingDatabase: () => db.$client.prepare('select 1 as ok').get() !== undefined,
    artifactRoot: config.artifactRoot,
    now,
  });
  let pool: WorkerPool | undefined;
  const metrics = createMetrics({
    queueDepth: () => countQueued(db),
    busyWorkers: () => pool?.busyCount() ?? 0,
    storeTotals: () => readStoreTotals(db),
    downloaderPresent: async () => (await checkHealth()).downloader.present,
  });
  const observeJobEnd = (jobId: string) => {
    const job = getJobRow(db, jobId);
    if (!job || !FINAL_STATUSES.has(job.status)) return;
    metrics.observeJobEnd(job);
    for (const follower of followersOf(db, jobId)) {
      if (FINAL_STATUSES.has(follower.status)) metrics.observeJobEnd(follower);
    }
  };
  const nginxUsage = config.nginxUsageLog
    ? createUsageLogReader({
        file: config.nginxUsageLog,
        onUse: (cid, at) => usage.touch(cid, at),
        onMalformed: (lines) => log.warn({ file: config.nginxUsageLog, lines }, 'nginx usage log: skipped lines that are not "<time> <content id>"'),
        onError: (err, action) => log.warn({ file: config.nginxUsageLog, code: err.code, action }, 'nginx usage log: cannot read or empty it'),
      })
    : undefined;
  const usage = createUsageRecorder({ db, now, collect: nginxUsage && (() => void nginxUsage.drain()) });
  const sizeCap = createSizeCap({
    db,
    store,
    capBytes: config.artifactCapBytes,
    log,
    flushUsage: () => usage.flush(),
    intervalMs: config.evictionIntervalMs,
    onEvicted: (result) => metrics.observeEviction(result.evictedArtifacts, result.evictedBytes),
  });

  const resolve = createSystemResolver();
  const guard = await startEgressGuard({ resolve, dial: createTcpDialer(), allowHosts, logger: log });
  const runJob = createFetchTask({
    db,
    store,
    now,
    run: runProcess,
    tools: config.tools,
    workDir: config.workDir,
    limits: { timeoutMs: config.fetchTimeoutMs, maxDownloadBytes: config.maxDownloadBytes, maxDurationS: config.maxDurationS },
    openEgressSession: (label) => guard.openSession(label),
    onStored: () => sizeCap.request(),
    onDownloaded: (bytes) => metrics.addDownloadedBytes(bytes),
  });
  pool = createWorkerPool({
    db,
    concurrency: config.workerConcurrency,
    now,
    log,
    runJob: async (job, ctx) => {
      await runJob(job, ctx);
      observeJobEnd(job.id);
    },
  });
  const workers = pool;

  const signer = createUrlSigner(signingSecret, { now });
  const checkKey = createKeyChecker(apiKeys);
  const notFound = () => new ServiceError('not_found', 'job_not_found', 'No job has this id.');
  const delivery = createArtifactDelivery({
    artifactRoot: config.artifactRoot,
    accelRedirectPrefix: config.accelRedirectPrefix,
    checkKey,
    signer,
    onServed: (cid) => usage.touch(cid),
    now,
  });

  const app = createApp({
    log,
    checkKey,
    submitSource: async (url, requestId) => {
      const job = await submitSource({
        deps: {
          db,
          now,
          newJobId: randomUUID,
          checkDestination: async (target) => {
            const { host, port } = destinationOf(target);
            await checkDestination(host, port, { resolve, allowHosts });
          },
          contentPresent: (cid) => store.hasSync(cid, AUDIO_ARTIFACT_NAME),
          admitJob: () => {
            if (countQueued(db) >= config.maxQueuedJobs) {
              throw new ServiceError('rate_limited', 'queue_full', 'Too many jobs are waiting; try again later.', { retryAfterSeconds: 30 });
            }
          },
          wakeWorkers: () => workers.wake(),
        },
        input: { url, requestId },
      });
      if (job.bornDone) {
        metrics.observeJobEnd(job);
        usage.touch(job.contentId!);
      }
      return job;
    },
    getJob: (id) => getJobRow(db, id) ?? throwError(notFound()),
    cancelJob: (id) => {
      const before = getJobRow(db, id);
      const job = cancelJob({ deps: { db, now, abortRunningJob: (jobId) => workers.abort(jobId, 'canceled') }, input: { jobId: id } });
      // A running job is counted when its worker ends; a queued one never reaches a worker.
      if (before?.status === 'queued') metrics.observeJobEnd(job);
      return job;
    },
    renderJob: (job) =>
      toJobRecord(job, {
        leader: job.followsJobId ? getJobRow(db, job.followsJobId) : undefined,
        artifacts: job.contentId ? cacheEntriesFor(db, job.contentId) : [],
        sign: (cid, name) => {
          const signed = signer.sign(cid, name, config.signedUrlTtlS);
          return { query: signed.query, expiresAt: signed.expires * 1000 };
        },
      }),
    serveArtifact: delivery.handle,
    checkHealth,
    metrics,
    rateLimiter:
      config.rateLimitPerMinute > 0
        ? createTokenBucketLimiter({ perMinute: config.rateLimitPerMinute, burst: config.rateLimitBurst, now })
        : undefined,
  });

  let stopping = false;
  // Once shutting down, requests still arriving on open keep-alive connections get 503.
  const fetch: typeof app.fetch = (req, ...rest) =>
    stopping
      ? problemResponse(503, 'shutting_down', 'The service is shutting down; try again shortly.', { headers: { connection: 'close', 'retry-after': '5' } })
      : app.fetch(req, ...rest);
  // Without nginx, signed URLs are answered before the app (src/delivery/signed-lane.ts).
  const signedLane =
    config.accelRedirectPrefix === null
      ? delivery.signedLane({ log, observeRequest: (...args) => metrics.observeRequest(...args), requestIdFor: acceptedRequestId })
      : undefined;
  // @hono/node-server calls this with its options and its request listener.
  const withSignedLane = ((options: ServerOptions, listener: RequestListener) =>
    createServer(options, (req, res) => (signedLane && !stopping ? signedLane(req, res, () => listener(req, res)) : listener(req, res)))) as typeof createServer;
  const server = serve({ fetch, hostname: config.host, port: config.port, createServer: withSignedLane }, (info) => {
    log.info({ host: info.address, port: info.port, artifact_root: config.artifactRoot }, 'listening');
  });
  workers.start();
  usage.start();
  sizeCap.start();

  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal, grace_ms: config.shutdownGraceMs }, 'shutting down: no new work, draining running jobs');
    server.close();
    (server as { closeIdleConnections?: () => void }).closeIdleConnections?.();
    await workers.stop(config.shutdownGraceMs);
    await sizeCap.stop();
    usage.stop();
    await guard.close();
    db.$client.close();
    log.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
}

function throwError(err: Error): never {
  throw err;
}

await main();
