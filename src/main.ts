import { randomUUID } from 'node:crypto';
import { statfsSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createApp } from './app.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import type { Database, JobRow } from './db/database.js';
import { openDatabase } from './db/open.js';
import { databaseOutage } from './db/outage.js';
import { createArtifactOperation } from './http/routes/artifacts.js';
import { createFileBodies } from './delivery/file-body.js';
import { createUrlSigner } from './delivery/signed-url.js';
import { createUsageLogReader } from './delivery/usage-log.js';
import { createTcpDialer, startEgressGuard, type EgressGuard } from './egress/guard.js';
import { createUpstreamProxyDialer } from './egress/upstream-proxy.js';
import { createHealthCheck } from './health.js';
import { createKeyChecker } from './http/api-key.js';
import { createJobEventStreams } from './http/job-events.js';
import { createJobRenderer } from './http/job-record.js';
import { createKeyAdmission } from './http/key-admission.js';
import { createNodeRouter } from './http/node-router.js';
import { problemResponse } from './http/problem.js';
import { createTokenBucketLimiter } from './http/rate-limit.js';
import { createRequestEnvelope } from './http/request-envelope.js';
import { jobOperations } from './http/routes/jobs.js';
import { MAX_BATCH_BODY_BYTES, MAX_BODY_BYTES, sourceOperations } from './http/routes/sources.js';
import type { JobRecord } from './http/schemas.js';
import { startHttpServer } from './http/server.js';
import { loadWebFiles } from './http/web-page.js';
import { createAdmission } from './jobs/admission.js';
import { createFetchTask } from './jobs/fetch/task.js';
import { createConverterWaiting } from './jobs/fetch/waiting-converter.js';
import { createJobService } from './jobs/job-service.js';
import { createJobWatcher, endedJobIds, JOB_ENDED_CHANNEL, readJobRows } from './jobs/job-watch.js';
import { countQueued, type Ended } from './jobs/queue.js';
import { createWorkerPool } from './jobs/worker-pool.js';
import { createLogger, type Logger } from './logger.js';
import { createMetrics } from './metrics.js';
import { makeNodeId } from './ops/node-id.js';
import { createShutdown, type Shutdown } from './ops/shutdown.js';
import { createSignal } from './ops/signal.js';
import { recoverAtStartup } from './ops/startup.js';
import { welcomeText } from './ops/welcome.js';
import { checkDestination } from './policy/destination.js';
import { createNameResolver } from './policy/name-resolver.js';
import { destinationOf } from './policy/source-url.js';
import { toolFolders } from './sandbox/mount-view.js';
import { createResidentSandbox } from './sandbox/resident.js';
import { createSandbox, readHostNetns, type ConfinementStatus } from './sandbox/sandbox.js';
import { resolveServiceSecrets } from './ops/service-secrets.js';
import { createContentStore } from './store/content-store.js';
import { readStoreTotals } from './store/eviction.js';
import { createStoreSpace } from './store/free-space.js';
import { KEY_ALLOWANCE_WINDOW_MS } from './store/key-allowance.js';
import { AUDIO_ARTIFACT_NAME } from './store/layout.js';
import { createDatabasePins } from './store/pins.js';
import { createScrubber } from './store/scrubber.js';
import { createSizeCap } from './store/size-cap.js';
import { createUsageRecorder } from './store/usage.js';
import { cookiesFileRefusal } from './tools/cookies-file.js';
import { makeFifo } from './tools/fifo.js';
import { locateTool, toolVersion } from './tools/locate.js';
import { runProcess } from './tools/process.js';
import { callbackRecorder } from './webhooks/deliveries.js';
import { createDeliveryWorker } from './webhooks/delivery-worker.js';
import { keyWebhookSecrets } from './webhooks/key-secrets.js';
import { createCallbackSender } from './webhooks/send.js';

/**
 * The composition root, and nothing else: the configuration, then each part of the service built
 * from the parts before it, in the order of the data flow, then served. The real clock, spawner,
 * resolver, file system and process are wired here and nowhere else. Where a part built earlier
 * must reach one built later (the store running short asks eviction to run; a job's end wakes
 * the callbacks), it announces a signal (src/ops/signal.ts) the later part listens to. Each part
 * registers its own stop with the shutdown as it is built.
 */

/** A callback attempt's lease outlives its time limit by this much (writing its outcome). */
const CALLBACK_LEASE_MARGIN_MS = 5_000;

/** What happens in one part and is acted on in a later one. */
function createSignals() {
  return {
    /** The artifact root's volume has less free than a job can need. */
    storeShort: createSignal(),
    /** The resident sandbox's first start is over, ready or not. */
    sandboxSettled: createSignal(),
    /** A job ended: on this node's workers, or born done or canceled at submission. */
    jobEnded: createSignal<{ ended: Ended; mayHaveCallback: boolean }>(),
    downloadedBytes: createSignal<number>(),
    evicted: createSignal<{ artifacts: number; bytes: number }>(),
  };
}
type Signals = ReturnType<typeof createSignals>;

async function main(): Promise<void> {
  const config = loadConfigOrExit(process.env);
  const log = createLogger(config.logLevel);
  surviveDatabaseOutages(log);
  const now = () => Date.now();
  const nodeId = config.nodeId ?? makeNodeId(os.hostname(), process.pid);
  const signals = createSignals();
  const shutdown = createShutdown({ log, graceMs: config.shutdownGraceMs, exit: (code) => process.exit(code) });
  process.on('SIGTERM', () => void shutdown.run('SIGTERM'));
  process.on('SIGINT', () => void shutdown.run('SIGINT'));

  const tools = await locateTools(config);
  const { database, store } = await openStorage(config, { nodeId, now, log, shutdown });
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
  if (config.allowHosts.length > 0) {
    log.warn(
      { hosts: config.fetchAllowHosts },
      'FETCH_ALLOW_HOSTS is set: these destinations bypass the address policy',
    );
  }
  const egress = await startEgress(config, { log, shutdown });
  const confinement = await startConfinement(config, tools, egress, { log, shutdown, signals });
  const upkeep = createStoreUpkeep(config, { database, store, nodeId, now, log, shutdown, signals });
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
    now,
  });
  logFirstHealthCheck(checkHealth, log);

  const workers = createWorkers(config, {
    database,
    store,
    tools,
    egress,
    confinement,
    upkeep,
    nodeId,
    now,
    log,
    shutdown,
    signals,
  });
  const metrics = createMetrics({
    queueDepth: () => countQueued(database),
    busyWorkers: () => workers.busyCount(),
    // Read at scrape time, once the streams below exist.
    eventStreams: () => jobEvents.openCount(),
    storeTotals: () => readStoreTotals(database),
    storeFreeBytes: () => upkeep.space.freeBytes(),
    storeMinFreeBytes: config.storeMinFreeBytes,
    downloaderPresent: async () => (await checkHealth()).downloader.present,
    downloaderRelease: async () => {
      const { version, released_on: releasedOn } = (await checkHealth()).downloader;
      return version !== null && releasedOn !== null ? { version, releasedAtMs: Date.parse(releasedOn) } : null;
    },
  });
  signals.downloadedBytes.on((bytes) => metrics.addDownloadedBytes(bytes));
  signals.evicted.on(({ artifacts, bytes }) => metrics.observeEviction(artifacts, bytes));
  signals.jobEnded.on(({ ended }) => metrics.observeEnded(ended));
  const scrubber = createScrubber({ database, store, nodeId, log, now, metrics, ...config.scrub });
  shutdown.onStop(() => scrubber.stop());

  const signer = createUrlSigner(secrets.urlSigningSecret, { now });
  const jobs = createJobService({
    database,
    now,
    newJobId: randomUUID,
    recordCallback: callbackRecorder(randomUUID),
    checkDestination: async (target, apiKeyId) => {
      const { host, port } = destinationOf(target);
      await checkDestination(host, port, {
        resolve: egress.resolve,
        allowHosts: config.allowHosts,
        client: `key:${apiKeyId ?? ''}`,
      });
    },
    contentPresent: (cid) => store.hasSync(cid, AUDIO_ARTIFACT_NAME),
    admitJob: createAdmission({
      database,
      maxQueuedJobs: config.maxQueuedJobs,
      confinementOk: () => confinement.status().ok,
    }),
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
    egress,
    secretsOf: webhookSecretsOf,
    nodeId,
    now,
    log,
    shutdown,
    signals,
    metrics,
    renderJob: async (jobId) => renderJob(await jobs.get(jobId)),
  });

  // Event streams follow jobs in the database, whichever node runs them: one query per tick for all.
  const jobWatcher = createJobWatcher({
    readJobs: (ids) => readJobRows(database, ids),
    render: renderJob,
    intervalMs: config.events.pollMs,
    onError: (err) => log.error({ err }, 'reading watched jobs failed'),
  });
  const { keepAliveMs, maxPerKey, maxPerNode } = config.events;
  const jobEvents = createJobEventStreams({
    watcher: jobWatcher,
    render: renderJob,
    keepAliveMs,
    maxPerKey,
    maxPerNode,
  });
  // A job's end reaches every node's streams at once, not at their next poll.
  signals.jobEnded.on(({ ended }) => {
    database.notify(JOB_ENDED_CHANNEL, endedJobIds(ended)).catch((err: unknown) => {
      log.warn({ err }, "telling the nodes of a job's end failed: their event streams see it at their next poll");
    });
  });
  const stopHearingEnds = await database.listen(JOB_ENDED_CHANNEL, (payload) =>
    jobWatcher.nudge(payload === '' ? [] : payload.split(',')),
  );
  shutdown.onStop(stopHearingEnds);

  const admission = createKeyAdmission({
    checkKey: createKeyChecker(secrets.apiKeys),
    rateLimiter:
      config.rateLimitPerMinute > 0
        ? createTokenBucketLimiter({ perMinute: config.rateLimitPerMinute, burst: config.rateLimitBurst, now })
        : undefined,
  });
  const operations = [
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
    checkHealth,
    metrics,
    scrubber,
    webhookSecretsOf,
    webFiles,
  });
  // The operations straight from node's server; the app answers everything else and, while shutting down, everything (503).
  const nodeRouter = createNodeRouter(operations, { bodies, log });
  const server = startHttpServer(
    {
      envelope: createRequestEnvelope({ log, observeRequest: (...args) => metrics.observeRequest(...args) }),
      beforeApp: (req, res, toApp) => (shutdown.stopping ? toApp() : nodeRouter(req, res, toApp)),
      fetch: (req, ...rest) =>
        shutdown.stopping
          ? problemResponse('shutting_down', 'The service is shutting down; try again shortly.', {
              headers: { connection: 'close', 'retry-after': '5' },
            })
          : app.fetch(req, ...rest),
      hostname: config.host,
      port: config.port,
      maxRequestBodyBytes: (urlPath) => (urlPath === '/sources/batch' ? MAX_BATCH_BODY_BYTES : MAX_BODY_BYTES),
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

async function orExit<T>(value: Promise<T>): Promise<T> {
  return value.catch(exitOnConfigError);
}

/**
 * postgres.js races a transaction's body against its connection's close, so the rollback of a
 * transaction whose connection is lost fails after nobody waits for it, and a lost connection can
 * surface as an uncaught error: a database outage must not end the process. Any other unobserved
 * error still does.
 */
function surviveDatabaseOutages(log: Logger): void {
  const survivingOutages = (err: unknown) => {
    if (databaseOutage(err) === null) throw err;
    log.warn({ err }, 'a database query failed unobserved during an outage');
  };
  process.on('unhandledRejection', survivingOutages);
  process.on('uncaughtException', survivingOutages);
}

interface Tools {
  /** The configured tools, yt-dlp by the real path found. */
  paths: Config['tools'];
  /** yt-dlp's real path; null when it is not found. */
  ytdlpPath: string | null;
}

/**
 * The yt-dlp this process runs, found once and by its real path: a YTDLP_PATH that is a link
 * (.cache/yt-dlp/current, docs/yt-dlp.md) switched to a new version later changes nothing here
 * until a restart, so the resident sandbox, the jobs and /healthz all run the same version. A
 * YTDLP_COOKIES_FILE that must not be used stops start-up.
 */
async function locateTools(config: Config): Promise<Tools> {
  const found = await locateTool(config.tools.ytdlp, config.searchPath);
  const ytdlpPath = found === null ? null : await fs.realpath(found);
  if (config.ytdlpCookiesFile !== undefined) {
    const refusal = await cookiesFileRefusal(config.ytdlpCookiesFile, {
      path: ytdlpPath,
      configured: config.tools.ytdlp,
      version: (tool) => toolVersion(tool, ['--version']),
    });
    if (refusal !== null)
      exitOnConfigError(new ConfigError(`Invalid configuration:\n  YTDLP_COOKIES_FILE: ${refusal}`));
  }
  return { paths: { ...config.tools, ytdlp: ytdlpPath ?? config.tools.ytdlp }, ytdlpPath };
}

interface Basics {
  nodeId: string;
  now: () => number;
  log: Logger;
  shutdown: Shutdown;
}

/** The database and the content store, with what an earlier process of this node left behind recovered. */
async function openStorage(config: Config, { nodeId, now, log, shutdown }: Basics) {
  await fs.mkdir(config.dataDir, { recursive: true });
  await fs.mkdir(config.artifactRoot, { recursive: true });
  const database = await openDatabase(config.database, nodeId, log);
  shutdown.onStop(() => database.close());
  const store = createContentStore(
    config.artifactRoot,
    createDatabasePins({ database, holder: () => `${nodeId}:${randomUUID()}`, now }),
    nodeId,
  );
  await recoverAtStartup({
    database,
    store,
    workDir: config.workDir,
    nodeId,
    hostname: os.hostname(),
    now,
    log,
    isProcessAlive: (pid) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch (err) {
        return (err as NodeJS.ErrnoException).code === 'EPERM';
      }
    },
  });
  return { database, store };
}

interface Egress {
  resolve: ReturnType<typeof createNameResolver>['resolve'];
  guard: EgressGuard;
  /** A private folder for the guard's and the resident sandbox's sockets; null unconfined. */
  runtimeDir: string | null;
}

/**
 * One name resolver for submission, the egress guard and callbacks, each look-up bounded and
 * counted against its client (src/policy/name-resolver.ts), and the egress guard confined tools
 * reach the network through.
 */
async function startEgress(config: Config, { log, shutdown }: Pick<Basics, 'log' | 'shutdown'>): Promise<Egress> {
  const { resolve } = createNameResolver({
    servers: config.dns.servers,
    timeoutMs: config.dns.timeoutMs,
    perClient: config.dns.lookupsPerKey,
    hostsFile: config.dns.hostsFile,
  });
  // Confined tools reach the guard through its Unix socket alone, and the resident yt-dlp listens
  // on one: a private folder keeps them ours.
  const runtimeDir =
    config.confinement.mode === 'netns' ? await fs.mkdtemp(path.join(os.tmpdir(), 'source-fetch-')) : null;
  if (runtimeDir) shutdown.onStop(() => fs.rm(runtimeDir, { recursive: true, force: true }));
  if (config.egressUpstreamProxy) {
    // Neither its address nor its credentials: the operator knows them, a log reader need not.
    log.info('the egress guard reaches checked destinations through the upstream proxy (EGRESS_UPSTREAM_PROXY)');
  }
  const guard = await startEgressGuard({
    resolve,
    dial: config.egressUpstreamProxy ? createUpstreamProxyDialer(config.egressUpstreamProxy) : createTcpDialer(),
    allowHosts: config.allowHosts,
    logger: log,
    ...(runtimeDir ? { socketPath: path.join(runtimeDir, 'egress-guard.sock') } : {}),
  });
  shutdown.onStop(() => guard.close());
  return { resolve, guard, runtimeDir };
}

/**
 * The sandbox the tools run in. Fail closed: without confinement nothing is fetched (submissions
 * 503, workers idle), unless the operator chose TOOL_CONFINEMENT=off. Checked again with every
 * health check.
 */
async function startConfinement(
  config: Config,
  tools: Tools,
  egress: Egress,
  { log, shutdown, signals }: Pick<Basics, 'log' | 'shutdown'> & { signals: Signals },
) {
  const hostNetns = readHostNetns();
  // What a tool run's mount view shows besides the system: the tools' own folders.
  const viewReadOnly = await toolFolders([
    await locateTool(config.tools.ytdlp, config.searchPath),
    await locateTool(config.tools.ffmpeg, config.searchPath),
    config.confinement.python,
  ]);
  const sandbox = createResidentSandbox({
    spawned: createSandbox({
      mode: config.confinement.mode,
      unshare: config.confinement.unshare,
      python: config.confinement.python,
      prlimit: config.confinement.prlimit,
      ...(config.confinement.mountView ? { viewReadOnly } : {}),
      guardSocket: egress.guard.socketPath,
      guardAuthority: egress.guard.authority,
      hostNetns,
      run: runProcess,
    }),
    ytdlpPath: tools.ytdlpPath,
    python: config.confinement.python,
    socketPath: path.join(egress.runtimeDir ?? config.dataDir, 'resident.sock'),
    hostNetns,
    guardSocket: egress.guard.socketPath,
    enabled: config.confinement.resident,
    viewReadOnly,
    log,
    onSettled: () => signals.sandboxSettled.emit(),
  });
  let status: ConfinementStatus = await sandbox.check();
  if (config.confinement.mode === 'off') {
    log.warn('TOOL_CONFINEMENT=off: yt-dlp and ffmpeg run unconfined and can connect around the egress guard');
  } else if (!status.ok) {
    log.error(
      { reason: status.reason },
      'the tools cannot be confined: fetching is refused until this is fixed (see TOOL_CONFINEMENT)',
    );
  }
  // In the background: tools are started on their own until the resident sandbox is ready.
  await sandbox.start();
  shutdown.onStop(() => sandbox.stop());
  return {
    sandbox,
    status: () => status,
    check: async () => (status = await sandbox.check()),
  };
}
type Confinement = Awaited<ReturnType<typeof startConfinement>>;

interface StorageParts extends Basics {
  database: Database;
  store: ReturnType<typeof createContentStore>;
  signals: Signals;
}

/**
 * What keeps the store within its bounds: free space on the artifact root's volume (eviction keeps
 * STORE_MIN_FREE_BYTES of it, and a node with less takes no job and says so in /healthz), the uses
 * of artifacts (served by the app, or by nginx through its usage log), and eviction by size cap.
 */
function createStoreUpkeep(config: Config, { database, store, nodeId, now, log, shutdown, signals }: StorageParts) {
  const space = createStoreSpace({
    root: config.artifactRoot,
    minFreeBytes: config.storeMinFreeBytes,
    statfs: statfsSync,
    now,
    onShort: () => {
      log.warn(
        { free_bytes: space.freeBytes(), min_free_bytes: config.storeMinFreeBytes },
        "the artifact root's volume has less free than one job can need: taking no job, evicting",
      );
      signals.storeShort.emit();
    },
  });
  const nginxUses = createSignal<{ cid: string; at: number }>();
  const nginxUsage = config.nginxUsageLog
    ? createUsageLogReader({
        file: config.nginxUsageLog,
        onUse: (cid, at) => nginxUses.emit({ cid, at }),
        onMalformed: (lines) =>
          log.warn(
            { file: config.nginxUsageLog, lines },
            'nginx usage log: skipped lines that are not "<time> <content id>"',
          ),
        onError: (err, action) =>
          log.warn({ file: config.nginxUsageLog, code: err.code, action }, 'nginx usage log: cannot read or empty it'),
      })
    : undefined;
  const usage = createUsageRecorder({
    database,
    now,
    onError: (err) => log.error({ err }, 'recording uses failed'),
    collect: nginxUsage && (() => void nginxUsage.drain()),
  });
  nginxUses.on(({ cid, at }) => usage.touch(cid, at));
  shutdown.onStop(() => usage.stop());
  const sizeCap = createSizeCap({
    database,
    store,
    capBytes: config.artifactCapBytes,
    space,
    log,
    nodeId,
    now,
    flushUsage: () => usage.flush(),
    intervalMs: config.evictionIntervalMs,
    onEvicted: (result) => signals.evicted.emit({ artifacts: result.evictedArtifacts, bytes: result.evictedBytes }),
  });
  signals.storeShort.on(() => sizeCap.request());
  shutdown.onStop(() => sizeCap.stop());
  return { space, usage, sizeCap };
}
type StoreUpkeep = ReturnType<typeof createStoreUpkeep>;

/** The workers: each claims a job and runs it (yt-dlp, then ffmpeg, in the sandbox; then the store). */
function createWorkers(
  config: Config,
  parts: StorageParts & { tools: Tools; egress: Egress; confinement: Confinement; upkeep: StoreUpkeep },
) {
  const { database, store, tools, egress, confinement, upkeep, nodeId, now, log, shutdown, signals } = parts;
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
        sandbox: confinement.sandbox,
        mountView: config.confinement.mountView,
        ffmpegPath: tools.paths.ffmpeg,
        limits,
        makeFifo,
        log,
      })
    : undefined;
  const runJob = createFetchTask({
    database,
    store,
    now,
    sandbox: confinement.sandbox,
    mountView: config.confinement.mountView,
    tools: tools.paths,
    workDir: config.workDir,
    limits,
    converterWaiting,
    openEgressSession: (label) => egress.guard.openSession(label),
    cookiesFile: config.ytdlpCookiesFile,
    makeFifo,
    audioAnalysis: config.audioAnalysis,
    onStored: () => upkeep.sizeCap.request(),
    keyAllowance:
      config.storeBytesPerKeyPerDay === null
        ? undefined
        : { bytes: config.storeBytesPerKeyPerDay, windowMs: KEY_ALLOWANCE_WINDOW_MS },
    onDownloaded: (bytes) => signals.downloadedBytes.emit(bytes),
  });
  const workers = createWorkerPool({
    database,
    nodeId,
    concurrency: config.workerConcurrency,
    leaseMs: config.jobLeaseMs,
    maxAttempts: config.maxAttempts,
    now,
    log,
    canClaim: () => confinement.status().ok && confinement.sandbox.settled() && upkeep.space.canStoreJob(),
    runJob: async (job, ctx) => {
      const ended = await runJob(job, ctx);
      if (ended) signals.jobEnded.emit({ ended, mayHaveCallback: true });
      return ended;
    },
    onJobEnded: (ended) => signals.jobEnded.emit({ ended, mayHaveCallback: true }),
  });
  signals.sandboxSettled.on(() => workers.wake());
  shutdown.drainWorkersWith((graceMs) => workers.stop(graceMs));
  // After the workers have drained, before the sandbox stops.
  if (converterWaiting) shutdown.onStop(() => converterWaiting.close());
  return workers;
}

/**
 * Job callbacks: sent at once for jobs that end on this node, found by polling for other nodes'.
 * Jobs known to have none (most born-done ones) wake nobody: each wake is a claim query.
 */
function createCallbacks(
  config: Config,
  parts: Basics & {
    database: Database;
    egress: Egress;
    secretsOf: (keyIdentity: string) => readonly string[];
    signals: Signals;
    metrics: ReturnType<typeof createMetrics>;
    renderJob: (jobId: string) => Promise<JobRecord>;
  },
) {
  const { database, egress, secretsOf, nodeId, now, log, shutdown, signals, metrics, renderJob } = parts;
  const sendCallback = createCallbackSender({
    resolve: egress.resolve,
    dial: createTcpDialer(),
    allowHosts: config.allowHosts,
    timeoutMs: config.webhooks.timeoutMs,
    connectTimeoutMs: config.webhooks.connectTimeoutMs,
  });
  const callbacks = createDeliveryWorker({
    database,
    nodeId,
    now,
    log,
    secretsOf,
    renderJob,
    // Every attempt is counted by its result, but one cut short by this node's stop: it is given back unmade.
    send: async (request, signal) => {
      const result = await sendCallback(request, signal);
      if (result.error !== 'aborted') metrics.observeCallbackAttempt(result);
      return result;
    },
    schedule: { baseMs: config.webhooks.retryBaseMs, retryForMs: config.webhooks.retryForMs },
    leaseMs: config.webhooks.timeoutMs + CALLBACK_LEASE_MARGIN_MS,
    concurrency: config.webhooks.concurrency,
  });
  signals.jobEnded.on(({ mayHaveCallback }) => {
    if (mayHaveCallback) callbacks.wake();
  });
  shutdown.onStop(() => callbacks.stop());
  return callbacks;
}

function logFirstHealthCheck(checkHealth: ReturnType<typeof createHealthCheck>, log: Logger): void {
  void checkHealth().then(
    (report) => {
      for (const warning of report.warnings) log.warn({ code: warning.code }, warning.message);
      log.info(
        { status: report.status, downloader: report.downloader.version, warnings: report.warnings.length },
        'first health check',
      );
    },
    (err: unknown) => log.error({ err }, 'the first health check failed'),
  );
}

await main();
