import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { getRequestListener, type HttpBindings } from '@hono/node-server';
import type { Logger } from '../logger.js';
import { clientOf, type AddressRanges } from '../policy/client-address.js';
import type { RequestEnvelope } from './request-envelope.js';

/**
 * The Node HTTP server in front of the app, for what @hono/node-server leaves to the server:
 *
 * - A request whose body the app left unread (an early 413, 415 or 401) is answered with
 *   `Connection: close`. Promising keep-alive instead would be a lie: the unread bytes still sit
 *   on the connection, @hono/node-server drains them for at most 500 ms and then destroys the
 *   socket, and the client's next request on it fails.
 * - Closing such a connection lingers (see lingerBeforeClosing), so that the answer reaches the
 *   client.
 * - Nothing after an answer that closes the connection is taken as a request: one connection's
 *   requests are answered one after the other (node parses pipelined requests as they come and
 *   would otherwise hand them to the app at once), and those that follow an answer saying
 *   `Connection: close` are dropped unanswered, never run (see answerInTurn).
 * - `Expect: 100-continue`: Node answers 100 Continue by itself unless 'checkContinue' is
 *   handled. A Content-Length over the largest body the request's path takes gets no 100, so
 *   the client need not send a body that would be refused; the app answers at once (413).
 * - Connections are bounded (see boundConnections): a request head must arrive whole within
 *   `headersTimeoutMs`, connections without a request under way are capped (the oldest closed
 *   first), and so are all connections and each client's; an answer whose bytes the client does
 *   not take for `sendTimeoutMs` is closed.
 */
export interface HttpServerOptions {
  fetch: (request: Request, env: HttpBindings) => Response | Promise<Response>;
  hostname: string;
  port: number;
  /** The largest request body the operation at this path accepts. */
  maxRequestBodyBytes: (path: string) => number;
  /**
   * Answers the requests it has an operation for straight from node's server, ahead of the app
   * (src/http/node-router.ts); calls `toApp` for every other one.
   */
  beforeApp?: (req: IncomingMessage, res: ServerResponse, toApp: () => void) => void;
  /** Around every request, whoever answers it: request id, access log, metrics. */
  envelope: RequestEnvelope;
  connections: ConnectionLimits;
  /** For connections closed by the bounds, and requests dropped after a closing answer. */
  log: Pick<Logger, 'warn' | 'debug'>;
}

export interface ConnectionLimits {
  /** A request head must arrive whole within this (node's headersTimeout); else 408 and close. */
  headersTimeoutMs: number;
  /** A request, body included, must arrive whole within this (node's requestTimeout). */
  requestTimeoutMs: number;
  /**
   * Connections without a request under way (opened and no whole head yet, or kept alive
   * between requests): past this many, the oldest are closed.
   */
  maxIdle: number;
  /**
   * All connections: past this many, the oldest idle one is closed to make room, or the new
   * one when none is idle. Above maxIdle: the difference is kept for connections whose request
   * head has arrived (health checks, keyed clients).
   */
  maxTotal: number;
  /**
   * Connections from one client address (an IPv6 /64 counts as one: src/policy/client-address.ts), below
   * maxTotal so that one client's connections never take them all; past it the new one is closed.
   */
  maxPerClient: number;
  /** Peers not capped per client: the proxies in front of the app, which carry many clients' requests. */
  uncappedClients: AddressRanges;
  /**
   * An answer with bytes waiting that the client has taken none of for this long is closed, and
   * its buffers freed (nginx's send_timeout): a reader that stopped holds its slot no longer.
   */
  sendTimeoutMs: number;
  /**
   * A kept-alive connection without a request for this long is closed (node's keepAliveTimeout,
   * told to clients in `Keep-Alive: timeout=`). A client may send its next request just as the
   * close is under way, and lose it: so this is longer than the proxies' own idle timeouts, so
   * that they close first.
   */
  keepAliveTimeoutMs: number;
}

/** How often node looks for requests past headersTimeoutMs or requestTimeoutMs. */
const CONNECTIONS_CHECK_MS = 1_000;
/**
 * Requests waiting on one connection for their turn past which the connection is no longer read
 * until they are answered: node parses whatever a client pipelines, and the requests it has
 * parsed but not yet answered are held in memory.
 */
const MAX_WAITING_PER_CONNECTION = 32;
/** Closings by the bounds are logged at most this often, with their counts since the last line. */
const SHED_LOG_INTERVAL_MS = 10_000;

export function startHttpServer(options: HttpServerOptions, onListening: (address: AddressInfo) => void): Server {
  const answerWithApp = getRequestListener(async (request, env) => {
    const bindings = env as HttpBindings;
    const response = await options.fetch(request, bindings);
    closeIfBodyLeftUnread(bindings.incoming, bindings.outgoing);
    return response;
  });
  // Hono's listener answers its own failures (a 500, or a closed connection once the head is
  // sent): its promise only says when the answer is written, which nothing here waits for.
  const listener = (req: IncomingMessage, res: ServerResponse): void => void answerWithApp(req, res);
  const before = options.beforeApp;
  const answer = before
    ? (req: IncomingMessage, res: ServerResponse) => before(req, res, () => listener(req, res))
    : listener;
  const limits = options.connections;
  const server = createServer({
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    connectionsCheckingInterval: Math.min(CONNECTIONS_CHECK_MS, limits.headersTimeoutMs),
  });
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  const connections = boundConnections(server, limits, options.log);
  server.on('request', (req: IncomingMessage, res: ServerResponse) =>
    connections.answerInTurn(req, res, () => options.envelope(req, res, () => answer(req, res))),
  );
  server.on('checkContinue', (request: IncomingMessage, response: ServerResponse) => {
    connections.answerInTurn(request, response, () => {
      const path = (request.url ?? '/').split('?', 1)[0]!;
      if (!(declaredLength(request) > options.maxRequestBodyBytes(path))) response.writeContinue();
      options.envelope(request, response, () => listener(request, response));
    });
  });
  server.listen(options.port, options.hostname, () => onListening(server.address() as AddressInfo));
  return server;
}

/** One connection, from its accept to its close. */
interface Connection {
  socket: Socket;
  /** The response being answered; undefined while the connection waits for a request head. */
  current: ServerResponse | undefined;
  /** Requests node has parsed behind the current one, to be answered in order. */
  waiting: Array<() => void>;
  /** An answer on it said `Connection: close`: nothing after it is a request. */
  closing: boolean;
  /** Not read while too many requests wait (MAX_WAITING_PER_CONNECTION). */
  paused: boolean;
  /** Closed by the bounds or gone: no longer counted. */
  gone: boolean;
  /** The client address it counts against (clientOf), or null when its peer is uncapped. */
  client: string | null;
  /** What the socket had sent (sentBytes) when last seen to move, and when (performance.now()). */
  written: number;
  writtenAt: number;
}

/**
 * Counts the server's connections and bounds them, against clients that open connections and
 * never finish a request head (slowloris), or open more than the process has descriptors for:
 *
 * - node closes a connection whose request head has not arrived whole within headersTimeoutMs
 *   (408), checked every second;
 * - a connection is idle from its accept until a whole request head has arrived, and again once
 *   its answers are finished and it is kept alive for the next one; past maxIdle idle
 *   connections, the one idle the longest is closed, so that holding connections open costs a
 *   client a new connection for each one closed, while a client that sends its request at once
 *   is not idle long enough to be the oldest;
 * - past maxTotal connections, the oldest idle one is closed to make room for a new one, or the
 *   new one itself when none is idle (every connection is then answering a request);
 * - past maxPerClient connections from one client address, the new one is closed, so that one
 *   client holding answers open (or idle connections) leaves room for every other client;
 * - an answer that has bytes waiting and has sent none of them for sendTimeoutMs is closed,
 *   checked every second: a client that stops reading (a small receive window, never read) frees
 *   its slot and the answer's buffers. An idle event stream has nothing waiting and is not cut.
 *
 * It also answers one connection's requests in turn (answerInTurn).
 */
function boundConnections(server: Server, limits: ConnectionLimits, log: Pick<Logger, 'warn' | 'debug'>) {
  const bySocket = new WeakMap<Socket, Connection>();
  // In the order they became idle: the first is the one idle the longest.
  const idle = new Set<Connection>();
  // Answering a request: watched for answers the client does not take.
  const answering = new Set<Connection>();
  const perClient = new Map<string, number>();
  let total = 0;
  let shed = { idle: 0, total: 0, per_client: 0, send_timeout: 0 };
  let lastShedLog = Number.NEGATIVE_INFINITY;
  let shedLogTimer: NodeJS.Timeout | undefined;

  type Reason = keyof typeof shed;

  function close(connection: Connection, reason: Reason): void {
    forget(connection);
    shed[reason]++;
    connection.socket.destroy();
    const wait = lastShedLog + SHED_LOG_INTERVAL_MS - performance.now();
    if (wait <= 0) logShed();
    else if (shedLogTimer === undefined) {
      // Closings within the interval are told together at its end.
      shedLogTimer = setTimeout(logShed, wait);
      shedLogTimer.unref();
    }
  }

  function logShed(): void {
    shedLogTimer = undefined;
    lastShedLog = performance.now();
    log.warn(
      {
        closed_idle: shed.idle,
        closed_over_total: shed.total,
        closed_over_per_client: shed.per_client,
        closed_send_timeout: shed.send_timeout,
        connections: total,
        idle: idle.size,
        max_idle: limits.maxIdle,
        max_total: limits.maxTotal,
        max_per_client: limits.maxPerClient,
      },
      'connections closed: over the bounds of the app port (HTTP_MAX_IDLE_CONNECTIONS, HTTP_MAX_CONNECTIONS, HTTP_MAX_CONNECTIONS_PER_CLIENT, HTTP_SEND_TIMEOUT_S)',
    );
    shed = { idle: 0, total: 0, per_client: 0, send_timeout: 0 };
  }

  function forget(connection: Connection): void {
    if (connection.gone) return;
    connection.gone = true;
    idle.delete(connection);
    answering.delete(connection);
    total--;
    if (connection.client !== null) {
      const left = perClient.get(connection.client)! - 1;
      if (left > 0) perClient.set(connection.client, left);
      else perClient.delete(connection.client);
    }
  }

  /** Closes the answers whose client has taken none of their waiting bytes for sendTimeoutMs. */
  function closeStalledAnswers(): void {
    const now = performance.now();
    for (const connection of answering) {
      const sent = sentBytes(connection.socket);
      if (sent !== connection.written || connection.socket.writableLength === 0) {
        connection.written = sent;
        connection.writtenAt = now;
      } else if (now - connection.writtenAt >= limits.sendTimeoutMs) {
        close(connection, 'send_timeout');
      }
    }
  }
  const stallCheck = setInterval(closeStalledAnswers, Math.min(CONNECTIONS_CHECK_MS, limits.sendTimeoutMs));
  stallCheck.unref();
  server.once('close', () => clearInterval(stallCheck));

  function becomeIdle(connection: Connection): void {
    if (connection.gone) return;
    idle.add(connection);
    while (idle.size > limits.maxIdle) close(idle.values().next().value!, 'idle');
  }

  server.on('connection', (socket: Socket) => {
    const connection: Connection = {
      socket,
      current: undefined,
      waiting: [],
      closing: false,
      paused: false,
      gone: false,
      client: limits.uncappedClients.includes(socket.remoteAddress) ? null : clientOf(socket.remoteAddress),
      written: 0,
      writtenAt: 0,
    };
    bySocket.set(socket, connection);
    total++;
    if (connection.client !== null) perClient.set(connection.client, (perClient.get(connection.client) ?? 0) + 1);
    socket.once('close', () => forget(connection));
    if (connection.client !== null && perClient.get(connection.client)! > limits.maxPerClient) {
      close(connection, 'per_client');
      return;
    }
    if (total > limits.maxTotal) {
      const oldest = idle.values().next().value;
      close(oldest ?? connection, 'total');
      if (connection.gone) return;
    }
    becomeIdle(connection);
  });

  /**
   * Runs `run` (the request's answer) once every earlier request on its connection has been
   * answered, and never when an earlier answer said `Connection: close` (or its connection went
   * away before it finished): node has parsed such a request, but the client was told that the
   * connection ends, and its answer would never be sent.
   */
  function answerInTurn(req: IncomingMessage, res: ServerResponse, run: () => void): void {
    const connection = bySocket.get(req.socket);
    if (!connection) return run();
    if (connection.closing) {
      log.debug({ method: req.method }, 'a request after an answer that closed its connection: dropped, not answered');
      return;
    }
    if (connection.current) {
      connection.waiting.push(() => answerInTurn(req, res, run));
      if (connection.waiting.length >= MAX_WAITING_PER_CONNECTION) stopReading(connection);
      return;
    }
    connection.current = res;
    idle.delete(connection);
    connection.written = sentBytes(connection.socket);
    connection.writtenAt = performance.now();
    if (!connection.gone) answering.add(connection);
    res.once('close', () => {
      connection.current = undefined;
      answering.delete(connection);
      if (closesConnection(res)) {
        connection.closing = true;
        const dropped = connection.waiting.splice(0);
        for (const next of dropped) next();
        // What follows is read and dropped while the connection closes (lingerBeforeClosing).
        if (connection.paused) readAgain(connection);
      } else if (connection.waiting.length > 0) {
        const next = connection.waiting.shift()!;
        if (connection.paused && connection.waiting.length < MAX_WAITING_PER_CONNECTION) readAgain(connection);
        next();
      } else {
        becomeIdle(connection);
      }
    });
    run();
  }

  return { answerInTurn };
}

/**
 * Bytes handed on to the operating system: bytesWritten counts the bytes still queued in the
 * socket too, which grow with the app's writes whether or not the client reads.
 */
function sentBytes(socket: Socket): number {
  return socket.bytesWritten - socket.writableLength;
}

/** Node's server socket, with what its own backpressure uses (node:_http_server). */
type ServerSocket = Socket & { _paused?: boolean; parser?: { resume(): void } | null };

/**
 * Stops reading a connection the way node's server does when answers queue up for a client that
 * does not read them: `_paused` keeps node from starting to read again (reading a request's body
 * would), and node pauses the parser once it has executed the chunk at hand. So at most one more
 * read's worth of requests is parsed.
 */
function stopReading(connection: Connection): void {
  const socket = connection.socket as ServerSocket;
  connection.paused = true;
  if (socket._paused) return;
  socket._paused = true;
  socket.pause();
}

/**
 * Reads a connection stopped by stopReading again, as node's server does on 'drain'; left to
 * node when its own reason to stop still holds (a client not taking its answers): node reads it
 * again on 'drain'.
 */
function readAgain(connection: Connection): void {
  const socket = connection.socket as ServerSocket;
  connection.paused = false;
  if (!socket._paused || socket.writableNeedDrain) return;
  socket._paused = false;
  socket.parser?.resume();
  socket.resume();
}

/**
 * Whether the answer ended its connection: it said `Connection: close` (node marks such a
 * response `_last`, and destroys the socket after it), or it never finished.
 */
function closesConnection(res: ServerResponse): boolean {
  return (
    (res as ServerResponse & { _last?: boolean })._last === true ||
    !res.writableFinished ||
    res.socket?.destroyed === true
  );
}

function declaredLength(request: IncomingMessage): number {
  return Number(request.headers['content-length'] ?? 0);
}

/**
 * Called once an answer is ready, before its head is written: an answer given without reading the
 * request's body to the end (an early 401, 413 or 415) closes the connection, lingering.
 */
export function closeIfBodyLeftUnread(req: IncomingMessage, res: ServerResponse): void {
  if (!bodyLeftUnread(req)) return;
  res.setHeader('connection', 'close');
  lingerBeforeClosing(req.socket, req);
}

function bodyLeftUnread(request: IncomingMessage): boolean {
  const hasBody = request.headers['transfer-encoding'] !== undefined || declaredLength(request) > 0;
  return hasBody && !request.readableEnded;
}

/** How long a connection closed with request bytes still arriving waits for the client to close. */
const LINGER_MS = 2_000;

/**
 * A lingering close, as nginx and Apache do it. Closing a socket whose receive buffer still holds
 * unread request bytes makes the kernel send a reset at once, and a reset discards whatever of
 * the answer had not yet left the send buffer: the client sees the connection die without its
 * 413 (on loopback, without this, up to 3 in 10 of 4 MiB bodies sent eight at a time lost their
 * answer). Node's server closes a `Connection: close` connection by calling
 * socket.destroySoon() once the response is finished; on this connection that becomes: send the
 * answer and FIN, read and drop the rest of the request body, and close when the client closes
 * its side, or after LINGER_MS. Requests node parses from what follows are dropped unanswered
 * (answerInTurn).
 */
function lingerBeforeClosing(socket: Socket, request: IncomingMessage): void {
  socket.destroySoon = function lingeringClose(this: Socket) {
    this.end();
    const deadline = setTimeout(() => this.destroy(), LINGER_MS);
    deadline.unref();
    this.once('end', () => this.destroy());
    this.once('close', () => clearTimeout(deadline));
    // Nobody reads the body any more (a reader the app started is abandoned): drop it as it comes.
    request.removeAllListeners('data');
    request.resume();
  };
}
