/**
 * A forward proxy with no policy of its own beyond one allowed origin, for the confinement
 * tests: it stands for an egress guard that sees everything sent through it, so that whatever
 * reaches the trap in a test can only have gone around the proxy. It forwards absolute-URI
 * requests and CONNECT tunnels to `allowed` (host:port) only and answers 403 to anything else;
 * it passes every answer back untouched (redirects to ftp: and smuggled fragments included,
 * which the real guard would refuse). Listens on a Unix socket (for a sandbox's bridge) or on
 * 127.0.0.1 (for unconfined control runs).
 *
 *   const proxy = await startPlainProxy({ allowed: media.hostPort });            // TCP
 *   const proxy = await startPlainProxy({ allowed: media.hostPort, socketPath }); // Unix socket
 *   proxy.url            // 'http://127.0.0.1:<port>' (TCP only)
 *   proxy.requests       // ['GET http://127.0.0.1:.../x', 'CONNECT ...'] as received
 */
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';

export interface PlainProxy {
  readonly url: string | null;
  readonly requests: string[];
  close(): Promise<void>;
}

export async function startPlainProxy(opts: { allowed: string; socketPath?: string }): Promise<PlainProxy> {
  const requests: string[] = [];
  const sockets = new Set<net.Socket>();
  const [allowedHost, allowedPort] = [
    opts.allowed.slice(0, opts.allowed.lastIndexOf(':')),
    Number(opts.allowed.slice(opts.allowed.lastIndexOf(':') + 1)),
  ];
  const server = http.createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    let target: URL;
    try {
      target = new URL(req.url ?? '');
    } catch {
      res.writeHead(400).end();
      return;
    }
    if (target.host !== opts.allowed) {
      res.writeHead(403).end();
      return;
    }
    const upstream = http.request(
      {
        host: allowedHost,
        port: allowedPort,
        method: req.method,
        path: `${target.pathname}${target.search}`,
        headers: { ...req.headers, connection: 'close' },
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  server.on('connect', (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
    requests.push(`CONNECT ${req.url}`);
    if (req.url !== opts.allowed) {
      client.end('HTTP/1.1 403 Forbidden\r\nConnection: close\r\n\r\n');
      return;
    }
    const upstream = net.connect(allowedPort, allowedHost, () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
  });
  server.on('connection', (socket: net.Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  if (opts.socketPath !== undefined) server.listen(opts.socketPath);
  else server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  return {
    url: typeof address === 'string' || address === null ? null : `http://127.0.0.1:${address.port}`,
    requests,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
