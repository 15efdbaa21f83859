/**
 * An operator's upstream HTTP proxy stand-in for the egress guard's EGRESS_UPSTREAM_PROXY: on
 * 127.0.0.1, it answers CONNECT only (anything else gets 405), records every CONNECT target and
 * Proxy-Authorization it is sent, checks the credentials when given some, and tunnels to loopback
 * addresses only (403 for anything else; a tunnel it cannot open is closed).
 *
 *   const proxy = await startRecordingProxy({ user: 'fetcher', password: 'pw' });
 *   proxy.url('fetcher', 'pw')    // 'http://fetcher:pw@127.0.0.1:<port>'
 *   proxy.asked                   // [{ target: '127.0.0.1:8000', authorization: 'Basic ...' }]
 *   await proxy.close();
 */
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';

export interface RecordingProxy {
  port: number;
  asked: Array<{ target: string; authorization: string | undefined }>;
  url(user: string, password: string): string;
  close(): Promise<void>;
}

export async function startRecordingProxy(
  credentials: { user: string; password: string } | null,
): Promise<RecordingProxy> {
  const asked: RecordingProxy['asked'] = [];
  const expected =
    credentials === null
      ? undefined
      : `Basic ${Buffer.from(`${credentials.user}:${credentials.password}`).toString('base64')}`;
  const server = http.createServer((_req, res) => res.writeHead(405).end());
  const sockets = new Set<net.Socket>();
  server.on('connection', (socket: net.Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  server.on('connect', (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
    asked.push({ target: req.url ?? '', authorization: req.headers['proxy-authorization'] });
    client.on('error', () => client.destroy());
    if (req.headers['proxy-authorization'] !== expected) {
      client.end(
        'HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm="upstream"\r\nContent-Length: 0\r\n\r\n',
      );
      return;
    }
    const m = /^\[?([^\]]+?)\]?:(\d+)$/.exec(req.url ?? '');
    if (!m || !['127.0.0.1', '::1'].includes(m[1]!)) {
      client.end('HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    const upstream = net.connect(Number(m[2]), m[1], () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    asked,
    url: (user, password) => `http://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
