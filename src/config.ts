import path from 'node:path';
import { z } from 'zod';
import { parseUpstreamProxy, type UpstreamProxy } from './egress/upstream-proxy.js';
import { parseAllowHosts, type AllowList } from './policy/destination.js';
import { isNameServer } from './policy/name-resolver.js';
import { splitWebhookSecrets, webhookSecretProblem } from './webhooks/signature.js';

/**
 * The service's configuration: the only module that reads the environment. Everything else
 * receives a Config. A bad value stops start-up with a message naming the variable.
 */

const positiveInt = (fallback: number) => z.coerce.number().int().positive().default(fallback);
const commaList = z
  .string()
  .default('')
  .transform((value) =>
    value
      .split(',')
      .map((entry) => entry.trim())
      .filter((entry) => entry !== ''),
  );
const optionalString = z
  .string()
  .optional()
  .transform((value) => (value === undefined || value.trim() === '' ? undefined : value.trim()));

const envSchema = z.object({
  HOST: z.string().min(1).default('127.0.0.1'),
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  HTTP_HEADERS_TIMEOUT_S: positiveInt(10),
  HTTP_REQUEST_TIMEOUT_S: positiveInt(60),
  HTTP_MAX_IDLE_CONNECTIONS: positiveInt(256),
  HTTP_MAX_CONNECTIONS: positiveInt(1024),
  DATA_DIR: z.string().min(1).default('./data'),
  DATABASE_URL: optionalString.refine((value) => value === undefined || /^postgres(ql)?:\/\//.test(value), {
    message: 'must be a postgres:// URL (unset: SQLite in DATA_DIR)',
  }),
  DATABASE_POOL_SIZE: positiveInt(10),
  NODE_ID: optionalString.refine((value) => value === undefined || /^[A-Za-z0-9._-]{1,64}$/.test(value), {
    message: 'must be 1 to 64 letters, digits, dots, dashes or underscores',
  }),
  JOB_LEASE_S: positiveInt(30),
  ARTIFACT_ROOT: optionalString,
  API_KEYS: commaList.refine((keys) => keys.every((key) => key.length >= 16 && !/\s/.test(key)), {
    message: 'each key must be at least 16 characters with no whitespace',
  }),
  YTDLP_PATH: z.string().min(1).default('yt-dlp'),
  YTDLP_COOKIES_FILE: optionalString,
  FFMPEG_PATH: z.string().min(1).default('ffmpeg'),
  TOOL_CONFINEMENT: z.enum(['netns', 'off']).default('netns'),
  UNSHARE_PATH: z.string().min(1).default('unshare'),
  PRLIMIT_PATH: z.string().min(1).default('prlimit'),
  SANDBOX_PYTHON: z.string().min(1).default('/usr/bin/python3'),
  RESIDENT_SANDBOX: z.enum(['on', 'off']).default('on'),
  TOOL_MOUNT_VIEW: z.enum(['on', 'off']).default('on'),
  WORKER_CONCURRENCY: z.coerce.number().int().min(0).max(64).default(2),
  FETCH_TIMEOUT_S: positiveInt(1800),
  METADATA_TIMEOUT_S: positiveInt(60),
  DOWNLOAD_STALL_S: positiveInt(30),
  DOWNLOAD_MIN_BYTES_PER_S: z.coerce.number().int().min(0).default(2048),
  TOOL_MEMORY_BYTES: z.coerce.number().int().min(64 * 1024 ** 2, { message: 'must be at least 64 MiB' }).default(1024 ** 3),
  TOOL_CPU_S: positiveInt(600),
  TOOL_MAX_PROCESSES: z.coerce.number().int().min(8, { message: 'must be at least 8' }).default(256),
  MAX_DOWNLOAD_BYTES: positiveInt(2 * 1024 ** 3),
  MAX_OUTPUT_BYTES: z.coerce
    .number()
    .int()
    .min(1024 ** 2, { message: 'must be at least 1 MiB' })
    .max(2 ** 32 - 1, { message: 'must be below 4 GiB, the largest WAV' })
    .default(2 * 1024 ** 3),
  MAX_DURATION_S: positiveInt(3 * 3600),
  MAX_ATTEMPTS: positiveInt(3),
  MAX_QUEUED_JOBS: positiveInt(1000),
  RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(0).default(1200),
  RATE_LIMIT_BURST: z.coerce.number().int().positive().optional(),
  ARTIFACT_CAP_BYTES: positiveInt(50 * 1024 ** 3),
  /** Unset: a quarter of ARTIFACT_CAP_BYTES; 0: no bound per key. */
  STORE_BYTES_PER_KEY_PER_DAY: z.coerce.number().int().min(0).optional(),
  /** Unset: MAX_DOWNLOAD_BYTES + MAX_OUTPUT_BYTES, what one job can need. */
  STORE_MIN_FREE_BYTES: z.coerce.number().int().min(0).optional(),
  EVICTION_INTERVAL_S: positiveInt(60),
  DNS_SERVERS: commaList.refine((servers) => servers.every(isNameServer), {
    message: 'each server must be ip, ip:port or [ipv6]:port',
  }),
  DNS_TIMEOUT_S: z.coerce.number().positive().max(60).default(5),
  DNS_LOOKUPS_PER_KEY: positiveInt(8),
  HOSTS_FILE: z.string().default('/etc/hosts'),
  FETCH_ALLOW_HOSTS: commaList.transform((entries, ctx) => {
    try {
      return { entries, list: parseAllowHosts(entries) };
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
      return z.NEVER;
    }
  }),
  ACCEL_REDIRECT_PREFIX: optionalString.refine((value) => value === undefined || /^\/[^\s?#]*\/$/.test(value), {
    message: 'must be a path that starts and ends with "/", for example /_artifacts/',
  }),
  /** nginx's log of the artifacts it served on signed URLs (nginx/templates), read for eviction. */
  NGINX_USAGE_LOG: optionalString,
  URL_SIGNING_SECRET: optionalString.refine((value) => value === undefined || value.length >= 32, {
    message: 'must be at least 32 characters',
  }),
  SIGNED_URL_TTL_S: positiveInt(24 * 3600),
  EGRESS_UPSTREAM_PROXY: optionalString.transform((value, ctx) => {
    if (value === undefined) return undefined;
    const proxy = parseUpstreamProxy(value);
    // The message never repeats the value: it may hold a password.
    if (typeof proxy === 'string') {
      ctx.addIssue({ code: 'custom', message: proxy });
      return z.NEVER;
    }
    return proxy;
  }),
  EVENTS_KEEPALIVE_S: z.coerce
    .number()
    .int()
    .min(1)
    .max(50, { message: "must be at most 50, below nginx's proxy_read_timeout (60 s)" })
    .default(15),
  EVENT_STREAMS_PER_KEY: positiveInt(20),
  EVENT_STREAMS_PER_NODE: positiveInt(500),
  /** One secret, or several separated by spaces or commas (rotation): each signs every callback. */
  WEBHOOK_SECRET: optionalString.transform((value, ctx) => {
    if (value === undefined) return undefined;
    const secrets = splitWebhookSecrets(value);
    if (secrets.length === 0) ctx.addIssue({ code: 'custom', message: 'names no secret' });
    // The message says which secret by its place, never by its value.
    secrets.forEach((secret, i) => {
      const problem = webhookSecretProblem(secret);
      if (problem !== null) ctx.addIssue({ code: 'custom', message: secrets.length > 1 ? `secret ${i + 1}: ${problem}` : problem });
    });
    return secrets.join(' ');
  }),
  WEBHOOK_TIMEOUT_S: positiveInt(10),
  WEBHOOK_CONNECT_TIMEOUT_S: z.coerce.number().positive().max(60).default(3),
  WEBHOOK_CONCURRENCY: positiveInt(16),
  WEBHOOK_CONCURRENCY_PER_KEY: positiveInt(4),
  WEBHOOK_CONCURRENCY_PER_RECEIVER: positiveInt(2),
  /** Fractions allowed: the first retry's delay, doubled for each one after it. */
  WEBHOOK_RETRY_BASE_S: z.coerce.number().positive().max(3600).default(5),
  WEBHOOK_RETRY_FOR_S: positiveInt(24 * 3600),
  SHUTDOWN_GRACE_S: z.coerce.number().int().min(0).default(30),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** Where bare tool names (yt-dlp, ffmpeg) are looked up. */
  PATH: z.string().default(''),
  SCRUB_INTERVAL_S: z.coerce
    .number()
    .int()
    .min(0)
    .default(24 * 3600)
    .describe('How often the store scrub reads every stored artifact and checks its SHA-256 against its content id, in seconds, once per interval among all nodes (docs/scrub.md); 0: only when asked (source-fetch scrub).'),
  SCRUB_BYTES_PER_S: positiveInt(32 * 1024 ** 2).describe("The store scrub's read rate limit, bytes per second, so that it never competes with delivery for the disk."),
})
  .superRefine((e, ctx) => {
    if (e.HTTP_HEADERS_TIMEOUT_S > e.HTTP_REQUEST_TIMEOUT_S) {
      ctx.addIssue({ code: 'custom', path: ['HTTP_HEADERS_TIMEOUT_S'], message: 'must be at most HTTP_REQUEST_TIMEOUT_S' });
    }
    if (e.HTTP_MAX_IDLE_CONNECTIONS >= e.HTTP_MAX_CONNECTIONS) {
      ctx.addIssue({ code: 'custom', path: ['HTTP_MAX_IDLE_CONNECTIONS'], message: 'must be below HTTP_MAX_CONNECTIONS, which keeps the rest for requests under way' });
    }
  });

export interface Config {
  host: string;
  port: number;
  /** The app port's bounds (src/http/server.ts): request head and request time limits, idle and all connections. */
  http: { headersTimeoutMs: number; requestTimeoutMs: number; maxIdle: number; maxTotal: number };
  dataDir: string;
  /** PostgreSQL, shared by every node; or SQLite in the data dir (one node). */
  database: { kind: 'postgres'; url: string; poolSize: number } | { kind: 'sqlite'; path: string };
  /** This process among the nodes: its leases and pins carry it. Unset: made unique per start. */
  nodeId: string | undefined;
  /** A running job's lease: renewed every second; a dead node's jobs are taken back after it. */
  jobLeaseMs: number;
  artifactRoot: string;
  /** Per-job working folders; on the data dir, never served. */
  workDir: string;
  /** Configured keys; empty means "generate one and keep it in the data dir" (see secrets.ts). */
  apiKeys: string[];
  tools: { ytdlp: string; ffmpeg: string };
  /** A Netscape cookies file for yt-dlp (each job gets a copy); never logged. */
  ytdlpCookiesFile: string | undefined;
  /**
   * How the tools are kept from the network but through the egress guard (src/sandbox); resident:
   * whether they run in the resident sandbox, yt-dlp imported once (src/sandbox/resident.ts).
   */
  confinement: { mode: 'netns' | 'off'; unshare: string; python: string; prlimit: string; resident: boolean; mountView: boolean };
  /** Ceilings of every tool run, set by the sandbox (src/sandbox/limits.ts); file sizes are per run. */
  toolLimits: { memoryBytes: number; cpuSeconds: number; processes: number };
  workerConcurrency: number;
  fetchTimeoutMs: number;
  /** The metadata step's own time limit, within fetchTimeoutMs. */
  metadataTimeoutMs: number;
  /** A download that gains fewer than minBytes over any windowMs is stopped (download_stalled). */
  downloadStall: { windowMs: number; minBytes: number };
  maxDownloadBytes: number;
  /** The largest WAV a job may store. */
  maxOutputBytes: number;
  maxDurationS: number;
  maxAttempts: number;
  maxQueuedJobs: number;
  /** Requests a minute per API key; 0: no limit. */
  rateLimitPerMinute: number;
  /** Token bucket size per key. */
  rateLimitBurst: number;
  artifactCapBytes: number;
  /** New content one API key may store over a rolling day (src/store/key-allowance.ts); null: no bound. */
  storeBytesPerKeyPerDay: number | null;
  /** Free space kept on the artifact root's volume (src/store/free-space.ts); a node with less takes no job. */
  storeMinFreeBytes: number;
  evictionIntervalMs: number;
  /**
   * Name look-ups (src/policy/name-resolver.ts): servers (empty: /etc/resolv.conf's), one
   * look-up's time limit, look-ups in flight per client, and the hosts file read first (null: none).
   */
  dns: { servers: string[]; timeoutMs: number; lookupsPerKey: number; hostsFile: string | null };
  /** FETCH_ALLOW_HOSTS as written (for the start-up warning) and parsed. */
  fetchAllowHosts: string[];
  allowHosts: AllowList;
  searchPath: string;
  accelRedirectPrefix: string | null;
  nginxUsageLog: string | null;
  urlSigningSecret: string | undefined;
  signedUrlTtlS: number;
  /** The operator's HTTP proxy that the egress guard reaches checked addresses through; unset: direct. */
  egressUpstreamProxy: UpstreamProxy | undefined;
  /** getJobEvents: comment keep-alives this often, and how many streams a key and the node may hold. */
  events: { keepAliveMs: number; maxPerKey: number; maxPerNode: number };
  /**
   * Callbacks (src/webhooks): signing secrets, space-separated, each of which signs (undefined:
   * generated), one attempt's time limit and its connect's, retries, and attempts in flight on
   * this node: in all, per key, per receiver.
   */
  webhooks: {
    secret: string | undefined;
    timeoutMs: number;
    connectTimeoutMs: number;
    retryBaseMs: number;
    retryForMs: number;
    concurrency: { total: number; perKey: number; perReceiver: number };
  };
  shutdownGraceMs: number;
  logLevel: z.infer<typeof envSchema>['LOG_LEVEL'];
  /** The store scrub (src/store/scrubber.ts): how often (0: on request only), its read rate, and where corrupt files go (DATA_DIR/quarantine). */
  scrub: { intervalMs: number; bytesPerSecond: number; quarantineDir: string };
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export function loadConfig(env: Record<string, string | undefined>): Config {
  const parsed = envSchema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `${issue.path.join('.') || '(environment)'}: ${issue.message}`);
    throw new ConfigError(`Invalid configuration:\n  ${lines.join('\n  ')}`);
  }
  const e = parsed.data;
  const dataDir = path.resolve(e.DATA_DIR);
  const storeBytesPerKey = e.STORE_BYTES_PER_KEY_PER_DAY ?? Math.floor(e.ARTIFACT_CAP_BYTES / 4);
  return {
    host: e.HOST,
    port: e.PORT,
    http: {
      headersTimeoutMs: e.HTTP_HEADERS_TIMEOUT_S * 1000,
      requestTimeoutMs: e.HTTP_REQUEST_TIMEOUT_S * 1000,
      maxIdle: e.HTTP_MAX_IDLE_CONNECTIONS,
      maxTotal: e.HTTP_MAX_CONNECTIONS,
    },
    dataDir,
    database:
      e.DATABASE_URL !== undefined
        ? { kind: 'postgres', url: e.DATABASE_URL, poolSize: e.DATABASE_POOL_SIZE }
        : { kind: 'sqlite', path: path.join(dataDir, 'source-fetch.sqlite') },
    nodeId: e.NODE_ID,
    jobLeaseMs: e.JOB_LEASE_S * 1000,
    artifactRoot: path.resolve(e.ARTIFACT_ROOT ?? path.join(dataDir, 'artifacts')),
    workDir: path.join(dataDir, 'work'),
    apiKeys: e.API_KEYS,
    tools: { ytdlp: e.YTDLP_PATH, ffmpeg: e.FFMPEG_PATH },
    ytdlpCookiesFile: e.YTDLP_COOKIES_FILE === undefined ? undefined : path.resolve(e.YTDLP_COOKIES_FILE),
    confinement: { mode: e.TOOL_CONFINEMENT, unshare: e.UNSHARE_PATH, python: e.SANDBOX_PYTHON, prlimit: e.PRLIMIT_PATH, resident: e.RESIDENT_SANDBOX === 'on', mountView: e.TOOL_MOUNT_VIEW === 'on' },
    toolLimits: { memoryBytes: e.TOOL_MEMORY_BYTES, cpuSeconds: e.TOOL_CPU_S, processes: e.TOOL_MAX_PROCESSES },
    workerConcurrency: e.WORKER_CONCURRENCY,
    fetchTimeoutMs: e.FETCH_TIMEOUT_S * 1000,
    metadataTimeoutMs: e.METADATA_TIMEOUT_S * 1000,
    downloadStall: { windowMs: e.DOWNLOAD_STALL_S * 1000, minBytes: e.DOWNLOAD_STALL_S * e.DOWNLOAD_MIN_BYTES_PER_S },
    maxDownloadBytes: e.MAX_DOWNLOAD_BYTES,
    maxOutputBytes: e.MAX_OUTPUT_BYTES,
    maxDurationS: e.MAX_DURATION_S,
    maxAttempts: e.MAX_ATTEMPTS,
    maxQueuedJobs: e.MAX_QUEUED_JOBS,
    rateLimitPerMinute: e.RATE_LIMIT_PER_MINUTE,
    rateLimitBurst: e.RATE_LIMIT_BURST ?? e.RATE_LIMIT_PER_MINUTE,
    artifactCapBytes: e.ARTIFACT_CAP_BYTES,
    storeBytesPerKeyPerDay: storeBytesPerKey === 0 ? null : storeBytesPerKey,
    storeMinFreeBytes: e.STORE_MIN_FREE_BYTES ?? e.MAX_DOWNLOAD_BYTES + e.MAX_OUTPUT_BYTES,
    evictionIntervalMs: e.EVICTION_INTERVAL_S * 1000,
    dns: {
      servers: e.DNS_SERVERS,
      timeoutMs: Math.round(e.DNS_TIMEOUT_S * 1000),
      lookupsPerKey: e.DNS_LOOKUPS_PER_KEY,
      hostsFile: e.HOSTS_FILE.trim() === '' ? null : path.resolve(e.HOSTS_FILE.trim()),
    },
    fetchAllowHosts: e.FETCH_ALLOW_HOSTS.entries,
    allowHosts: e.FETCH_ALLOW_HOSTS.list,
    searchPath: e.PATH,
    accelRedirectPrefix: e.ACCEL_REDIRECT_PREFIX ?? null,
    nginxUsageLog: e.NGINX_USAGE_LOG === undefined ? null : path.resolve(e.NGINX_USAGE_LOG),
    urlSigningSecret: e.URL_SIGNING_SECRET,
    signedUrlTtlS: e.SIGNED_URL_TTL_S,
    egressUpstreamProxy: e.EGRESS_UPSTREAM_PROXY,
    events: { keepAliveMs: e.EVENTS_KEEPALIVE_S * 1000, maxPerKey: e.EVENT_STREAMS_PER_KEY, maxPerNode: e.EVENT_STREAMS_PER_NODE },
    webhooks: {
      secret: e.WEBHOOK_SECRET,
      timeoutMs: e.WEBHOOK_TIMEOUT_S * 1000,
      connectTimeoutMs: Math.round(e.WEBHOOK_CONNECT_TIMEOUT_S * 1000),
      retryBaseMs: Math.round(e.WEBHOOK_RETRY_BASE_S * 1000),
      retryForMs: e.WEBHOOK_RETRY_FOR_S * 1000,
      concurrency: { total: e.WEBHOOK_CONCURRENCY, perKey: e.WEBHOOK_CONCURRENCY_PER_KEY, perReceiver: e.WEBHOOK_CONCURRENCY_PER_RECEIVER },
    },
    shutdownGraceMs: e.SHUTDOWN_GRACE_S * 1000,
    logLevel: e.LOG_LEVEL,
    scrub: { intervalMs: e.SCRUB_INTERVAL_S * 1000, bytesPerSecond: e.SCRUB_BYTES_PER_S, quarantineDir: path.join(dataDir, 'quarantine') },
  };
}
