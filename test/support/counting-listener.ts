/**
 * A TCP listener that only counts the connections it receives (and answers nothing useful):
 * the "refused destination" of egress tests. It must see zero connections.
 *
 *   const target = await startCountingListener('127.0.0.1');
 *   target.port; target.connections; await target.close();
 *   await target.settle();   // every connection made before this call has been counted
 *
 * `settle` makes one connection of its own (taken off the count again once it says who it is)
 * and waits until it is accepted: the kernel hands queued connections over in order, so any
 * earlier one has been counted by then. A "no connection" check needs no sleep.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import net, { type AddressInfo } from 'node:net';

export interface CountingListener {
  readonly host: string;
  readonly port: number;
  /** host:port as it appears in a URL ([::1]:port for IPv6). */
  readonly authority: string;
  readonly connections: number;
  settle(): Promise<void>;
  close(): Promise<void>;
}

export async function startCountingListener(host: '127.0.0.1' | '::1'): Promise<CountingListener> {
  let connections = 0;
  const sockets = new Set<net.Socket>();
  /** settle() connections in flight, by the token each one sends first. */
  const barriers = new Map<string, () => void>();
  const server = net.createServer((socket) => {
    connections++;
    socket.once('data', (chunk: Buffer) => {
      const barrier = barriers.get(chunk.toString('latin1'));
      if (!barrier) return;
      barriers.delete(chunk.toString('latin1'));
      connections--;
      barrier();
    });
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
    async settle() {
      const token = `settle-${randomUUID()}`;
      const accepted = new Promise<void>((resolve) => barriers.set(token, resolve));
      const client = net.connect(port, host, () => client.write(token));
      client.on('error', () => {});
      await accepted;
      client.destroy();
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
