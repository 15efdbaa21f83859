import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';
import postgres from 'postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { postgresSockets } from '../../src/db/postgres-socket.js';

/**
 * A server on loopback that speaks just enough of PostgreSQL's protocol: it accepts a connection's
 * startup and hangs up on its first query, or, once told to refuse, hangs up at startup, after an
 * error (as a server whose database is gone does) or without one.
 */
type Refusal = 'database gone' | 'hang up';

interface FakeServer {
  port: number;
  /** Connections started since the last refuse(). */
  attempts(): number;
  refuse(how: Refusal): void;
  /** Ends every connection from the server's side. */
  hangUp(): void;
  close(): Promise<void>;
}

function message(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0);
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}

const AUTHENTICATION_OK = message('R', Buffer.from([0, 0, 0, 0]));
const READY_FOR_QUERY = message('Z', Buffer.from('I'));
const DATABASE_GONE = message('E', Buffer.from('SFATAL\0C3D000\0Mdatabase "test" does not exist\0\0'));

async function startFakeServer(): Promise<FakeServer> {
  let refusal: Refusal | null = null;
  let attempts = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    attempts++;
    let started = false;
    socket.on('data', () => {
      if (refusal === 'database gone') return void socket.end(DATABASE_GONE);
      if (refusal === 'hang up' || started) return void socket.end();
      started = true;
      socket.write(Buffer.concat([AUTHENTICATION_OK, READY_FOR_QUERY]));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    port: (server.address() as { port: number }).port,
    attempts: () => attempts,
    refuse(how) {
      refusal = how;
      attempts = 0;
    },
    hangUp() {
      for (const socket of sockets) socket.end();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

type Settled = { state: 'pending' } | { state: 'rejected'; code: unknown } | { state: 'fulfilled' };

function track(promise: Promise<unknown>): { settled: Settled; done: Promise<void> } {
  const tracked: { settled: Settled; done: Promise<void> } = { settled: { state: 'pending' }, done: Promise.resolve() };
  tracked.done = promise.then(
    () => void (tracked.settled = { state: 'fulfilled' }),
    (err: { code?: unknown }) => void (tracked.settled = { state: 'rejected', code: err.code }),
  );
  return tracked;
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setImmediate(resolve));
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** One connection, whose last query was cut off by the server, then a server that refuses it. */
async function refusedAfterACutQuery(how: Refusal, options: Record<string, unknown>) {
  const server = await startFakeServer();
  cleanups.push(() => server.close());
  const sql = postgres({ host: '127.0.0.1', port: server.port, max: 1, fetch_types: false, ...options });
  cleanups.push(() => sql.end({ timeout: 0 }));
  await expect(sql`select 1`).rejects.toMatchObject({ code: 'CONNECTION_CLOSED' });
  server.refuse(how);
  return { server, query: track(sql`select 1`) };
}

describe('postgresSockets', () => {
  it.each(['database gone', 'hang up'] as const)(
    'settles a query when the server refuses the connection (%s), and backs off between attempts',
    async (how) => {
      const backoff = () => 0.01;
      const { server, query } = await refusedAfterACutQuery(how, { socket: postgresSockets(), backoff });
      await query.done;
      expect(query.settled).toMatchObject({ state: 'rejected' });
      expect(server.attempts()).toBe(1);
    },
  );

  // With an error first, the patched driver settles the query on its own sockets too
  // (patches/README.md); a bare hang-up it still takes for a reason to try again at once.
  it("control: postgres.js's own sockets leave that query waiting while they reconnect without pause (hang up)", async () => {
    const { server, query } = await refusedAfterACutQuery('hang up', { backoff: () => 0.01 });
    await until(() => server.attempts() >= 50 || query.settled.state !== 'pending');
    expect(query.settled).toEqual({ state: 'pending' });
  });

  it('makes a close the server began an error, and leaves one this side began clean', async () => {
    const server = createServer((socket) => {
      socket.on('data', () => socket.end());
      socket.on('error', () => socket.destroy());
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    cleanups.push(() => new Promise((resolve) => server.close(() => resolve())));
    const sockets = postgresSockets();
    const address = { host: ['127.0.0.1'], port: [(server.address() as { port: number }).port] };

    const closedByServer = sockets(address);
    const errors: unknown[] = [];
    closedByServer.on('error', (err) => errors.push(err));
    closedByServer.write('hello');
    // (events.once would reject on the 'error' that comes first.)
    const serverHadError = await new Promise((resolve) => closedByServer.on('close', resolve));
    expect(serverHadError).toBe(true);
    expect(errors).toMatchObject([{ code: 'CONNECTION_CLOSED' }]);

    const closedHere = sockets(address);
    closedHere.on('error', (err) => errors.push(err));
    closedHere.end('bye');
    const hereHadError = await new Promise((resolve) => closedHere.on('close', resolve));
    expect(hereHadError).toBe(false);
    expect(errors).toHaveLength(1);
  });
});
