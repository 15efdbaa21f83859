/**
 * The app's node server (src/http/server.ts) against clients that hold answers open: the
 * per-client connection cap (with its uncapped proxies) and the send timeout, over real sockets
 * on loopback. A second loopback address (127.0.0.2; Linux routes all of 127/8 to lo) plays the
 * other client.
 */
import { once } from 'node:events';
import type { Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type ConnectionLimits, startHttpServer } from '../../src/http/server.js';
import { clientOf, parseAddressRanges, type AddressRanges } from '../../src/policy/client-address.js';

const BODY_BYTES = 64 * 1024 * 1024;
const CHUNK = new Uint8Array(256 * 1024);

const servers: Server[] = [];
const sockets: Socket[] = [];
afterEach(() => {
  for (const socket of sockets.splice(0)) socket.destroy();
  for (const server of servers.splice(0)) server.close();
});

function ranges(list: string[]): AddressRanges {
  const parsed = parseAddressRanges(list);
  if (typeof parsed === 'string') throw new Error(parsed);
  return parsed;
}

/** A server whose /big answers 64 MiB, pulled as the socket drains, and / a short text. */
async function serve(limits: Partial<ConnectionLimits>) {
  const warnings: unknown[] = [];
  const warned = counter();
  const answering = counter();
  const server = startHttpServer(
    {
      fetch: (request) => {
        if (new URL(request.url).pathname !== '/big') return new Response('ok');
        answering.add();
        let sent = 0;
        const body = new ReadableStream<Uint8Array>({
          pull(controller) {
            if (sent >= BODY_BYTES) return controller.close();
            sent += CHUNK.byteLength;
            controller.enqueue(CHUNK);
          },
        });
        return new Response(body, { headers: { 'content-length': String(BODY_BYTES) } });
      },
      hostname: '127.0.0.1',
      port: 0,
      maxRequestBodyBytes: () => 1024,
      envelope: (_req, _res, answer) => answer(),
      connections: {
        headersTimeoutMs: 10_000,
        requestTimeoutMs: 10_000,
        maxIdle: 50,
        maxTotal: 100,
        maxPerClient: 99,
        uncappedClients: ranges([]),
        sendTimeoutMs: 60_000,
        keepAliveTimeoutMs: 75_000,
        ...limits,
      },
      log: {
        warn: (fields: unknown) => {
          warnings.push(fields);
          warned.add();
        },
        debug: () => undefined,
      } as never,
    },
    () => undefined,
  );
  servers.push(server);
  await once(server, 'listening');
  const openConnections = () =>
    new Promise<number>((resolve, reject) =>
      server.getConnections((err, count) => (err ? reject(err) : resolve(count))),
    );
  return { port: (server.address() as AddressInfo).port, warnings, warned, answering, openConnections };
}

/** A count, and a wait for it to reach a figure. */
function counter() {
  let count = 0;
  const waiters: Array<[number, () => void]> = [];
  return {
    add() {
      count++;
      for (const waiter of waiters.filter(([target]) => count >= target)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter[1]();
      }
    },
    value: () => count,
    reach: (target: number) =>
      new Promise<void>((resolve) => (count >= target ? resolve() : waiters.push([target, resolve]))),
  };
}

interface Client {
  socket: Socket;
  /** Bytes received so far. */
  received(): number;
  /** Resolves when the server has closed the connection. */
  closed: Promise<void>;
  isClosed(): boolean;
}

/** A connection from `from` that sends GET `path` and, when `read` is false, never reads. */
async function client(
  port: number,
  from: string,
  path: string,
  read: boolean,
  closes?: ReturnType<typeof counter>,
): Promise<Client> {
  const socket = connect({ host: '127.0.0.1', port, localAddress: from });
  sockets.push(socket);
  await once(socket, 'connect');
  let bytes = 0;
  let closed = false;
  const closedPromise = new Promise<void>((resolve) =>
    socket.once('close', () => {
      closed = true;
      closes?.add();
      resolve();
    }),
  );
  socket.on('error', () => undefined);
  socket.on('data', (chunk: Buffer) => (bytes += chunk.byteLength));
  if (!read) socket.pause();
  socket.write(`GET ${path} HTTP/1.1\r\nHost: test\r\n\r\n`);
  return { socket, received: () => bytes, closed: closedPromise, isClosed: () => closed };
}

/** One GET / on a new connection from `from`: its status line, or what ended the connection. */
async function ask(port: number, from: string): Promise<string> {
  const socket = connect({ host: '127.0.0.1', port, localAddress: from });
  sockets.push(socket);
  let text = '';
  socket.setEncoding('latin1').on('data', (chunk: string) => (text += chunk));
  const ended = new Promise<void>((resolve) => {
    socket.once('close', () => resolve());
    socket.on('error', () => resolve());
  });
  socket.write('GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n');
  await ended;
  return text.split('\r\n', 1)[0] || 'closed without an answer';
}

describe('the send timeout', () => {
  it('closes an answer the client stopped reading; the same stall under a longer timeout stays (the control), and so does a slow reader', async () => {
    const timed = await serve({ sendTimeoutMs: 300 });
    const untimed = await serve({ sendTimeoutMs: 60_000 });
    await client(untimed.port, '127.0.0.1', '/big', false);
    const reading = await client(timed.port, '127.0.0.1', '/big', false);
    await client(timed.port, '127.0.0.1', '/big', false);
    await Promise.all([timed.answering.reach(2), untimed.answering.reach(1)]);
    // The reader takes a little at a time, slower than the server could send, but never stops.
    const trickle = setInterval(() => {
      reading.socket.resume();
      setTimeout(() => reading.socket.pause(), 5);
    }, 100);
    // The stalled answer's closing is logged (a paused client would see its end only by reading).
    await timed.warned.reach(1);
    clearInterval(trickle);
    expect(timed.warnings).toContainEqual(expect.objectContaining({ closed_send_timeout: 1 }));
    expect(await timed.openConnections()).toBe(1);
    expect(reading.isClosed()).toBe(false);
    expect(reading.received()).toBeGreaterThan(0);
    expect(await untimed.openConnections()).toBe(1);
    expect(untimed.warnings).toEqual([]);
  });
});

describe('the keep-alive timeout', () => {
  it('tells clients how long an idle connection is kept and closes it then; under a longer one (the control) it stays', async () => {
    const short = await serve({ keepAliveTimeoutMs: 1_000 });
    const long = await serve({ keepAliveTimeoutMs: 75_000 });
    const [shortHead, shortClosed] = await keptAlive(short.port);
    const [longHead] = await keptAlive(long.port);
    expect(longHead).toMatch(/\r\nKeep-Alive: timeout=75\r\n/i);
    expect(shortHead).toMatch(/\r\nKeep-Alive: timeout=1\r\n/i);
    await shortClosed;
    expect(await long.openConnections()).toBe(1);
    expect(await short.openConnections()).toBe(0);
  });
});

/** One request on a kept-alive connection: the answer's head, and when the server closes the connection. */
async function keptAlive(port: number): Promise<[string, Promise<void>]> {
  const socket = connect({ port, host: '127.0.0.1' });
  sockets.push(socket);
  let text = '';
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  const answered = new Promise<void>((resolve) =>
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (text.includes('\r\n\r\n')) resolve();
    }),
  );
  socket.write('GET / HTTP/1.1\r\nHost: test\r\n\r\n');
  await answered;
  return [text.split('\r\n\r\n', 1)[0]! + '\r\n', closed];
}

describe('connections per client', () => {
  it("past the cap, a client's new connections are closed while other clients are answered", async () => {
    const { port, warnings, answering } = await serve({ maxTotal: 20, maxIdle: 10, maxPerClient: 5 });
    const closes = counter();
    const held = await Promise.all(Array.from({ length: 8 }, () => client(port, '127.0.0.2', '/big', false, closes)));
    await Promise.all([closes.reach(3), answering.reach(5)]);
    expect(held.filter((c) => c.isClosed())).toHaveLength(3);
    expect(await ask(port, '127.0.0.2')).toBe('closed without an answer');
    expect(await ask(port, '127.0.0.1')).toBe('HTTP/1.1 200 OK');
    expect(held.filter((c) => c.isClosed())).toHaveLength(3);
    expect(warnings).toContainEqual(expect.objectContaining({ closed_over_per_client: 1 }));
  });

  it('without the per-client cap (the control), one client holding answers fills the total and others are refused', async () => {
    const { port, answering } = await serve({ maxTotal: 20, maxIdle: 10, maxPerClient: 1000 });
    const held = await Promise.all(Array.from({ length: 20 }, () => client(port, '127.0.0.2', '/big', false)));
    // Every one of them is answering, so none is idle and none can make room.
    await answering.reach(20);
    expect(await ask(port, '127.0.0.1')).toBe('closed without an answer');
    expect(held.every((c) => !c.isClosed())).toBe(true);
  });

  it('peers in the uncapped ranges (the proxies in front) are not capped', async () => {
    const { port, answering } = await serve({
      maxTotal: 20,
      maxIdle: 10,
      maxPerClient: 5,
      uncappedClients: ranges(['127.0.0.2']),
    });
    const held = await Promise.all(Array.from({ length: 8 }, () => client(port, '127.0.0.2', '/big', false)));
    await answering.reach(8);
    expect(await ask(port, '127.0.0.2')).toBe('HTTP/1.1 200 OK');
    expect(held.every((c) => !c.isClosed())).toBe(true);
  });
});

describe('client addresses as the cap counts them', () => {
  it('an IPv6 /64 is one client, an IPv4-mapped address is its IPv4 address', () => {
    expect(clientOf('2001:db8::1')).toBe(clientOf('2001:db8::ffff:1234'));
    expect(clientOf('2001:db8::1')).not.toBe(clientOf('2001:db8:0:1::1'));
    expect(clientOf('::ffff:10.0.0.1')).toBe('10.0.0.1');
    expect(clientOf('10.0.0.1')).not.toBe(clientOf('10.0.0.2'));
    expect(clientOf(undefined)).toBe('unknown');
  });
});
