/**
 * A TCP listener that only counts the connections it receives (and answers nothing useful):
 * the "refused destination" of egress tests. It must see zero connections.
 *
 *   const target = await startCountingListener('127.0.0.1');
 *   target.port; target.connections; await target.close();
 */
import { once } from 'node:events';
import net, { type AddressInfo } from 'node:net';

export interface CountingListener {
  readonly host: string;
  readonly port: number;
  /** host:port as it appears in a URL ([::1]:port for IPv6). */
  readonly authority: string;
  readonly connections: number;
  close(): Promise<void>;
}

export async function startCountingListener(host: '127.0.0.1' | '::1'): Promise<CountingListener> {
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    // Anything that got here would be served a tiny "media" file, so a leak cannot look like a refusal.
    socket.end('HTTP/1.1 200 OK\r\ncontent-type: audio/mpeg\r\ncontent-length: 4\r\nconnection: close\r\n\r\nleak');
  });
  server.listen(0, host);
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    host,
    port,
    authority: host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`,
    get connections() {
      return connections;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Whether this machine can listen on the IPv6 loopback. */
export async function ipv6LoopbackAvailable(): Promise<boolean> {
  const server = net.createServer();
  try {
    server.listen(0, '::1');
    await once(server, 'listening');
    return true;
  } catch {
    return false;
  } finally {
    server.close();
  }
}
