import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmod } from 'node:fs/promises';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { pipeline, type Duplex } from 'node:stream';
import { ServiceError } from '../errors.js';
import type { UpstreamFailureCode } from '../job-errors.js';
import { classifyAddress } from '../policy/address.js';
import { checkDestination, splitHostPort, type AllowList, type Resolver } from '../policy/destination.js';

/**
 * The egress guard: an HTTP forward proxy that the worker hands to the downloader (yt-dlp's
 * `--proxy`, in a per-job config file). Checking the submitted URL is not enough: the downloader
 * follows redirects, fetches manifests, segments and thumbnails from hosts nobody checked. Every
 * one of those connections goes through here and gets the same destination policy as submission.
 *
 * It listens on a Unix socket when the tools are confined (src/sandbox: a bridge inside each
 * tool's network namespace is its only way here, and the guard is its only way out), or on a
 * loopback TCP port when the operator turned confinement off.
 *
 * Per request (CONNECT host:port, or an absolute-URI request): the host is resolved once, every
 * address is checked, and the connection is made to a checked address, never to the name. HTTP
 * redirects are passed back, so the client's next hop comes through here and is checked in turn;
 * a plain-HTTP redirect the guard can read is refused outright when it leads to another scheme
 * (ftp:, file:...) or carries yt-dlp's smuggled options. Only holders of a live session's
 * credentials are served, so nothing else on the machine can use the guard to reach what the
 * policy refuses.
 *
 * Where the operator's own addresses are blocked, the Dialer it is given is the upstream proxy's
 * (./upstream-proxy.ts): every check above happens first, and the upstream is asked for a tunnel
 * to the checked address only.
 *
 * A connection the guard cannot make reaches the downloader as a 502, which says nothing of why;
 * so each session also records its upstream failures, with their cause in the job error's terms
 * (../job-errors.ts): a name that does not exist or could not be looked up, a connection refused
 * or not accepted in time, one that failed otherwise, and one the origin took and never answered
 * (no byte back once the request went out, when the connection ended or the session closed).
 */

/** Opens a TCP connection to a numeric address. Injected so tests never touch the network. */
export type Dialer = (address: string, port: number, signal?: AbortSignal) => Promise<Duplex>;

export interface GuardLogger {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

export interface EgressGuardOptions {
  resolve: Resolver;
  dial: Dialer;
  allowHosts: AllowList;
  /** Listen on this Unix socket (created mode 0600) instead of a TCP port. */
  socketPath?: string;
  /** TCP: a loopback address; default 127.0.0.1. */
  host?: string;
  /** TCP: default 0, any free port. */
  port?: number;
  logger?: GuardLogger;
  /** Per address tried; default 10 s. */
  connectTimeoutMs?: number;
  /** A connection with no traffic either way for this long is closed; default 120 s. */
  idleTimeoutMs?: number;
}

export interface Refusal {
  host: string;
  port: number;
  code: 'destination_refused';
  message: string;
}

/** A connection the guard could not make, or that the origin never answered. */
export interface UpstreamFailure {
  host: string;
  port: number;
  code: UpstreamFailureCode;
  /** The guard's own words, for the log. */
  message: string;
}

export interface GuardSession {
  /** `http://<label>:<token>@<authority>`: give it to the downloader, never log it. */
  proxyUrlAt(authority: string): string;
  refusals(): Refusal[];
  /** In the order they happened; those of connections still open are recorded when the session closes. */
  upstreamFailures(): UpstreamFailure[];
  /** Host names (lower case, no trailing dot) the session has connected to, in first-use order. */
  hostsContacted(): string[];
  /** Whether the origins sent more than the session's maxBytes (SessionOptions); its connections were then cut. */
  overByteLimit(): boolean;
  /** Revokes the credentials and destroys the session's connections. */
  close(): void;
}

export interface SessionOptions {
  /**
   * The most bytes the origins may send over the session's connections, all together (response
   * bodies of plain-HTTP requests, everything a CONNECT tunnel brings back): past it every
   * connection of the session is cut and no new one is made. For a run that reads what it
   * downloads into memory (a playlist's listing), where no progress line or file size shows it.
   */
  maxBytes?: number;
}

export interface EgressGuard {
  /** The TCP port when listening on TCP, else null. */
  readonly port: number | null;
  /** `127.0.0.1:<port>` when listening on TCP, else null. */
  readonly authority: string | null;
  /** The Unix socket when listening on one, else null. */
  readonly socketPath: string | null;
  openSession(label: string, options?: SessionOptions): GuardSession;
  close(): Promise<void>;
}

/** Dials with net.connect to the numeric address only: a name here would mean a second lookup. */
export function createTcpDialer(): Dialer {
  return (address, port, signal) =>
    new Promise((resolve, reject) => {
      if (net.isIP(address) === 0) {
        reject(new Error('the dialer only connects to IP addresses'));
        return;
      }
      if (signal?.aborted) {
        reject(new Error('connect aborted'));
        return;
      }
      const socket = net.connect({ host: address, port });
      const onAbort = (): void => {
        socket.destroy();
        reject(new Error('connect aborted'));
      };
      const onError = (err: Error): void => {
        signal?.removeEventListener('abort', onAbort);
        reject(err);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      socket.once('error', onError);
      socket.once('connect', () => {
        signal?.removeEventListener('abort', onAbort);
        socket.removeListener('error', onError);
        resolve(socket);
      });
    });
}

const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
const DEFAULT_IDLE_TIMEOUT_MS = 120_000;
/** Bounds memory if a downloader hammers refused hosts; the first ones say what went wrong. */
const MAX_REFUSALS_PER_SESSION = 100;
/** The same for failed connections: the first ones, and always the last one, which the fetch reads. */
const MAX_UPSTREAM_FAILURES_PER_SESSION = 100;
/** Look-up failures that say the name does not exist (../policy/name-resolver.ts's codes), not that no answer came. */
const NAME_DOES_NOT_EXIST = new Set(['ENOTFOUND', 'ENODATA', 'no addresses']);
const LABEL = /^[A-Za-z0-9._~-]{1,64}$/;
const REALM = 'Basic realm="egress-guard"';

/** RFC 9110 §7.6.1 plus the proxy-specific ones; never forwarded in either direction. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

const NO_LOGGER: GuardLogger = { warn: () => {}, info: () => {} };

interface SessionState {
  label: string;
  tokenDigest: Buffer;
  refusals: Refusal[];
  upstreamFailures: UpstreamFailure[];
  /** Upstream connections whose request went out and got no byte back yet. */
  unanswered: Set<Unanswered>;
  hosts: Set<string>;
  sockets: Set<Duplex>;
  aborter: AbortController;
  /** Bytes the origins sent so far, and the most they may (SessionOptions.maxBytes). */
  bytesIn: number;
  maxBytes: number;
}

type Upstream = { ok: true; socket: Duplex } | { ok: false; status: number; reason: string };

interface Unanswered {
  host: string;
  port: number;
}

export async function startEgressGuard(opts: EgressGuardOptions): Promise<EgressGuard> {
  const bindHost = opts.host ?? '127.0.0.1';
  if (opts.socketPath === undefined && classifyAddress(bindHost).range !== 'loopback') {
    throw new Error(`the egress guard must listen on a loopback address, not ${bindHost}`);
  }
  const logger = opts.logger ?? NO_LOGGER;
  const connectTimeoutMs = opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  const idleTimeoutMs = opts.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
  const policy = { resolve: opts.resolve, allowHosts: opts.allowHosts };
  const sessions = new Set<SessionState>();
  const allSockets = new Set<Duplex>();

  /** Remembers a socket so closing its session, or the guard, can destroy it. */
  const watch = (socket: Duplex, session?: SessionState): void => {
    if (!allSockets.has(socket)) {
      allSockets.add(socket);
      socket.once('close', () => allSockets.delete(socket));
    }
    if (session && !session.sockets.has(socket)) {
      session.sockets.add(socket);
      socket.once('close', () => session.sockets.delete(socket));
    }
  };

  /** Compares against every live session in constant time per comparison. */
  const authenticate = (header: string | undefined): SessionState | null => {
    const m = /^basic\s+([A-Za-z0-9+/]+={0,2})\s*$/i.exec(header ?? '');
    if (!m) return null;
    const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) return null;
    const label = decoded.slice(0, colon);
    const digest = sha256(decoded.slice(colon + 1));
    let found: SessionState | null = null;
    for (const s of sessions) {
      if (timingSafeEqual(digest, s.tokenDigest) && s.label === label) found = s;
    }
    return found;
  };

  /** `why`: a destination policy's ServiceError, or the guard's own refusal (redirect_refused, scheme_refused). */
  const refuse = (
    session: SessionState,
    host: string,
    port: number,
    why: { code: string; message: string },
  ): Upstream => {
    if (session.refusals.length < MAX_REFUSALS_PER_SESSION) {
      session.refusals.push({ host, port, code: 'destination_refused', message: why.message });
    }
    // The session label is the job id.
    const fields = { job_id: session.label, host, port, reason: why.code };
    logger.warn(fields, 'egress guard refused a destination');
    return { ok: false, status: 403, reason: why.message };
  };

  /** Records a connection that failed; past the bound, the newest replaces the one before it (the fetch reads the last). */
  const noteFailure = (session: SessionState, failure: UpstreamFailure): void => {
    if (session.upstreamFailures.length >= MAX_UPSTREAM_FAILURES_PER_SESSION) session.upstreamFailures.pop();
    session.upstreamFailures.push(failure);
  };

  /**
   * A request sent to host:port: `answered()` once the origin sends anything back; `ended()` when
   * the connection ends, which records no_answer if nothing came (so does the session's close).
   */
  const awaitAnswer = (session: SessionState, host: string, port: number) => {
    const entry: Unanswered = { host, port };
    session.unanswered.add(entry);
    return {
      answered: () => void session.unanswered.delete(entry),
      ended: () => {
        if (session.unanswered.delete(entry)) noteFailure(session, noAnswer(entry));
      },
    };
  };

  /** A plain-HTTP answer whose redirect leaves http(s) or smuggles yt-dlp options: refused. */
  const refuseRedirect = (session: SessionState, target: URL, location: string): string | null => {
    const problem = redirectProblem(target, location);
    if (problem === null) return null;
    const port = target.port === '' ? 80 : Number(target.port);
    const why = { code: 'redirect_refused', message: `A redirect from ${target.host} was refused: ${problem}.` };
    refuse(session, target.hostname, port, why);
    return why.message;
  };

  /** Counts what an origin sent; past the session's maxBytes, cuts all its connections. */
  const countIn = (session: SessionState, bytes: number): void => {
    session.bytesIn += bytes;
    if (session.bytesIn <= session.maxBytes) return;
    session.aborter.abort();
    for (const socket of session.sockets) socket.destroy();
  };

  /** Checks host:port and connects to the first checked address that answers. */
  const openUpstream = async (session: SessionState, host: string, port: number): Promise<Upstream> => {
    if (session.bytesIn > session.maxBytes) {
      return { ok: false, status: 502, reason: 'The byte limit of this run has been reached.' };
    }
    let addresses: string[];
    try {
      // Each job's look-ups are a client of their own: one job's silent names delay no other.
      ({ addresses } = await checkDestination(host, port, {
        ...policy,
        client: `job:${session.label}`,
        signal: session.aborter.signal,
      }));
    } catch (err) {
      if (!(err instanceof ServiceError)) throw err;
      if (err.code === 'host_unresolvable') {
        const reason = err.extra.fields?.reason;
        const code =
          typeof reason === 'string' && NAME_DOES_NOT_EXIST.has(reason) ? 'host_not_found' : 'host_lookup_failed';
        noteFailure(session, { host, port, code, message: err.message });
        logger.info({ job_id: session.label, host, port, reason }, 'egress guard could not resolve a host');
        return { ok: false, status: 502, reason: err.message };
      }
      if (err.kind === 'invalid_input') return { ok: false, status: 400, reason: err.message };
      return refuse(session, host, port, err);
    }
    // Every address passed the check, so falling back to the next one (an AAAA the host cannot
    // route, say) never reaches anything unchecked.
    let failure: UpstreamFailure | undefined;
    for (const address of addresses) {
      if (session.aborter.signal.aborted) break;
      const timeout = AbortSignal.timeout(connectTimeoutMs);
      try {
        const signal = AbortSignal.any([session.aborter.signal, timeout]);
        const socket = await opts.dial(address, port, signal);
        watch(socket, session);
        if (session.aborter.signal.aborted) {
          socket.destroy();
        } else {
          session.hosts.add(hostKey(host));
          return { ok: true, socket };
        }
      } catch (err) {
        // Given up when the session closed: not accepted in the time the job had.
        failure = dialFailure(host, port, address, err, timeout.aborted || session.aborter.signal.aborted);
        const fields = { job_id: session.label, host, address, port, err: String(err), cause: failure.code };
        logger.info(fields, 'egress guard dial failed');
      }
    }
    if (failure) noteFailure(session, failure);
    return { ok: false, status: 502, reason: `Could not connect to ${host}:${port}.` };
  };

  const handleRequest = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const session = authenticate(req.headers['proxy-authorization']);
    if (!session) {
      res.writeHead(407, { 'proxy-authenticate': REALM, 'content-type': 'text/plain; charset=utf-8' });
      res.end('Proxy authentication required.\n');
      return;
    }
    watch(req.socket, session);
    let target: URL;
    try {
      target = new URL(req.url ?? '');
    } catch {
      return plainText(res, 400, 'An absolute http:// URI is required.');
    }
    if (target.protocol !== 'http:' && target.protocol !== 'https:') {
      // A downloader that asks its proxy for another scheme (a current yt-dlp sends an HLS
      // playlist's ftp: segments here) is refused as a destination, so the job says why.
      const why = {
        code: 'scheme_refused',
        message: `The downloader asked for a ${target.protocol} URL; only http and https are fetched.`,
      };
      refuse(session, target.hostname, Number(target.port) || 0, why);
      return plainText(res, 403, why.message);
    }
    if (target.protocol !== 'http:') {
      return plainText(res, 400, 'Only http:// URIs are forwarded; use CONNECT for https.');
    }
    const port = target.port === '' ? 80 : Number(target.port);
    const upstream = await openUpstream(session, target.hostname, port);
    if (!upstream.ok) return plainText(res, upstream.status, upstream.reason);
    if (req.socket.destroyed) return void upstream.socket.destroy();
    forward(
      req,
      res,
      target,
      upstream.socket,
      (location) => refuseRedirect(session, target, location),
      awaitAnswer(session, target.hostname, port),
      (bytes) => countIn(session, bytes),
    );
  };

  const handleConnect = async (req: http.IncomingMessage, client: Duplex, head: Buffer): Promise<void> => {
    watch(client);
    client.on('error', () => client.destroy());
    const session = authenticate(req.headers['proxy-authorization']);
    if (!session) {
      client.end(rawResponse(407, 'Proxy authentication required.', `Proxy-Authenticate: ${REALM}\r\n`));
      return;
    }
    watch(client, session);
    const target = splitHostPort(req.url ?? '');
    if (target === null || target.port === null) {
      client.end(rawResponse(400, 'CONNECT needs host:port.'));
      return;
    }
    const upstream = await openUpstream(session, target.host, target.port);
    if (!upstream.ok) {
      client.end(rawResponse(upstream.status, upstream.reason));
      return;
    }
    const remote = upstream.socket;
    // The client speaks first (a TLS ClientHello): from then on, an origin that sends nothing back never answered.
    let answered = false;
    let awaiting: ReturnType<typeof awaitAnswer> | undefined;
    const requestSent = (): void => {
      if (!answered) awaiting ??= awaitAnswer(session, target.host, target.port!);
    };
    const teardown = (): void => {
      awaiting?.ended();
      client.destroy();
      remote.destroy();
    };
    remote.on('error', teardown);
    remote.once('close', teardown);
    client.once('close', teardown);
    if (client.destroyed) return teardown();
    (client as net.Socket).setTimeout(idleTimeoutMs, teardown);
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) {
      requestSent();
      remote.write(head);
    }
    // Counted before it is piped on: the chunk that crosses the limit reaches no one.
    remote.on('data', (chunk: Buffer) => countIn(session, chunk.length));
    remote.pipe(client);
    client.pipe(remote);
    client.once('data', requestSent);
    remote.once('data', () => {
      answered = true;
      awaiting?.answered();
    });
  };

  const server = http.createServer();
  // Idle client connections (and, through them, stalled upstream responses) are closed.
  server.setTimeout(idleTimeoutMs);
  server.on('connection', (socket) => watch(socket));
  server.on('request', (req, res) => {
    handleRequest(req, res).catch((err: unknown) => {
      logger.warn({ err: String(err) }, 'egress guard request failed');
      if (res.headersSent) res.destroy();
      else plainText(res, 500, 'Internal proxy error.');
    });
  });
  server.on('connect', (req: http.IncomingMessage, client: Duplex, head: Buffer) => {
    handleConnect(req, client, head).catch((err: unknown) => {
      logger.warn({ err: String(err) }, 'egress guard CONNECT failed');
      client.destroy();
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    const listening = () => {
      server.removeListener('error', reject);
      resolve();
    };
    if (opts.socketPath !== undefined) server.listen(opts.socketPath, listening);
    else server.listen(opts.port ?? 0, bindHost, listening);
  });
  // Only the service's own user (and the tools it starts) may connect.
  if (opts.socketPath !== undefined) await chmod(opts.socketPath, 0o600);
  const port = opts.socketPath !== undefined ? null : (server.address() as AddressInfo).port;
  const authority = port === null ? null : `${bindHost.includes(':') ? `[${bindHost}]` : bindHost}:${port}`;

  const closeSession = (state: SessionState): void => {
    sessions.delete(state);
    for (const entry of state.unanswered) noteFailure(state, noAnswer(entry));
    state.unanswered.clear();
    state.aborter.abort();
    for (const socket of state.sockets) socket.destroy();
    state.sockets.clear();
  };

  return {
    port,
    authority,
    socketPath: opts.socketPath ?? null,
    openSession(label: string, options: SessionOptions = {}): GuardSession {
      if (!LABEL.test(label)) throw new Error(`session label must match ${LABEL}`);
      const token = randomBytes(24).toString('base64url');
      const state: SessionState = {
        label,
        tokenDigest: sha256(token),
        refusals: [],
        upstreamFailures: [],
        unanswered: new Set(),
        hosts: new Set(),
        sockets: new Set(),
        aborter: new AbortController(),
        bytesIn: 0,
        maxBytes: options.maxBytes ?? Infinity,
      };
      sessions.add(state);
      return {
        proxyUrlAt: (at) => `http://${label}:${token}@${at}`,
        refusals: () => state.refusals.map((x) => ({ ...x })),
        upstreamFailures: () => state.upstreamFailures.map((x) => ({ ...x })),
        hostsContacted: () => [...state.hosts],
        overByteLimit: () => state.bytesIn > state.maxBytes,
        close: () => closeSession(state),
      };
    },
    async close(): Promise<void> {
      for (const state of [...sessions]) closeSession(state);
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of allSockets) socket.destroy();
      await closed;
    },
  };
}

/**
 * Sends the request on over the checked socket and streams the answer back, both bodies piped.
 * `checkRedirect` sees every Location header first and returns a reason to refuse it, or null.
 * `awaiting` is told when the answer comes, and when the exchange ends (answered or not);
 * `received` of each chunk of the answer's body.
 */
function forward(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  target: URL,
  upstream: Duplex,
  checkRedirect: (location: string) => string | null,
  awaiting: { answered(): void; ended(): void },
  received: (bytes: number) => void,
): void {
  const outgoing = http.request({
    method: req.method,
    path: `${target.pathname}${target.search}`,
    // The absolute URI, not the client's Host header, names the origin (RFC 9112 §3.2.2).
    headers: [...endToEnd(req.rawHeaders, 'host'), 'Host', target.host],
    createConnection: () => upstream,
  });
  outgoing.on('response', (answer) => {
    awaiting.answered();
    const location = answer.headers.location;
    const refused = location === undefined ? null : checkRedirect(location);
    if (refused !== null) {
      answer.destroy();
      upstream.destroy();
      return plainText(res, 403, refused);
    }
    res.writeHead(answer.statusCode ?? 502, answer.statusMessage, endToEnd(answer.rawHeaders));
    // Counted before it is piped on: the chunk that crosses the limit reaches no one.
    answer.on('data', (chunk: Buffer) => received(chunk.length));
    // pipeline destroys both ends on error or premature close: an upstream that dies mid-body
    // must not leave the client waiting for the rest.
    pipeline(answer, res, () => {});
  });
  outgoing.on('error', () => {
    awaiting.ended();
    if (res.headersSent) res.destroy();
    else plainText(res, 502, 'The upstream connection failed.');
  });
  res.once('close', () => {
    awaiting.ended();
    upstream.destroy();
  });
  pipeline(req, outgoing, () => {});
}

/** Why a dial failed, in the job error's terms. */
function dialFailure(host: string, port: number, address: string, err: unknown, timedOut: boolean): UpstreamFailure {
  const errno = (err as NodeJS.ErrnoException).code;
  const code: UpstreamFailureCode =
    timedOut || errno === 'ETIMEDOUT'
      ? 'connect_timeout'
      : errno === 'ECONNREFUSED'
        ? 'connection_refused'
        : 'network_error';
  const why = timedOut ? 'not accepted in time' : (errno ?? 'failed');
  return { host, port, code, message: `Connecting to ${address} port ${port} for ${host}: ${why}.` };
}

function noAnswer({ host, port }: Unanswered): UpstreamFailure {
  return { host, port, code: 'no_answer', message: `${host}:${port} took the request and sent nothing back.` };
}

const SMUGGLED = /__youtubedl_smuggle/i;

/**
 * Why a redirect must not be followed, or null. yt-dlp follows redirects to ftp: (urllib's own
 * handler, which no proxy setting covers), and honours options smuggled in a URL fragment, among
 * them one that turns the proxy off; neither may reach it from a server's answer.
 */
export function redirectProblem(base: URL, location: string): string | null {
  let decoded = location;
  for (let i = 0; i < 3; i++) {
    try {
      decoded = decodeURIComponent(decoded);
    } catch {
      break;
    }
  }
  if (SMUGGLED.test(decoded)) return 'it carries smuggled downloader options';
  let next: URL;
  try {
    next = new URL(location, base);
  } catch {
    return null; // not a URL the client can follow either
  }
  if (next.protocol !== 'http:' && next.protocol !== 'https:')
    return `it leads to a ${next.protocol} URL; only http and https are fetched`;
  return null;
}

function hostKey(host: string): string {
  const lower = host.toLowerCase();
  return lower.endsWith('.') ? lower.slice(0, -1) : lower;
}

/** Raw header list without hop-by-hop headers (and those the Connection header names) or `also`. */
function endToEnd(raw: string[], ...also: string[]): string[] {
  const drop = new Set([...HOP_BY_HOP, ...also]);
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() === 'connection') {
      for (const token of raw[i + 1]!.split(',')) drop.add(token.trim().toLowerCase());
    }
  }
  const kept: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    if (!drop.has(raw[i]!.toLowerCase())) kept.push(raw[i]!, raw[i + 1]!);
  }
  return kept;
}

function plainText(res: http.ServerResponse, status: number, text: string): void {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', connection: 'close' });
  res.end(`${oneLine(text)}\n`);
}

function rawResponse(status: number, text: string, extraHeaders = ''): string {
  const body = `${oneLine(text)}\n`;
  return (
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? 'Error'}\r\n` +
    `Content-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
    `Connection: close\r\n${extraHeaders}\r\n${body}`
  );
}

/** Messages name a host taken from the request; keep them to one printable line. */
function oneLine(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f]/g, ' ');
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}
