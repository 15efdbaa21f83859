/**
 * A callback receiver on 127.0.0.1 for tests: records every request (headers and raw body) and
 * answers as told, one scripted answer per request, then 200.
 *
 *   const receiver = await startWebhookReceiver();
 *   receiver.script(500, 500);                // the first two requests get 500, the rest 200
 *   receiver.script('hang');                  // the next one never gets an answer
 *   receiver.url('/hook')                     // 'http://127.0.0.1:<port>/hook'
 *   await receiver.waitForRequests(3);        // resolves with the first 3 requests
 *   await receiver.stop(); await receiver.listenAgain();   // dead, then back on the same port
 *
 *   // A receiver that checks signatures, as a real one does: a request `verify` refuses is answered
 *   // 401 (and takes no scripted answer); one it accepts gets the script's answer, or 200.
 *   const checking = await startWebhookReceiver({ verify: (request) => verifyWebhook(secret, request.headers, request.body) });
 */
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface ReceivedCallback {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
  /** What it was answered: a status, or 'hang'. */
  answer: number | 'hang';
  /** When the exchange ended (answered, or the sender gave up on a 'hang'); undefined while open. */
  closedAt?: number;
}

export type ScriptedAnswer = number | 'hang';

export interface WebhookReceiver {
  readonly port: number;
  /** '127.0.0.1:<port>' (for FETCH_ALLOW_HOSTS). */
  readonly hostPort: string;
  readonly requests: ReceivedCallback[];
  url(path: string): string;
  /** Answers for the next requests, in order; once used up, requests get `fallback` (default 200). */
  script(...answers: ScriptedAnswer[]): void;
  /** The answer once the script is used up. */
  fallback(answer: ScriptedAnswer): void;
  waitForRequests(
    count: number,
    timeoutMs?: number,
    where?: (request: ReceivedCallback) => boolean,
  ): Promise<ReceivedCallback[]>;
  /** Stops listening and cuts every connection: the port refuses connections until listenAgain(). */
  stop(): Promise<void>;
  listenAgain(): Promise<void>;
  close(): Promise<void>;
}

export async function startWebhookReceiver(
  opts: { verify?: (request: Pick<ReceivedCallback, 'headers' | 'body'>) => boolean } = {},
): Promise<WebhookReceiver> {
  const requests: ReceivedCallback[] = [];
  const scripted: ScriptedAnswer[] = [];
  let otherwise: ScriptedAnswer = 200;
  const sockets = new Set<Socket>();
  const waiters = new Set<() => void>();
  let server: Server;
  let port = 0;

  const listen = async () => {
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        const refused = opts.verify !== undefined && !opts.verify({ headers: req.headers, body });
        const answer = refused ? 401 : (scripted.shift() ?? otherwise);
        const received: ReceivedCallback = {
          method: req.method ?? '',
          path: req.url ?? '',
          headers: req.headers,
          body,
          at: Date.now(),
          answer,
        };
        res.once('close', () => (received.closedAt = Date.now()));
        requests.push(received);
        for (const wake of [...waiters]) wake();
        if (answer === 'hang') return;
        res.writeHead(answer, { 'content-type': 'text/plain' });
        res.end(`answered ${answer}\n`);
      });
    });
    server.on('connection', (socket) => {
      sockets.add(socket);
      socket.once('close', () => sockets.delete(socket));
    });
    server.listen(port, '127.0.0.1');
    await once(server, 'listening');
    port = (server.address() as AddressInfo).port;
  };
  await listen();

  const stop = async () => {
    if (!server.listening) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of sockets) socket.destroy();
    await closed;
  };

  return {
    get port() {
      return port;
    },
    get hostPort() {
      return `127.0.0.1:${port}`;
    },
    requests,
    url: (path) => `http://127.0.0.1:${port}${path}`,
    script: (...answers) => void scripted.push(...answers),
    fallback: (answer) => void (otherwise = answer),
    waitForRequests(count, timeoutMs = 30_000, where = () => true) {
      const matching = () => requests.filter(where);
      return new Promise((resolve, reject) => {
        const check = () => {
          if (matching().length < count) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve(matching().slice(0, count));
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(
            new Error(
              `the receiver got ${matching().length} of ${count} requests: ${JSON.stringify(requests.map((r) => ({ path: r.path, answer: r.answer })))}`,
            ),
          );
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    stop,
    listenAgain: listen,
    close: stop,
  };
}
