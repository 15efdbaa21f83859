import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { getRequestListener, type HttpBindings } from '@hono/node-server';
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
 * - `Expect: 100-continue`: Node answers 100 Continue by itself unless 'checkContinue' is
 *   handled. A Content-Length over the largest body the request's path takes gets no 100, so
 *   the client need not send a body that would be refused; the app answers at once (413).
 */
export interface HttpServerOptions {
  fetch: (request: Request, env: HttpBindings) => Response | Promise<Response>;
  hostname: string;
  port: number;
  /** The largest request body the operation at this path accepts. */
  maxRequestBodyBytes: (path: string) => number;
  /**
   * Answers some requests straight from node's server, ahead of the app (the lanes:
   * src/delivery/signed-lane.ts, src/http/job-lane.ts); calls `toApp` for every other one.
   */
  beforeApp?: (req: IncomingMessage, res: ServerResponse, toApp: () => void) => void;
  /** Around every request, whoever answers it: request id, access log, metrics. */
  envelope: RequestEnvelope;
}

export function startHttpServer(options: HttpServerOptions, onListening: (address: AddressInfo) => void): Server {
  const listener = getRequestListener(async (request, env) => {
    const bindings = env as HttpBindings;
    const response = await options.fetch(request, bindings);
    // Checked once the app has answered: a body it read to the end leaves nothing behind.
    if (bodyLeftUnread(bindings.incoming)) {
      bindings.outgoing.setHeader('connection', 'close');
      lingerBeforeClosing(bindings.incoming.socket, bindings.incoming);
    }
    return response;
  });
  const before = options.beforeApp;
  const answer = before ? (req: IncomingMessage, res: ServerResponse) => before(req, res, () => listener(req, res)) : listener;
  const server = createServer((req, res) => options.envelope(req, res, () => answer(req, res)));
  server.on('checkContinue', (request: IncomingMessage, response: ServerResponse) => {
    const path = (request.url ?? '/').split('?', 1)[0]!;
    if (!(declaredLength(request) > options.maxRequestBodyBytes(path))) response.writeContinue();
    options.envelope(request, response, () => listener(request, response));
  });
  server.listen(options.port, options.hostname, () => onListening(server.address() as AddressInfo));
  return server;
}

function declaredLength(request: IncomingMessage): number {
  return Number(request.headers['content-length'] ?? 0);
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
 * its side, or after LINGER_MS.
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
