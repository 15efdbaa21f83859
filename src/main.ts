import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { statfsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createApp } from './app.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import type { JobRow } from './db/database.js';
import { surviveDatabaseOutages } from './db/outage.js';
import { createFileBodies } from './delivery/file-body.js';
import { createUrlSigner } from './delivery/signed-url.js';
import { nginxUsageLog } from './delivery/usage-log.js';
import { startEgress } from './egress/start.js';
import { cannotFetchText, createHealthCheck, downloaderMetrics, logFirstHealthCheck } from './health.js';
import { createKeyChecker } from './http/api-key.js';
import { createJobEventStreams } from './http/job-events.js';
import { collectionItemRecord, createJobRenderer } from './http/job-record.js';
import { createKeyAdmission, entryTokenTaker } from './http/key-admission.js';
import { createNodeRouter, maxBodyBytesByPath } from './http/node-router.js';
import { rateLimiterOf } from './http/rate-limit.js';
import { createRequestEnvelope } from './http/request-envelope.js';
import { createArtifactOperation } from './http/routes/artifacts.js';
import { healthOperation } from './http/routes/health.js';
import { jobOperations } from './http/routes/jobs.js';
import { metricsOperation } from './http/routes/metrics.js';
import { sourceOperations } from './http/routes/sources.js';
import { storeOperations } from './http/routes/store.js';
import { webhookSecretOperation } from './http/routes/webhook-secret.js';
import type { JobRecord } from './http/schemas.js';
import { startHttpServer } from './http/server.js';
import { shutdownGate } from './http/shutdown-gate.js';
import { loadWebFiles } from './http/web-page.js';
import { createAdmission } from './jobs/admission.js';
import { createJobService } from './jobs/job-service.js';
import { claimEndedParents } from './jobs/collection/parent.js';
import { announceJobEnded, createJobWatcher, hearJobEnds, readJobRows, withLocalProgress } from './jobs/job-watch.js';
import { countQueued, type Ended } from './jobs/queue.js';
import { createWorkers } from './jobs/workers.js';
import { JOBS_QUEUED_CHANNEL } from './jobs/worker-pool.js';
import { createLogger } from './logger.js';
import { createMetrics } from './metrics.js';
import { makeNodeId } from './ops/node-id.js';
import { resolveServiceSecrets } from './ops/service-secrets.js';
import { createShutdown } from './ops/shutdown.js';
import { createSignal } from './ops/signal.js';
import { startFailureText } from './ops/start-failure.js';
import { openStorage } from './ops/storage.js';
import { welcomeText } from './ops/welcome.js';
import { sourceDestinationCheck } from './policy/source-url.js';
import { startConfinement } from './sandbox/confinement.js';
import { readStoreTotals } from './store/eviction.js';
import { AUDIO_ARTIFACT_NAME } from './store/layout.js';
import { createScrubber } from './store/scrubber.js';
import { createStoreUpkeep } from './store/upkeep.js';
import { makeFifo } from './tools/fifo.js';
import { locateTool, locateTools, toolVersion } from './tools/locate.js';
import { isProcessAlive, runProcess } from './tools/process.js';
import { createCallbacks } from './webhooks/callbacks.js';
import { callbackRecorder } from './webhooks/deliveries.js';
import { keyWebhookSecrets } from './webhooks/key-secrets.js';

/**
 * The composition root, and nothing else: the configuration, then each part of the service built
 * from the parts before it, in the order of the data flow, then served. The real clock, spawner,
 * resolver, file system and process are wired here and nowhere else. Where a part built earlier
 * must reach one built later (a job's end wakes the callbacks and counts in the metrics), it
 * announces a signal (src/ops/signal.ts) the later part listens to. Each part registers its own
 * stop with the shutdown as it is built.
 */

/** What happens in one part and is acted on in a later one. */
function createSignals() {
  return {
    /** The resident sandbox's first start is over, ready or not. */
    sandboxSettled: createSignal(),
    /** A job ended: on this node's workers, or born done or canceled at submission. */
    jobEnded: createSignal<{ ended: Ended; mayHaveCallback: boolean }>(),
    downloadedBytes: createSignal<number>(),
    evicted: createSignal<{ artifacts: number; bytes: number }>(),
  };
}

async function main(): Promise<void> {
  const config = loadConfigOrExit(process.env);
  const log = createLogger(config.logLevel);
  surviveDatabaseOutages(process, log);
  const now = () => Date.now();
  const nodeId = config.nodeId ?? makeNodeId(os.hostname(), process.pid);
  const signals = createSignals();
  const shutdown = createShutdown({ log, graceMs: config.shutdownGraceMs, exit: (code) => process.exit(code) });
  const onStop = (step: () => Promise<void> | void) => shutdown.onStop(step);
  process.on('SIGTERM', () => void shutdown.run('SIGTERM'));
  process.on('SIGINT', () => void shutdown.run('SIGINT'));

  const tools = await locateTools(config);
  exitOnRefusal('YTDLP_COOKIES_FILE', tools.cookiesFileRefusal);
  const { database, store } = await orExitOnStartFailure(
    openStorage(config, {
      nodeId,
      hostname: os.hostname(),
      now,
      log,
      isProcessAlive,
      newId: randomUUID,
      onStop,
    }),
    config,
  );
  const secrets = await orExit(
    resolveServiceSecrets({
      configured: {
        apiKeys: config.apiKeys,
        urlSigningSecret: config.urlSigningSecret,
        webhookSecret: config.webhooks.secret,
      },
      database,
      dataDir: config.dataDir,
      now: now(),
      log,
    }),
  );
  const egress = await startEgress(config, { tmpdir: os.tmpdir(), log, onStop });
  const confinement = await startConfinement(config, {
    ytdlpPath: tools.ytdlpPath,
    locate: (tool) => locateTool(tool, config.searchPath),
    guard: egress.guard,
    runtimeDir: egress.runtimeDir,
    run: runProcess,
    onSettled: () => signals.sandboxSettled.emit(),
    log,
    onStop,
  });
  const upkeep = createStoreUpkeep(config, {
    database,
    store,
    statfs: statfsSync,
    openUsageLog: nginxUsageLog(config.nginxUsageLog, log),
    onEvicted: (evicted) => signals.evicted.emit(evicted),
    nodeId,
    now,
    log,
    onStop,
  });
  const checkHealth = createHealthCheck({
    tools: tools.paths,
    checkConfinement: () => confinement.check(),
    locate: (tool) => locateTool(tool, config.searchPath),
    version: toolVersion,
    pingDatabase: () => database.ping(),
    databaseKind: database.kind,
    nodeId,
    artifactRoot: config.artifactRoot,
    storeSpace: upkeep.space,
    storedBytes: async () => (await readStoreTotals(database)).bytes,
    now,
  });
  logFirstHealthCheck(checkHealth, log, (report) => {
    const text = cannotFetchText(report, { ...config.tools, artifactRoot: config.artifactRoot });
    if (text !== null) process.stderr.write(text);
  });

  // How a URL becomes a job, for the API's submissions and for a collection's entries alike.
  const submitDeps = {
    database,
    now,
    newJobId: randomUUID,
    recordCallback: callbackRecorder(randomUUID),
    checkDestination: sourceDestinationCheck({ resolve: egress.resolve, allowHosts: config.allowHosts }),
    contentPresent: (cid: string) => store.hasSync(cid, AUDIO_ARTIFACT_NAME),
    admitJob: createAdmission({
      database,
      maxQueuedJobs: config.maxQueuedJobs,
      confinementOk: () => confinement.status().ok,
    }),
  };
  // Each key's request rate, on this node: its requests, and its collections' entries listed here.
  const rateLimiter = rateLimiterOf({ perMinute: config.rateLimitPerMinute, burst: config.rateLimitBurst, now });
  const workers = createWorkers(config, {
    database,
    store,
    tools: tools.paths,
    sandbox: confinement.sandbox,
    openEgressSession: (label, options) => egress.guard.openSession(label, options),
    confined: () => confinement.status().ok,
    roomForJob: () => upkeep.space.canStoreJob(),
    makeFifo,
    onStored: () => upkeep.sizeCap.request(),
    onDownloaded: (bytes) => signals.downloadedBytes.emit(bytes),
    onJobEnded: (ended) => signals.jobEnded.emit({ ended, mayHaveCallback: true }),
    submitChild: {
      ...submitDeps,
      onQueued: () => void database.notify(JOBS_QUEUED_CHANNEL, '').catch(() => {}),
    },
    entryTokens: rateLimiter && {
      take: entryTokenTaker(rateLimiter, { now, sleep: (ms, signal) => sleep(ms, undefined, { signal }) }),
      maxWaitMs: config.playlistListing.timeoutMs,
    },
    nodeId,
    now,
    log,
    drainWith: (drain) => shutdown.drainWorkersWith(drain),
    onStop,
  });
  signals.sandboxSettled.on(() => workers.wake());
  const metrics = createMetrics({
    queueDepth: () => countQueued(database),
    busyWorkers: () => workers.busyCount(),
    // Read at scrape time, once the streams below exist.
    eventStreams: () => jobEvents.openCount(),
    storeTotals: () => readStoreTotals(database),
    storeFreeBytes: () => upkeep.space.freeBytes(),
    storeMinFreeBytes: config.storeMinFreeBytes,
    ...downloaderMetrics(checkHealth),
  });
  signals.downloadedBytes.on((bytes) => metrics.addDownloadedBytes(bytes));
  signals.evicted.on(({ artifacts, bytes }) => metrics.observeEviction(artifacts, bytes));
  signals.jobEnded.on(({ ended }) => metrics.observeEnded(ended));
  // A collection the trigger ended with its last child: its end is announced as any job's, once.
  signals.jobEnded.on(({ ended }) => {
    claimEndedParents(database, ended)
      .then((parents) => {
        for (const job of parents) signals.jobEnded.emit({ ended: { job, followers: [] }, mayHaveCallback: true });
      })
      .catch((err: unknown) => log.warn({ err }, "announcing a collection's end failed"));
  });
  const scrubber = createScrubber({ database, store, nodeId, log, now, metrics, ...config.scrub });
  onStop(() => scrubber.stop());

  const signer = createUrlSigner(secrets.urlSigningSecret, { now });
  const jobs = createJobService({
    ...submitDeps,
    playlistMaxItems: config.playlistMaxItems,
    onEnded: (ended, mayHaveCallback) => signals.jobEnded.emit({ ended, mayHaveCallback }),
  });
  const renderView = createJobRenderer((cid, name, filename) => {
    const signed = signer.sign(cid, name, config.signedUrlTtlS, filename);
    return { query: signed.query, expiresAt: signed.expires * 1000 };
  }, now);
  const renderJob = async (job: JobRow): Promise<JobRecord> => renderView(await jobs.view(job));

  // Each key's callback signing secrets, derived from WEBHOOK_SECRET: the callbacks of its jobs, and getWebhookSecret.
  const webhookSecretsOf = (keyIdentity: string) => keyWebhookSecrets(secrets.webhookSecret, keyIdentity);
  const callbacks = createCallbacks(config, {
    database,
    resolve: egress.resolve,
    secretsOf: webhookSecretsOf,
    renderJob: async (jobId) => renderJob(await jobs.get(jobId)),
    onAttempt: (result) => metrics.observeCallbackAttempt(result),
    jobEnds: signals.jobEnded,
    nodeId,
    now,
    log,
    onStop,
  });

  // Event streams follow jobs in the database, whichever node runs them: one query per tick for
  // all; the jobs running here with their latest progress.
  const jobWatcher = createJobWatcher({
    readJobs: async (ids) =>
      withLocalProgress(await readJobRows(database, ids), nodeId, (id) => workers.progressOf(id)),
    render: renderJob,
    intervalMs: config.events.pollMs,
    onError: (err) => log.error({ err }, 'reading watched jobs failed'),
  });
  const { keepAliveMs, maxPerKey, maxPerNode } = config.events;
  const jobEvents = createJobEventStreams({
    watcher: jobWatcher,
    render: renderJob,
    items: {
      states: (parentId, from) => jobs.itemStates(parentId, from),
      records: async (parentId, indexes) =>
        (await jobs.itemsAt(parentId, indexes)).map((item) => collectionItemRecord(item, renderView)),
    },
    keepAliveMs,
    maxPerKey,
    maxPerNode,
  });
  // A job's end reaches every node's streams at once, not at their next poll.
  signals.jobEnded.on(({ ended }) => {
    announceJobEnded(database, ended).catch((err: unknown) => {
      log.warn({ err }, "telling the nodes of a job's end failed: their event streams see it at their next poll");
    });
  });
  onStop(await hearJobEnds(database, jobWatcher));

  const admission = createKeyAdmission({
    checkKey: createKeyChecker(secrets.apiKeys),
    rateLimiter,
  });
  const operations = [
    healthOperation({ check: checkHealth }),
    metricsOperation({ metrics, admission }),
    ...storeOperations({ scrubber, admission }),
    webhookSecretOperation({ admission, secretsOf: webhookSecretsOf }),
    ...sourceOperations({
      admission,
      submit: (input, requestId) => jobs.submit(input, requestId),
      submitBatch: (input, requestId) => jobs.submitBatch(input, requestId),
      render: renderJob,
      renderView,
    }),
    ...jobOperations({
      admission,
      read: async (id) => renderView(await jobs.read(id)),
      cancel: (id) => jobs.cancel(id),
      render: renderJob,
      items: (id, page) => jobs.items(id, page),
      renderView,
    }),
    createArtifactOperation({
      artifactRoot: config.artifactRoot,
      accelRedirectPrefix: config.accelRedirectPrefix,
      admission,
      signer,
      onServed: (cid) => upkeep.usage.touch(cid),
      now,
    }),
  ];
  const bodies = createFileBodies();
  // The page's folder sits beside src/ and dist/; the waveform module in its installed package.
  const webFiles = await loadWebFiles(
    fileURLToPath(new URL('../web', import.meta.url)),
    path.dirname(path.dirname(fileURLToPath(import.meta.resolve('wavesurfer.js')))),
  );
  const app = createApp({
    log,
    admission,
    operations,
    bodies,
    getJob: (id) => jobs.get(id),
    getJobs: (ids) => readJobRows(database, ids),
    jobEvents,
    webFiles,
  });
  const server = startHttpServer(
    {
      envelope: createRequestEnvelope({ log, observeRequest: (...args) => metrics.observeRequest(...args) }),
      ...shutdownGate({ shutdown, nodeRouter: createNodeRouter(operations, { bodies, log }), app }),
      hostname: config.host,
      port: config.port,
      maxRequestBodyBytes: maxBodyBytesByPath(operations),
      connections: config.http,
      log,
    },
    (info) => {
      log.info(
        {
          host: info.address,
          port: info.port,
          node_id: nodeId,
          database: database.kind,
          artifact_root: config.artifactRoot,
          workers: config.workerConcurrency,
        },
        'listening',
      );
      // In plain words for the person who started it, beside the JSON log (stdout).
      process.stderr.write(
        welcomeText({
          address: info.address,
          port: info.port,
          keys: secrets.apiKeySource,
          behindNginx: config.accelRedirectPrefix !== null,
        }),
      );
    },
  );
  shutdown.closeFrontWith(() => {
    server.close();
    // Ended cleanly now, not cut off at exit: their clients resume (Last-Event-ID) on another node.
    jobEvents.closeAll();
    jobWatcher.stop();
    (server as { closeIdleConnections?: () => void }).closeIdleConnections?.();
  });

  // Nothing is claimed before the node listens: an address taken or not allowed stops the start
  // in plain words, with no job begun.
  await orExitOnStartFailure(
    new Promise<void>((resolve, reject) => {
      server.once('listening', () => {
        server.off('error', reject);
        resolve();
      });
      server.once('error', reject);
    }),
    config,
  );
  // An API-only node (WORKER_CONCURRENCY=0) claims nothing, but still takes back dead nodes' jobs.
  await workers.start();
  callbacks.start();
  upkeep.usage.start();
  upkeep.sizeCap.start();
  scrubber.start();
}

function loadConfigOrExit(env: NodeJS.ProcessEnv): Config {
  try {
    return loadConfig(env);
  } catch (err) {
    return exitOnConfigError(err);
  }
}

/** A configuration problem found at start: its message on stderr, exit status 2. */
function exitOnConfigError(err: unknown): never {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`${err.message}\n`);
  process.exit(2);
}

/** A start that cannot go on for a reason the person who started it can fix (./ops/start-failure.ts): its sentence, exit status 1. */
function exitOnStartFailure(err: unknown, listen: { host: string; port: number }): never {
  const text = startFailureText(err, listen);
  if (text === null) throw err;
  process.stderr.write(`source-fetch cannot start: ${text}\n`);
  process.exit(1);
}

async function orExitOnStartFailure<T>(value: Promise<T>, listen: { host: string; port: number }): Promise<T> {
  return value.catch((err: unknown) => exitOnStartFailure(err, listen));
}

async function orExit<T>(value: Promise<T>): Promise<T> {
  return value.catch(exitOnConfigError);
}

/** A setting found unusable at start (`refusal`, null when usable) exits as a configuration problem. */
function exitOnRefusal(name: string, refusal: string | null): void {
  if (refusal !== null) exitOnConfigError(new ConfigError(`Invalid configuration:\n  ${name}: ${refusal}`));
}

await main();
