import path from 'node:path';
import { z } from 'zod';
import { parseUpstreamProxy, type UpstreamProxy } from './egress/upstream-proxy.js';
import { parseAddressRanges, type AddressRanges } from './policy/client-address.js';
import { parseAllowHosts, type AllowList } from './policy/destination.js';
import { isNameServer } from './policy/name-resolver.js';
import { splitWebhookSecrets, webhookSecretProblem } from './webhooks/signature.js';

/**
 * The service's configuration: the only module that reads the environment. Everything else
 * receives a Config. A bad value stops start-up with a message naming the variable.
 *
 * Every key carries its documentation: `.describe()` (one or two sentences), or `.meta()` with a
 * `description` and a `defaultText` where the default is not a value of the schema (computed from
 * other keys, generated, or the system's). docs/configuration.md's table is made from them
 * (`npm run docs:config`, scripts/config-doc.ts), and a test fails when a key has none. Calling
 * them last in a key's chain keeps them on the key's own schema; the generator also looks inside
 * `.default()`, `.optional()` and `.transform()`, which wrap a schema in a new one without its
 * metadata.
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

export const envSchema = z
  .object({
    HOST: z.string().min(1).default('127.0.0.1').describe('Address to listen on.'),
    PORT: z.coerce
      .number()
      .int()
      .min(0)
      .max(65535)
      .default(8080)
      .describe('Port to listen on; `0`: any free port, logged.'),
    HTTP_HEADERS_TIMEOUT_S: positiveInt(10).describe(
      'A request head must arrive whole within this many seconds, else 408 and the connection is closed ([the app port without nginx](threat-model.md#the-app-port-without-nginx)).',
    ),
    HTTP_REQUEST_TIMEOUT_S: positiveInt(60).describe(
      'A whole request, body included, must arrive within this many seconds; at least `HTTP_HEADERS_TIMEOUT_S`.',
    ),
    HTTP_MAX_IDLE_CONNECTIONS: positiveInt(256).describe(
      'Connections without a request under way (no whole head yet, or kept alive between requests), below `HTTP_MAX_CONNECTIONS`; past it the one idle the longest is closed.',
    ),
    HTTP_MAX_CONNECTIONS: positiveInt(1024).describe(
      'All connections on the app port; past it the oldest idle one is closed, or the new one when none is idle. What it has above `HTTP_MAX_IDLE_CONNECTIONS` is kept for requests under way.',
    ),
    HTTP_MAX_CONNECTIONS_PER_CLIENT: z.coerce.number().int().positive().optional().meta({
      description:
        'Connections from one client address (an IPv6 /64 counts as one), below `HTTP_MAX_CONNECTIONS`, so that one client never holds them all; past it its new connection is closed. Peers in `HTTP_PROXY_ADDRESSES` are not capped.',
      defaultText: 'an eighth of `HTTP_MAX_CONNECTIONS` (128)',
    }),
    HTTP_PROXY_ADDRESSES: z
      .string()
      .default('127.0.0.0/8,::1')
      .transform((value) =>
        value
          .split(',')
          .map((entry) => entry.trim())
          .filter((entry) => entry !== ''),
      )
      .transform((entries, ctx) => {
        const ranges = parseAddressRanges(entries);
        if (typeof ranges === 'string') {
          ctx.addIssue({ code: 'custom', message: ranges });
          return z.NEVER;
        }
        return { entries, ranges };
      })
      .describe(
        "Addresses and CIDR ranges of the proxies in front of the app (nginx), comma-separated: they carry many clients' requests, so their connections are not capped per client. Default: loopback, where nginx on the same host connects from; empty: every peer is capped.",
      ),
    HTTP_KEEP_ALIVE_TIMEOUT_S: positiveInt(75).describe(
      "A connection kept alive between requests is closed after this many seconds without one (told to clients in `Keep-Alive: timeout=`). Above nginx's upstream `keepalive_timeout` (60 s in nginx/templates/default.conf.template), so the app never closes a connection nginx is about to reuse; HTTP_MAX_IDLE_CONNECTIONS bounds how many wait.",
    ),
    HTTP_SEND_TIMEOUT_S: positiveInt(60).describe(
      "An answer whose waiting bytes the client takes none of for this many seconds is closed and its buffers freed, as nginx's `send_timeout`; an idle event stream has nothing waiting and stays open.",
    ),
    DATA_DIR: z
      .string()
      .min(1)
      .default('./data')
      .describe(
        'The SQLite file (`source-fetch.sqlite`), generated secrets, per-job working folders (`work/`) and, by default, the artifact root. One per node.',
      ),
    DATABASE_URL: optionalString
      .refine((value) => value === undefined || /^postgres(ql)?:\/\//.test(value), {
        message: 'must be a postgres:// URL (unset: SQLite in DATA_DIR)',
      })
      .meta({
        description:
          '`postgres://user:password@host:5432/db` (PostgreSQL 15 or later), which [many nodes](operations.md#many-nodes-on-postgresql) share; migrations are applied at start. Never logged.',
        defaultText: 'unset: SQLite in `DATA_DIR`',
      }),
    DATABASE_POOL_SIZE: positiveInt(10).describe('PostgreSQL connections per node.'),
    NODE_ID: optionalString
      .refine((value) => value === undefined || /^[A-Za-z0-9._-]{1,64}$/.test(value), {
        message: 'must be 1 to 64 letters, digits, dots, dashes or underscores',
      })
      .meta({
        description:
          'This node among those sharing the database (1 to 64 letters, digits, dots, dashes or underscores): its job leases and store pins carry it; `/healthz` shows it.',
        defaultText: '`<hostname>-<pid>-<random>`',
      }),
    JOB_LEASE_S: positiveInt(30).describe(
      "A running job's lease, renewed by its node every quarter of it (at most every 7.5 s), one statement for all its jobs; when a node dies, any node takes its jobs back once their leases run out.",
    ),
    ARTIFACT_ROOT: optionalString.meta({
      description: 'Root of the content-addressed store.',
      defaultText: '`$DATA_DIR/artifacts`',
    }),
    API_KEYS: commaList
      .refine((keys) => keys.every((key) => key.length >= 16 && !/\s/.test(key)), {
        message: 'each key must be at least 16 characters with no whitespace',
      })
      .meta({
        description:
          'Comma-separated keys, each at least 16 characters; several may be valid at once (rotation). Unset: one is generated into `$DATA_DIR/api-key` (mode 0600; on PostgreSQL once, into the database, for every node).',
        defaultText: 'generated',
      }),
    YTDLP_PATH: z.string().min(1).default('yt-dlp').meta({
      description:
        "The downloader: a current release for production ([yt-dlp](yt-dlp.md); the image sets `/opt/yt-dlp/yt-dlp`), Debian stable's package as the fallback. A link is resolved once at start; a Python launcher script is imported once by the resident sandbox, a standalone build is started per run.",
      defaultText: '`yt-dlp` on `PATH`',
    }),
    YTDLP_COOKIES_FILE: optionalString.describe(
      'A Netscape-format cookies file for yt-dlp (sites that want a signed-in session): each job gets its own copy, and neither its path nor its content is ever logged. Checked at start-up, and refused with a yt-dlp older than 2023.07.06 ([why](yt-dlp.md#cookies-reach-only-their-own-domains)).',
    ),
    FFMPEG_PATH: z
      .string()
      .min(1)
      .default('ffmpeg')
      .meta({ description: 'The converter.', defaultText: '`ffmpeg` on `PATH`' }),
    LOUDNESS: z
      .enum(['on', 'off'])
      .default('on')
      .describe(
        "`on`: each new WAV's EBU R128 loudness is measured as ffmpeg writes it ([how](loudness.md); the job record's `result.loudness`), on the service's own thread while ffmpeg converts on another core: 6-8 % of a 3-minute job ([benchmarks](benchmarks.md#loudness-and-waveform-peaks)). `off`: content stored from then on has `loudness: null`, and a job spares the meter's CPU time (about 100 ms per 3 minutes of audio).",
      ),
    WAVEFORM_PEAKS: z
      .enum(['on', 'off'])
      .default('on')
      .describe(
        "`on`: the store keeps each new WAV's waveform peaks beside it (`peaks.json`, [delivery](delivery.md#waveform-peaks)), computed in the pass that hashes it. `off`: content stored from then on has none.",
      ),
    TOOL_CONFINEMENT: z
      .enum(['netns', 'off'])
      .default('netns')
      .describe(
        '`netns`: every tool runs in a network namespace of its own whose only way out is the egress guard ([threat model](threat-model.md#confinement-the-guard-is-the-only-way-out)); where that cannot be set up, fetching is refused. `off`, only for hosts that forbid namespaces: the tools run as plain processes that can connect around the guard (logged as a warning; `/healthz` says `degraded`).',
      ),
    UNSHARE_PATH: z.string().min(1).default('unshare').meta({
      description: "util-linux `unshare`, which makes the tools' namespaces.",
      defaultText: '`unshare` on `PATH`',
    }),
    PRLIMIT_PATH: z.string().min(1).default('prlimit').meta({
      description: "util-linux `prlimit`, which sets the tools' ceilings when `TOOL_CONFINEMENT=off`.",
      defaultText: '`prlimit` on `PATH`',
    }),
    SANDBOX_PYTHON: z
      .string()
      .min(1)
      .default('/usr/bin/python3')
      .describe('The Python that runs `src/sandbox/confine.py` (standard library only) inside each namespace.'),
    RESIDENT_SANDBOX: z
      .enum(['on', 'off'])
      .default('on')
      .describe(
        '`on` (with `TOOL_CONFINEMENT=netns`): one resident process per node imports yt-dlp once, warms it up with one simulated run on made-up media (the `tool runs` log line says `warm_up`: `done`, or how it failed), makes once what each run would redo whatever its job (its TLS context, its choice and list of extractors: `shared_with_runs` in that line), and forks each tool run, ahead of its request, into namespaces of its own, confined as a tool started alone, its process group killed on cancel and time-out; until it is ready, while it restarts or if it is unreachable, tools are started per run (the `tool runs` log line says which). `off`: every tool run starts unshare, Python and confine.py anew.',
      ),
    CONVERTER_WAITING: z
      .enum(['on', 'off'])
      .default('on')
      .describe(
        "`on`: one ffmpeg per node is started ahead of the next job, waiting on a FIFO in a folder of its own under the work folder, and the next job whose URL does not name an MP4-family file takes it (the `fetch steps` log line says `converter_start`: `before_job`), so that ffmpeg's start is not paid within the job; the next one starts once that job has ended. It costs one idle ffmpeg process per node. `off`: each job starts its own ffmpeg.",
      ),
    TOOL_MOUNT_VIEW: z
      .enum(['on', 'off'])
      .default('on')
      .describe(
        "`on` (with `TOOL_CONFINEMENT=netns`): each tool run sees a root of its own: the system's programs and libraries, its job's folder, nothing else of the host. `off` only for a host that cannot mount inside a user namespace.",
      ),
    WORKER_CONCURRENCY: z.coerce
      .number()
      .int()
      .min(0)
      .max(64)
      .default(2)
      .describe(
        "Jobs this node runs at once, at most 64; `0`: an API-only node (it still serves every route, and takes back dead nodes' jobs for the others).",
      ),
    FETCH_TIMEOUT_S: positiveInt(1800).describe(
      'Wall-clock limit of one job; past it the tools are killed and the job fails with `fetch_timeout`.',
    ),
    METADATA_TIMEOUT_S: positiveInt(60).describe(
      "The time limit of the downloader's extraction (until it has printed the media's metadata), within `FETCH_TIMEOUT_S` (`metadata_timeout`).",
    ),
    PLAYLIST_LISTING_MAX_BYTES: positiveInt(32 * 1024 ** 2).describe(
      'The most bytes the downloader may receive from the sources while it lists one playlist, album or feed (all its requests together, counted by the egress guard); past it the listing stops with `listing_too_large`.',
    ),
    PLAYLIST_LISTING_TIMEOUT_S: positiveInt(120).describe(
      'Wall-clock limit of listing one playlist, album or feed (`listing_timeout`); the entries listed by then stay listed.',
    ),
    DOWNLOAD_STALL_S: positiveInt(30).describe(
      'A download that gains fewer than `DOWNLOAD_STALL_S` × `DOWNLOAD_MIN_BYTES_PER_S` bytes (at least one) over any `DOWNLOAD_STALL_S` seconds fails with `download_stalled`.',
    ),
    DOWNLOAD_MIN_BYTES_PER_S: z.coerce
      .number()
      .int()
      .min(0)
      .default(2048)
      .describe('Bytes a second a download must average over every `DOWNLOAD_STALL_S` window (see there).'),
    TOOL_MEMORY_BYTES: z.coerce
      .number()
      .int()
      .min(64 * 1024 ** 2, { message: 'must be at least 64 MiB' })
      .default(1024 ** 3)
      .describe(
        'Memory ceiling (data segment) of every tool run, set by the sandbox, at least 64 MiB; a run that meets it fails its job with `memory_exceeded`.',
      ),
    TOOL_CPU_S: positiveInt(600).describe('CPU seconds of every tool run (`cpu_time_exceeded`).'),
    TOOL_MAX_PROCESSES: z.coerce
      .number()
      .int()
      .min(8, { message: 'must be at least 8' })
      .default(256)
      .describe(
        'Processes and threads of every tool run, at least 8 (`process_limit_exceeded`); the kernel does not enforce it when the service runs as root.',
      ),
    MAX_DOWNLOAD_BYTES: positiveInt(2 * 1024 ** 3).describe(
      'Largest download; enforced while downloading (chunked responses included), not after.',
    ),
    MAX_OUTPUT_BYTES: z.coerce
      .number()
      .int()
      .min(1024 ** 2, { message: 'must be at least 1 MiB' })
      .max(2 ** 32 - 1, { message: 'must be below 4 GiB, the largest WAV' })
      .default(2 * 1024 ** 3)
      .describe(
        "Largest WAV, from 1 MiB to below 4 GiB: the converter's file size ceiling; a larger one fails with `output_too_large`.",
      ),
    MAX_DURATION_S: positiveInt(3 * 3600).describe(
      'Longest audio: longer media fails with `duration_exceeded`, and the WAV is cut there in any case.',
    ),
    MAX_ATTEMPTS: positiveInt(3).describe(
      'A job whose node died (or whose runner threw) this many times fails with `attempts_exhausted`; attempts count across nodes.',
    ),
    MAX_QUEUED_JOBS: positiveInt(1000).describe(
      'Submissions beyond this many queued jobs get 429 `queue_full` with `Retry-After`.',
    ),
    PLAYLIST_MAX_ITEMS: positiveInt(500).describe(
      'A collection (a submission with `playlist`) lists at most this many entries; a lower `playlist.max_items` wins. Beyond it the collection says `truncated`.',
    ),
    RATE_LIMIT_PER_MINUTE: z.coerce
      .number()
      .int()
      .min(0)
      .default(1200)
      .describe(
        'Requests a minute per API key (a token bucket), on every route but `/healthz`; past it 429 `rate_limited` with `Retry-After`. `0` turns it off ([why 1200](api.md#the-rate-limit)).',
      ),
    RATE_LIMIT_BURST: z.coerce
      .number()
      .int()
      .positive()
      .optional()
      .meta({ description: 'Bucket size: requests a key may make at once.', defaultText: '`RATE_LIMIT_PER_MINUTE`' }),
    ARTIFACT_CAP_BYTES: positiveInt(50 * 1024 ** 3).describe(
      'Size cap of the store; least recently used content is evicted past it.',
    ),
    STORE_BYTES_PER_KEY_PER_DAY: z.coerce.number().int().min(0).optional().meta({
      description:
        'New content one API key may store over any 24 h; a job that would pass it fails with `key_storage_quota_exceeded`, storing and evicting nothing. `0`: no bound.',
      defaultText: 'a quarter of `ARTIFACT_CAP_BYTES`',
    }),
    STORE_MIN_FREE_BYTES: z.coerce.number().int().min(0).optional().meta({
      description:
        "Free space eviction keeps on the artifact root's volume (what one job can need); a node with less takes no job, and `/healthz` says `degraded` (`store_low_on_space`). `0`: none kept.",
      defaultText: '`MAX_DOWNLOAD_BYTES` + `MAX_OUTPUT_BYTES`',
    }),
    EVICTION_INTERVAL_S: positiveInt(60).describe('Eviction also runs on this timer, besides after every store.'),
    DNS_SERVERS: commaList
      .refine((servers) => servers.every(isNameServer), {
        message: 'each server must be ip, ip:port or [ipv6]:port',
      })
      .meta({
        description:
          'Comma-separated name servers (`ip`, `ip:port` or `[v6]:port`) that every look-up asks: submission, the egress guard, callbacks ([threat model](threat-model.md#name-look-ups-one-client-cannot-stall)).',
        defaultText: "`/etc/resolv.conf`'s",
      }),
    DNS_TIMEOUT_S: z.coerce
      .number()
      .positive()
      .max(60)
      .default(5)
      .describe(
        'Time limit of one look-up once asked (and again of its wait for a place), at most 60; fractions allowed.',
      ),
    DNS_LOOKUPS_PER_KEY: positiveInt(8).describe(
      "Look-ups one client (an API key, a running job, a key's callbacks) has in flight at once; more wait their turn.",
    ),
    HOSTS_FILE: z
      .string()
      .default('/etc/hosts')
      .describe('Read before any query, and again when it changes; empty: none.'),
    FETCH_ALLOW_HOSTS: commaList
      .transform((entries, ctx) => {
        try {
          return { entries, list: parseAllowHosts(entries) };
        } catch (err) {
          ctx.addIssue({ code: 'custom', message: (err as Error).message });
          return z.NEVER;
        }
      })
      .describe(
        'Comma-separated `host`, `host:port` or `[v6]:port` entries exempted from the address policy, at submission, in the egress guard and for callbacks (tests, private media servers you trust). A bare host allows all its ports; logged as a warning when set.',
      ),
    ACCEL_REDIRECT_PREFIX: optionalString
      .refine((value) => value === undefined || /^\/[^\s?#]*\/$/.test(value), {
        message: 'must be a path that starts and ends with "/", for example /_artifacts/',
      })
      .describe(
        "When set (e.g. `/_artifacts/`), artifacts asked for through nginx (which says so with `X-Sendfile-Type: X-Accel-Redirect`) are answered with `X-Accel-Redirect` for nginx to stream ([delivery](delivery.md)); unset, and on the app's own port, the app streams them.",
      ),
    NGINX_USAGE_LOG: optionalString.describe(
      "nginx's log of the artifacts it served without the app, on signed URLs or keys whose yes from the app it remembers (its `NGINX_USAGE_LOG`, on storage both share), read so that such content counts as used for eviction.",
    ),
    URL_SIGNING_SECRET: optionalString
      .refine((value) => value === undefined || value.length >= 32, {
        message: 'must be at least 32 characters',
      })
      .meta({
        description:
          'Secret (32+ characters) of the signed artifact URLs; unset, one is generated into `$DATA_DIR/url-signing-secret` (mode 0600; on PostgreSQL once, into the database, for every node). Behind nginx, give nginx the same one, so that it answers signed URLs alone.',
        defaultText: 'generated',
      }),
    SIGNED_URL_TTL_S: positiveInt(24 * 3600).describe('Lifetime of the signed URLs in job results.'),
    EGRESS_UPSTREAM_PROXY: optionalString
      .transform((value, ctx) => {
        if (value === undefined) return undefined;
        const proxy = parseUpstreamProxy(value);
        // The message never repeats the value: it may hold a password.
        if (typeof proxy === 'string') {
          ctx.addIssue({ code: 'custom', message: proxy });
          return z.NEVER;
        }
        return proxy;
      })
      .meta({
        description:
          '`http://user:password@proxy:3128`: the egress guard reaches every destination it has checked through this HTTP proxy, by a `CONNECT` to the checked address ([threat model](threat-model.md#through-an-upstream-proxy)). Neither its address nor its credentials are ever logged or shown.',
        defaultText: 'unset: direct',
      }),
    EVENTS_KEEPALIVE_S: z.coerce
      .number()
      .int()
      .min(1)
      .max(50, { message: "must be at most 50, below nginx's proxy_read_timeout (60 s)" })
      .default(15)
      .describe(
        "A comment line on every open job event stream this often, at most 50, so that nothing between client and node (nginx's `proxy_read_timeout` is 60 s) closes an idle one. A client that leaves 64 KiB unread and takes none of the states waiting past them for a whole interval has its stream ended.",
      ),
    EVENTS_POLL_MS: z.coerce
      .number()
      .int()
      .min(100)
      .max(60_000)
      .default(500)
      .describe(
        "How often a node's job event streams read their jobs (one query for all of them), in ms: how soon a stream shows a claim or the progress (a job running on this node: its latest progress; on another node: as that node wrote it, at the download's start, past each quarter and every lease renewal). A job's end is told to every node as it happens and does not wait for this.",
      ),
    EVENT_STREAMS_PER_KEY: positiveInt(20).describe(
      'Job event streams one API key may hold open on a node, a stream of many jobs (`GET /events`) counting once; past it 429 `too_many_event_streams`.',
    ),
    EVENT_STREAMS_PER_NODE: positiveInt(500).describe(
      'Job event streams a node holds open at once, all keys together; past it the same 429.',
    ),
    WEBHOOK_SECRET: optionalString
      .transform((value, ctx) => {
        if (value === undefined) return undefined;
        const secrets = splitWebhookSecrets(value);
        if (secrets.length === 0) ctx.addIssue({ code: 'custom', message: 'names no secret' });
        // The message says which secret by its place, never by its value.
        secrets.forEach((secret, i) => {
          const problem = webhookSecretProblem(secret);
          if (problem !== null)
            ctx.addIssue({ code: 'custom', message: secrets.length > 1 ? `secret ${i + 1}: ${problem}` : problem });
        });
        return secrets.join(' ');
      })
      .meta({
        description:
          "The master of [callbacks](webhooks.md)' signing secrets: each API key's is derived from it and signs its jobs' callbacks; it signs nothing itself, and receivers never hold it. Standard Webhooks' `whsec_` + base64 of 24 to 64 bytes, or 32+ visible ASCII characters without a comma; several, separated by spaces or commas, each give every key a secret (rotation). Unset: a `whsec_` one is generated into `$DATA_DIR/webhook-secret` (mode 0600; on PostgreSQL once, into the database, for every node).",
        defaultText: 'generated',
      }),
    WEBHOOK_TIMEOUT_S: positiveInt(10).describe(
      "Time limit of one callback attempt: look-up, connect, TLS, request and the answer's status line.",
    ),
    WEBHOOK_CONNECT_TIMEOUT_S: z.coerce
      .number()
      .positive()
      .max(60)
      .default(3)
      .describe(
        'Time limit of each connect within a callback attempt (`connect_timeout`), at most 60; fractions allowed.',
      ),
    WEBHOOK_CONCURRENCY: positiveInt(16).describe('Callback attempts a node makes at once.'),
    WEBHOOK_CONCURRENCY_PER_KEY: positiveInt(4).describe(
      'Of those, at most this many for the jobs of one API key; keep it below `WEBHOOK_CONCURRENCY`.',
    ),
    WEBHOOK_CONCURRENCY_PER_RECEIVER: positiveInt(2).describe(
      'Of those, at most this many to one receiver (URL origin).',
    ),
    WEBHOOK_RETRY_BASE_S: z.coerce
      .number()
      .positive()
      .max(3600)
      .default(5)
      .describe(
        'Delay before a failed callback is tried again, doubled after each failure (at most 1 h between attempts); fractions allowed.',
      ),
    WEBHOOK_RETRY_FOR_S: positiveInt(24 * 3600).describe(
      'No callback attempt starts later than this after its job ended; past it the callback is `failed`.',
    ),
    SHUTDOWN_GRACE_S: z.coerce
      .number()
      .int()
      .min(0)
      .default(30)
      .describe('On SIGTERM, how long running jobs may finish before they are stopped and queued again.'),
    LOG_LEVEL: z
      .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
      .default('info')
      .describe('pino level: `fatal`, `error`, `warn`, `info`, `debug`, `trace` or `silent`.'),
    PATH: z
      .string()
      .default('')
      .meta({ description: 'Where bare tool names (`yt-dlp`, `ffmpeg`) are looked up.', defaultText: "the process's" }),

    SCRUB_INTERVAL_S: z.coerce
      .number()
      .int()
      .min(0)
      .default(24 * 3600)
      .describe(
        'How often the store scrub reads every stored artifact and checks its SHA-256 against its content id, in seconds, once per interval among all nodes ([scrub](scrub.md)); `0`: only when asked (`source-fetch scrub`).',
      ),
    SCRUB_BYTES_PER_S: positiveInt(32 * 1024 ** 2).describe(
      "The store scrub's read rate limit, bytes per second, so that it never competes with delivery for the disk.",
    ),
  })
  .superRefine((e, ctx) => {
    if (e.HTTP_HEADERS_TIMEOUT_S > e.HTTP_REQUEST_TIMEOUT_S) {
      ctx.addIssue({
        code: 'custom',
        path: ['HTTP_HEADERS_TIMEOUT_S'],
        message: 'must be at most HTTP_REQUEST_TIMEOUT_S',
      });
    }
    if (
      e.HTTP_MAX_CONNECTIONS_PER_CLIENT !== undefined &&
      e.HTTP_MAX_CONNECTIONS_PER_CLIENT >= e.HTTP_MAX_CONNECTIONS
    ) {
      ctx.addIssue({
        code: 'custom',
        path: ['HTTP_MAX_CONNECTIONS_PER_CLIENT'],
        message: "must be below HTTP_MAX_CONNECTIONS, so that one client's connections leave room for the others",
      });
    }
    if (e.HTTP_MAX_IDLE_CONNECTIONS >= e.HTTP_MAX_CONNECTIONS) {
      ctx.addIssue({
        code: 'custom',
        path: ['HTTP_MAX_IDLE_CONNECTIONS'],
        message: 'must be below HTTP_MAX_CONNECTIONS, which keeps the rest for requests under way',
      });
    }
  });

export interface Config {
  host: string;
  port: number;
  /** The app port's bounds (src/http/server.ts ConnectionLimits): request head and request time limits, idle and all connections. */
  http: {
    headersTimeoutMs: number;
    requestTimeoutMs: number;
    maxIdle: number;
    maxTotal: number;
    maxPerClient: number;
    uncappedClients: AddressRanges;
    sendTimeoutMs: number;
    keepAliveTimeoutMs: number;
  };
  dataDir: string;
  /** PostgreSQL, shared by every node; or SQLite in the data dir (one node). */
  database: { kind: 'postgres'; url: string; poolSize: number } | { kind: 'sqlite'; path: string };
  /** This process among the nodes: its leases and pins carry it. Unset: made unique per start. */
  nodeId: string | undefined;
  /** A running job's lease: renewed every quarter of it (at most 7.5 s); a dead node's jobs are taken back after it. */
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
  confinement: {
    mode: 'netns' | 'off';
    unshare: string;
    python: string;
    prlimit: string;
    resident: boolean;
    mountView: boolean;
  };
  /** Ceilings of every tool run, set by the sandbox (src/sandbox/limits.ts); file sizes are per run. */
  toolLimits: { memoryBytes: number; cpuSeconds: number; processes: number };
  /** Loudness measured (LOUDNESS) and waveform peaks stored (WAVEFORM_PEAKS) with each new WAV. */
  audioAnalysis: { loudness: boolean; peaks: boolean };
  /** CONVERTER_WAITING: an ffmpeg started ahead of the next job. */
  converterWaiting: boolean;
  workerConcurrency: number;
  fetchTimeoutMs: number;
  /** The downloader's extraction's own time limit, within fetchTimeoutMs. */
  metadataTimeoutMs: number;
  /** PLAYLIST_LISTING_MAX_BYTES and PLAYLIST_LISTING_TIMEOUT_S: one collection's listing (src/jobs/collection/list-entries.ts). */
  playlistListing: { maxBytes: number; timeoutMs: number };
  /** A download that gains fewer than minBytes over any windowMs is stopped (download_stalled). */
  downloadStall: { windowMs: number; minBytes: number };
  maxDownloadBytes: number;
  /** The largest WAV a job may store. */
  maxOutputBytes: number;
  maxDurationS: number;
  maxAttempts: number;
  maxQueuedJobs: number;
  playlistMaxItems: number;
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
  /** getJobEvents and getEvents: comment keep-alives this often, how many streams a key and the node may hold, and how often they read their jobs. */
  events: { keepAliveMs: number; maxPerKey: number; maxPerNode: number; pollMs: number };
  /**
   * Callbacks (src/webhooks): the master secrets, space-separated, from each of which every key's
   * signing secret is derived (undefined: generated), one attempt's time limit and its connect's, retries, and attempts in flight on
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
      maxPerClient: e.HTTP_MAX_CONNECTIONS_PER_CLIENT ?? Math.max(1, Math.floor(e.HTTP_MAX_CONNECTIONS / 8)),
      uncappedClients: e.HTTP_PROXY_ADDRESSES.ranges,
      sendTimeoutMs: e.HTTP_SEND_TIMEOUT_S * 1000,
      keepAliveTimeoutMs: e.HTTP_KEEP_ALIVE_TIMEOUT_S * 1000,
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
    confinement: {
      mode: e.TOOL_CONFINEMENT,
      unshare: e.UNSHARE_PATH,
      python: e.SANDBOX_PYTHON,
      prlimit: e.PRLIMIT_PATH,
      resident: e.RESIDENT_SANDBOX === 'on',
      mountView: e.TOOL_MOUNT_VIEW === 'on',
    },
    toolLimits: { memoryBytes: e.TOOL_MEMORY_BYTES, cpuSeconds: e.TOOL_CPU_S, processes: e.TOOL_MAX_PROCESSES },
    audioAnalysis: { loudness: e.LOUDNESS === 'on', peaks: e.WAVEFORM_PEAKS === 'on' },
    converterWaiting: e.CONVERTER_WAITING === 'on',
    workerConcurrency: e.WORKER_CONCURRENCY,
    fetchTimeoutMs: e.FETCH_TIMEOUT_S * 1000,
    metadataTimeoutMs: e.METADATA_TIMEOUT_S * 1000,
    playlistListing: { maxBytes: e.PLAYLIST_LISTING_MAX_BYTES, timeoutMs: e.PLAYLIST_LISTING_TIMEOUT_S * 1000 },
    downloadStall: { windowMs: e.DOWNLOAD_STALL_S * 1000, minBytes: e.DOWNLOAD_STALL_S * e.DOWNLOAD_MIN_BYTES_PER_S },
    maxDownloadBytes: e.MAX_DOWNLOAD_BYTES,
    maxOutputBytes: e.MAX_OUTPUT_BYTES,
    maxDurationS: e.MAX_DURATION_S,
    maxAttempts: e.MAX_ATTEMPTS,
    maxQueuedJobs: e.MAX_QUEUED_JOBS,
    playlistMaxItems: e.PLAYLIST_MAX_ITEMS,
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
    events: {
      keepAliveMs: e.EVENTS_KEEPALIVE_S * 1000,
      maxPerKey: e.EVENT_STREAMS_PER_KEY,
      maxPerNode: e.EVENT_STREAMS_PER_NODE,
      pollMs: e.EVENTS_POLL_MS,
    },
    webhooks: {
      secret: e.WEBHOOK_SECRET,
      timeoutMs: e.WEBHOOK_TIMEOUT_S * 1000,
      connectTimeoutMs: Math.round(e.WEBHOOK_CONNECT_TIMEOUT_S * 1000),
      retryBaseMs: Math.round(e.WEBHOOK_RETRY_BASE_S * 1000),
      retryForMs: e.WEBHOOK_RETRY_FOR_S * 1000,
      concurrency: {
        total: e.WEBHOOK_CONCURRENCY,
        perKey: e.WEBHOOK_CONCURRENCY_PER_KEY,
        perReceiver: e.WEBHOOK_CONCURRENCY_PER_RECEIVER,
      },
    },
    shutdownGraceMs: e.SHUTDOWN_GRACE_S * 1000,
    logLevel: e.LOG_LEVEL,
    scrub: {
      intervalMs: e.SCRUB_INTERVAL_S * 1000,
      bytesPerSecond: e.SCRUB_BYTES_PER_S,
      quarantineDir: path.join(dataDir, 'quarantine'),
    },
  };
}
