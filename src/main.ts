import { randomUUID } from 'node:crypto';
import { statfsSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createApp } from './app.js';
import { ConfigError, loadConfig, type Config } from './config.js';
import type { JobRow } from './db/database.js';
import { openDatabase } from './db/open.js';
import { createArtifactOperation } from './delivery/artifact-operation.js';
import { createFileBodies } from './delivery/file-body.js';
import { createUrlSigner } from './delivery/signed-url.js';
import { createUsageLogReader } from './delivery/usage-log.js';
import { createTcpDialer, startEgressGuard } from './egress/guard.js';
import { createUpstreamProxyDialer } from './egress/upstream-proxy.js';
import { createHealthCheck } from './health.js';
import { createKeyChecker } from './http/api-key.js';
import { createJobEventStreams } from './http/job-events.js';
import { createJobRenderer } from './http/job-record.js';
import { createTokenBucketLimiter } from './http/rate-limit.js';
import { createRequestEnvelope } from './http/request-envelope.js';
import { problemResponse } from './http/problem.js';
import { createKeyAdmission } from './http/key-admission.js';
import { createNodeRouter } from './http/node-router.js';
import { jobOperations } from './http/routes/jobs.js';
import { MAX_BATCH_BODY_BYTES, MAX_BODY_BYTES, sourceOperations } from './http/routes/sources.js';
import type { JobRecord } from './http/schemas.js';
import { startHttpServer } from './http/server.js';
import { createAdmission } from './jobs/admission.js';
import { createFetchTask } from './jobs/fetch/task.js';
import { createJobService } from './jobs/job-service.js';
import { createJobWatcher, readJobRows } from './jobs/job-watch.js';
import { countQueued, type Ended } from './jobs/queue.js';
import { createWorkerPool } from './jobs/worker-pool.js';
import { databaseOutage } from './db/outage.js';
import { createLogger } from './logger.js';
import { createMetrics } from './metrics.js';
import { makeNodeId } from './ops/node-id.js';
import { createShutdown } from './ops/shutdown.js';
import { recoverAtStartup } from './ops/startup.js';
import { checkDestination } from './policy/destination.js';
import { createNameResolver } from './policy/name-resolver.js';
import { destinationOf } from './policy/source-url.js';
import { createResidentSandbox } from './sandbox/resident.js';
import { toolFolders } from './sandbox/mount-view.js';
import { createSandbox, readHostNetns, type ConfinementStatus } from './sandbox/sandbox.js';
import { loadOrCreateServiceSecret } from './secrets.js';
import { createContentStore } from './store/content-store.js';
import { readStoreTotals } from './store/eviction.js';
import { createStoreSpace } from './store/free-space.js';
import { AUDIO_ARTIFACT_NAME } from './store/layout.js';
import { KEY_ALLOWANCE_WINDOW_MS } from './store/key-allowance.js';
import { createDatabasePins } from './store/pins.js';
import { createScrubber } from './store/scrubber.js';
import { createSizeCap } from './store/size-cap.js';
import { createUsageRecorder } from './store/usage.js';
import { locateTool, toolVersion } from './tools/locate.js';
import { runProcess } from './tools/process.js';
import { netscapeCookiesProblem } from './tools/ytdlp-args.js';
import { cookiesRefusal } from './tools/ytdlp-version.js';
import { callbackRecorder } from './webhooks/deliveries.js';
import { createDeliveryWorker } from './webhooks/delivery-worker.js';
import { createCallbackSender } from './webhooks/send.js';
import { splitWebhookSecrets, webhookSecretProblem, whsecOf } from './webhooks/signature.js';

/** A callback attempt's lease outlives its time limit by this much (writing its outcome). */
const CALLBACK_LEASE_MARGIN_MS = 5_000;

/**
 * The composition root, and nothing else: configuration → database → dependencies → app and
 * workers → serve. The real clock, spawner, resolver, file system and process are wired here and
 * nowhere else.
 */
/** How often event streams look at their jobs: progress is recorded every half second. */
const JOB_EVENTS_POLL_MS = 500;

async function main(): Promise<void> {
  let config: Config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }
  // The yt-dlp this process runs, found once and by its real path: a YTDLP_PATH that is a link
  // (.cache/yt-dlp/current, docs/yt-dlp.md) switched to a new version later changes nothing here
  // until a restart, so the resident sandbox, the jobs and /healthz all run the same version.
  const ytdlpFound = await locateTool(config.tools.ytdlp, config.searchPath);
  const ytdlpPath = ytdlpFound === null ? null : await fs.realpath(ytdlpFound);
  const tools = { ...config.tools, ytdlp: ytdlpPath ?? config.tools.ytdlp };
  if (config.ytdlpCookiesFile !== undefined) {
    // Checked once here so that a wrong file stops start-up; every job checks its own copy again.
    const problem = await fs.readFile(config.ytdlpCookiesFile, 'utf8').then(netscapeCookiesProblem, (err: NodeJS.ErrnoException) => `it cannot be read (${err.code})`);
    // And a yt-dlp that would send the cookies to other hosts is not given them.
    const refusal = problem ?? cookiesRefusal(ytdlpPath ?? `${config.tools.ytdlp}, not found`, ytdlpPath === null ? null : await toolVersion(ytdlpPath, ['--version']));
    if (refusal !== null) {
      process.stderr.write(`Invalid configuration:\n  YTDLP_COOKIES_FILE: ${refusal}\n`);
      process.exit(2);
    }
  }
  const log = createLogger(config.logLevel);
  // postgres.js races a transaction's body against its connection's close, so the rollback of a
  // transaction whose connection is lost fails after nobody waits for it, and a lost connection
  // can surface as an uncaught error: a database outage must not end the process. Any other
  // unobserved error still does.
  const survivingOutages = (err: unknown) => {
    if (databaseOutage(err) === null) throw err;
    log.warn({ err }, 'a database query failed unobserved during an outage');
  };
  process.on('unhandledRejection', survivingOutages);
  process.on('uncaughtException', survivingOutages);
  const now = () => Date.now();
  const nodeId = config.nodeId ?? makeNodeId(os.hostname(), process.pid);

  await fs.mkdir(config.dataDir, { recursive: true });
  await fs.mkdir(config.artifactRoot, { recursive: true });
  const database = await openDatabase(config.database, nodeId, log);
  const store = createContentStore(config.artifactRoot, createDatabasePins({ database, holder: () => `${nodeId}:${randomUUID()}`, now }), nodeId);
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

  // Secrets the configuration leaves out are generated: in the data dir for one node (SQLite),
  // in the database for all of them (PostgreSQL; those operators must read also go to the data dir).
  const generated = (name: string, mirror: boolean, encode?: (bytes: Buffer) => string) =>
    loadOrCreateServiceSecret({ database, dataDir: config.dataDir, name, now: now(), mirror, encode });
  let apiKeys = config.apiKeys;
  if (apiKeys.length === 0) {
    const key = await generated('api-key', true);
    apiKeys = [key.value];
    log.warn({ file: key.file, created: key.created }, 'API_KEYS is not set: using the generated key kept in this file');
  }
  const signingSecret = config.urlSigningSecret ?? (await generated('url-signing-secret', false)).value;
  let webhookSecret = config.webhooks.secret;
  if (webhookSecret === undefined) {
    // Generated in the Standard Webhooks form (whsec_); a file holding any secret WEBHOOK_SECRET takes is used as it is.
    const secret = await generated('webhook-secret', true, whsecOf);
    const problem = splitWebhookSecrets(secret.value).map(webhookSecretProblem).find((found) => found !== null);
    if (problem) {
      process.stderr.write(`Invalid webhook secret in ${secret.file ?? 'the database'}: ${problem}\n`);
      process.exit(2);
    }
    webhookSecret = secret.value;
    log.info({ file: secret.file, created: secret.created }, 'WEBHOOK_SECRET is not set: callbacks are signed with the generated secret kept in this file');
  }
  if (config.allowHosts.length > 0) {
    log.warn({ hosts: config.fetchAllowHosts }, 'FETCH_ALLOW_HOSTS is set: these destinations bypass the address policy');
  }

  // One resolver for submission, the egress guard and callbacks, each look-up bounded and
  // counted against its client (src/policy/name-resolver.ts).
  const { resolve } = createNameResolver({
    servers: config.dns.servers,
    timeoutMs: config.dns.timeoutMs,
    perClient: config.dns.lookupsPerKey,
    hostsFile: config.dns.hostsFile,
  });
  // Confined tools reach the guard through its Unix socket alone, and the resident yt-dlp listens
  // on one: a private folder keeps them ours.
  const runtimeDir = config.confinement.mode === 'netns' ? await fs.mkdtemp(path.join(os.tmpdir(), 'source-fetch-')) : null;
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
  const hostNetns = readHostNetns();
  // What a tool run's mount view shows besides the system: the tools' own folders.
  const viewReadOnly = await toolFolders([
    await locateTool(config.tools.ytdlp, config.searchPath),
    await locateTool(config.tools.ffmpeg, config.searchPath),
    config.confinement.python,
  ]);
  let wakeWorkers = () => {};
  const sandbox = createResidentSandbox({
    spawned: createSandbox({
      mode: config.confinement.mode,
      unshare: config.confinement.unshare,
      python: config.confinement.python,
      prlimit: config.confinement.prlimit,
      ...(config.confinement.mountView ? { viewReadOnly } : {}),
      guardSocket: guard.socketPath,
      guardAuthority: guard.authority,
      hostNetns,
      run: runProcess,
    }),
    ytdlpPath,
    python: config.confinement.python,
    socketPath: path.join(runtimeDir ?? config.dataDir, 'resident.sock'),
    hostNetns,
    guardSocket: guard.socketPath,
    enabled: config.confinement.resident,
    viewReadOnly,
    log,
    onSettled: () => wakeWorkers(),
  });
  // Fail closed: without confinement nothing is fetched (submissions 503, workers idle), unless
  // the operator chose TOOL_CONFINEMENT=off. Checked again with every health check.
  let confinement: ConfinementStatus = await sandbox.check();
  if (config.confinement.mode === 'off') {
    log.warn('TOOL_CONFINEMENT=off: yt-dlp and ffmpeg run unconfined and can connect around the egress guard');
  } else if (!confinement.ok) {
    log.error({ reason: confinement.reason }, 'the tools cannot be confined: fetching is refused until this is fixed (see TOOL_CONFINEMENT)');
  }
  // In the background: tools are started on their own until the resident sandbox is ready.
  await sandbox.start();

  // Free space on the artifact root's volume: eviction keeps STORE_MIN_FREE_BYTES of it, and a
  // node with less takes no job (canClaim below) and says so in /healthz.
  const storeSpace = createStoreSpace({
    root: config.artifactRoot,
    minFreeBytes: config.storeMinFreeBytes,
    statfs: statfsSync,
    now,
    onShort: () => {
      log.warn({ free_bytes: storeSpace.freeBytes(), min_free_bytes: config.storeMinFreeBytes }, "the artifact root's volume has less free than one job can need: taking no job, evicting");
      sizeCap.request();
    },
  });
  const checkHealth = createHealthCheck({
    tools,
    checkConfinement: async () => (confinement = await sandbox.check()),
    locate: (tool) => locateTool(tool, config.searchPath),
    version: toolVersion,
    pingDatabase: () => database.ping(),
    databaseKind: database.kind,
    nodeId,
    artifactRoot: config.artifactRoot,
    storeSpace,
    now,
  });
  void checkHealth().then(
    (report) => {
      for (const warning of report.warnings) log.warn({ code: warning.code }, warning.message);
      log.info({ status: report.status, downloader: report.downloader.version, warnings: report.warnings.length }, 'first health check');
    },
    (err: unknown) => log.error({ err }, 'the first health check failed'),
  );
  let busyWorkers = () => 0;
  const metrics = createMetrics({
    queueDepth: () => countQueued(database),
    busyWorkers: () => busyWorkers(),
    storeTotals: () => readStoreTotals(database),
    storeFreeBytes: () => storeSpace.freeBytes(),
    storeMinFreeBytes: config.storeMinFreeBytes,
    downloaderPresent: async () => (await checkHealth()).downloader.present,
    downloaderRelease: async () => {
      const { version, released_on: releasedOn } = (await checkHealth()).downloader;
      return version !== null && releasedOn !== null ? { version, releasedAtMs: Date.parse(releasedOn) } : null;
    },
  });
  const nginxUsage = config.nginxUsageLog
    ? createUsageLogReader({
        file: config.nginxUsageLog,
        onUse: (cid, at) => usage.touch(cid, at),
        onMalformed: (lines) => log.warn({ file: config.nginxUsageLog, lines }, 'nginx usage log: skipped lines that are not "<time> <content id>"'),
        onError: (err, action) => log.warn({ file: config.nginxUsageLog, code: err.code, action }, 'nginx usage log: cannot read or empty it'),
      })
    : undefined;
  const usage = createUsageRecorder({
    database,
    now,
    onError: (err) => log.error({ err }, 'recording uses failed'),
    collect: nginxUsage && (() => void nginxUsage.drain()),
  });
  const sizeCap = createSizeCap({
    database,
    store,
    capBytes: config.artifactCapBytes,
    space: storeSpace,
    log,
    nodeId,
    now,
    flushUsage: () => usage.flush(),
    intervalMs: config.evictionIntervalMs,
    onEvicted: (result) => metrics.observeEviction(result.evictedArtifacts, result.evictedBytes),
  });
  const scrubber = createScrubber({ database, store, nodeId, log, now, metrics, ...config.scrub });

  const runJob = createFetchTask({
    database,
    store,
    now,
    sandbox,
    mountView: config.confinement.mountView,
    tools,
    workDir: config.workDir,
    limits: {
      timeoutMs: config.fetchTimeoutMs,
      metadataTimeoutMs: config.metadataTimeoutMs,
      downloadStall: config.downloadStall,
      maxDownloadBytes: config.maxDownloadBytes,
      maxOutputBytes: config.maxOutputBytes,
      maxDurationS: config.maxDurationS,
      tool: config.toolLimits,
    },
    openEgressSession: (label) => guard.openSession(label),
    cookiesFile: config.ytdlpCookiesFile,
    onStored: () => sizeCap.request(),
    keyAllowance: config.storeBytesPerKeyPerDay === null ? undefined : { bytes: config.storeBytesPerKeyPerDay, windowMs: KEY_ALLOWANCE_WINDOW_MS },
    onDownloaded: (bytes) => metrics.addDownloadedBytes(bytes),
  });
  const workers = createWorkerPool({
    database,
    nodeId,
    concurrency: config.workerConcurrency,
    leaseMs: config.jobLeaseMs,
    maxAttempts: config.maxAttempts,
    now,
    log,
    canClaim: () => confinement.ok && sandbox.settled() && storeSpace.canStoreJob(),
    runJob: async (job, ctx) => {
      const ended = await runJob(job, ctx);
      if (ended) jobEnded(ended);
      return ended;
    },
    onJobEnded: (ended) => jobEnded(ended),
  });
  busyWorkers = () => workers.busyCount();
  wakeWorkers = () => workers.wake();

  const signer = createUrlSigner(signingSecret, { now });
  const jobs = createJobService({
    database,
    now,
    newJobId: randomUUID,
    recordCallback: callbackRecorder(randomUUID),
    checkDestination: async (target, apiKeyId) => {
      const { host, port } = destinationOf(target);
      await checkDestination(host, port, { resolve, allowHosts: config.allowHosts, client: `key:${apiKeyId ?? ''}` });
    },
    contentPresent: (cid) => store.hasSync(cid, AUDIO_ARTIFACT_NAME),
    admitJob: createAdmission({ database, maxQueuedJobs: config.maxQueuedJobs, confinementOk: () => confinement.ok }),
    onEnded: (ended, mayHaveCallback) => jobEnded(ended, mayHaveCallback),
  });
  const renderView = createJobRenderer((cid, name) => {
    const signed = signer.sign(cid, name, config.signedUrlTtlS);
    return { query: signed.query, expiresAt: signed.expires * 1000 };
  }, now);
  const renderJob = async (job: JobRow): Promise<JobRecord> => renderView(await jobs.view(job));
  const readJob = async (id: string): Promise<JobRecord> => renderView(await jobs.read(id));
  const sendCallback = createCallbackSender({
    resolve,
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
    secret: webhookSecret,
    renderJob: async (jobId) => renderJob(await jobs.get(jobId)),
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
  // Jobs that end on this node have their callbacks sent at once; other nodes' are found by
  // polling. Jobs known to have none (most born-done ones) wake nobody: each wake is a claim query.
  function jobEnded(ended: Ended, mayHaveCallback = true): void {
    metrics.observeEnded(ended);
    if (mayHaveCallback) callbacks.wake();
  }

  // Event streams follow jobs in the database, whichever node runs them: one query per tick for all.
  const jobWatcher = createJobWatcher({
    readJobs: (ids) => readJobRows(database, ids),
    render: renderJob,
    intervalMs: JOB_EVENTS_POLL_MS,
    onError: (err) => log.error({ err }, 'reading watched jobs failed'),
  });
  const jobEvents = createJobEventStreams({ watcher: jobWatcher, render: renderJob, ...config.events });

  const admission = createKeyAdmission({
    checkKey: createKeyChecker(apiKeys),
    rateLimiter:
      config.rateLimitPerMinute > 0 ? createTokenBucketLimiter({ perMinute: config.rateLimitPerMinute, burst: config.rateLimitBurst, now }) : undefined,
  });
  const operations = [
    ...sourceOperations({
      admission,
      submit: (input, requestId) => jobs.submit(input, requestId),
      submitBatch: (input, requestId) => jobs.submitBatch(input, requestId),
      render: renderJob,
      renderView,
    }),
    ...jobOperations({ admission, read: readJob, cancel: (id) => jobs.cancel(id), render: renderJob }),
    createArtifactOperation({
      artifactRoot: config.artifactRoot,
      accelRedirectPrefix: config.accelRedirectPrefix,
      admission,
      signer,
      onServed: (cid) => usage.touch(cid),
      now,
    }),
  ];
  const bodies = createFileBodies();
  const app = createApp({ log, admission, operations, bodies, getJob: (id) => jobs.get(id), jobEvents, checkHealth, metrics, scrubber });
  // The operations straight from node's server; the app answers everything else and, while shutting down, everything (503).
  const nodeRouter = createNodeRouter(operations, { bodies, log });
  const server = startHttpServer(
    {
      envelope: createRequestEnvelope({ log, observeRequest: (...args) => metrics.observeRequest(...args) }),
      beforeApp: (req, res, toApp) => (shutdown.stopping ? toApp() : nodeRouter(req, res, toApp)),
      fetch: (req, ...rest) =>
        shutdown.stopping
          ? problemResponse(503, 'shutting_down', 'The service is shutting down; try again shortly.', { headers: { connection: 'close', 'retry-after': '5' } })
          : app.fetch(req, ...rest),
      hostname: config.host,
      port: config.port,
      maxRequestBodyBytes: (path) => (path === '/sources/batch' ? MAX_BATCH_BODY_BYTES : MAX_BODY_BYTES),
      connections: config.http,
      log,
    },
    (info) => {
      log.info({ host: info.address, port: info.port, node_id: nodeId, database: database.kind, artifact_root: config.artifactRoot, workers: config.workerConcurrency }, 'listening');
    },
  );
  const shutdown = createShutdown({
    log,
    graceMs: config.shutdownGraceMs,
    closeServer: () => {
      server.close();
      // Ended cleanly now, not cut off at exit: their clients resume (Last-Event-ID) on another node.
      jobEvents.closeAll();
      jobWatcher.stop();
      (server as { closeIdleConnections?: () => void }).closeIdleConnections?.();
    },
    stopWorkers: (graceMs) => workers.stop(graceMs),
    then: [
      () => callbacks.stop(),
      () => sizeCap.stop(),
      () => scrubber.stop(),
      () => usage.stop(),
      () => sandbox.stop(),
      () => guard.close(),
      async () => {
        if (runtimeDir) await fs.rm(runtimeDir, { recursive: true, force: true });
      },
      () => database.close(),
    ],
    exit: (code) => process.exit(code),
  });
  process.on('SIGTERM', () => void shutdown.run('SIGTERM'));
  process.on('SIGINT', () => void shutdown.run('SIGINT'));

  // An API-only node (WORKER_CONCURRENCY=0) claims nothing, but still takes back dead nodes' jobs.
  await workers.start();
  callbacks.start();
  usage.start();
  sizeCap.start();
  scrubber.start();
}

await main();
