/**
 * The app's node server (src/http/server.ts) before a stand-in app, over raw sockets on loopback:
 * one connection's requests answered in turn, nothing run after an answer that says
 * `Connection: close`, and a connection no longer read while too many of its requests wait.
 */
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startHttpServer } from '../../src/http/server.js';
import { openRawConnection, type RawConnection } from '../support/raw-http.js';

let server: Server;
let port: number;
/** What the app was asked, in order: method and path. */
const ran: string[] = [];
let running = 0;
let mostAtOnce = 0;
/** Answers of /hold requests, released by the test. */
const held: Array<() => void> = [];
const dropped: unknown[] = [];

beforeAll(async () => {
  server = startHttpServer(
    {
      fetch: async (request) => {
        const path = new URL(request.url).pathname;
        ran.push(`${request.method} ${path}`);
        running++;
        mostAtOnce = Math.max(mostAtOnce, running);
        try {
          if (path === '/hold') await new Promise<void>((resolve) => held.push(resolve));
          // Refused before its body is read, as the app's 401 and 415 are.
          if (path === '/refuse')
            return new Response('{}', { status: 401, headers: { 'content-type': 'application/problem+json' } });
          if (request.method === 'POST') await request.text();
          return new Response(path, { status: 200 });
        } finally {
          running--;
        }
      },
      hostname: '127.0.0.1',
      port: 0,
      maxRequestBodyBytes: () => 1024,
      envelope: (_req, _res, answer) => answer(),
      connections: {
        headersTimeoutMs: 10_000,
        requestTimeoutMs: 10_000,
        maxIdle: 100,
        maxTotal: 200,
        maxPerClient: 150,
        uncappedClients: { includes: () => false },
        sendTimeoutMs: 60_000,
        keepAliveTimeoutMs: 75_000,
      },
      log: { warn: () => undefined, debug: (obj: unknown) => void dropped.push(obj) } as never,
    },
    () => undefined,
  );
  await once(server, 'listening');
  port = (server.address() as AddressInfo).port;
});

afterAll(() => {
  server?.close();
});

beforeEach(() => {
  ran.length = 0;
  dropped.length = 0;
  mostAtOnce = 0;
});

const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`;
const post = (path: string, body: string) =>
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

async function connection(): Promise<RawConnection> {
  return openRawConnection(port);
}

describe("one connection's requests", () => {
  it('are answered in order, one at a time; two connections are answered at once (the control)', async () => {
    const [a, b] = await Promise.all([connection(), connection()]);
    a.write(get('/hold') + get('/a2') + get('/a3'));
    b.write(get('/hold'));
    await expect.poll(() => held.length).toBe(2);
    // Both connections' first requests run at once; a's next ones wait for its first.
    expect(mostAtOnce).toBe(2);
    expect(ran).toEqual(['GET /hold', 'GET /hold']);
    for (const release of held.splice(0)) release();
    const bodies = [(await a.readMessage()).body, (await a.readMessage()).body, (await a.readMessage()).body].map(
      String,
    );
    expect(bodies).toEqual(['/hold', '/a2', '/a3']);
    expect((await b.readMessage()).status).toBe(200);
    expect(ran.slice(2)).toEqual(['GET /a2', 'GET /a3']);
    a.close();
    b.close();
  });

  it('after an answer that says Connection: close, what follows never reaches the app', async () => {
    const conn = await connection();
    conn.write(post('/refuse', '{"unread": true}') + post('/after', 'x') + get('/after'));
    const answer = await conn.readMessage();
    expect([answer.status, answer.headers.get('connection')]).toEqual([401, 'close']);
    await expect.poll(() => dropped.length).toBe(2);
    expect(ran).toEqual(['POST /refuse']);
    await conn.closedByServer;
    expect(ran).toEqual(['POST /refuse']);
  });

  it('past 32 waiting, the connection is read no more until they are answered; then every one is answered, in order', async () => {
    let parsed = 0;
    const count = (): void => void parsed++;
    server.on('request', count);
    const conn = await connection();
    const pipelined = 3000;
    conn.write(get('/hold') + Array.from({ length: pipelined }, (_, i) => get(`/p${i}`)).join(''));
    await expect.poll(() => held.length).toBe(1);
    await expect.poll(() => parsed).toBeGreaterThan(32);
    // A round trip on another connection: by its end the server has read whatever it would read of the first.
    const other = await connection();
    other.write(get('/other'));
    expect((await other.readMessage()).status).toBe(200);
    other.close();
    server.off('request', count);
    // 105 KB of requests sent at once, a read's worth parsed (up to 64 KiB): then no more.
    expect(parsed).toBeLessThan(pipelined);
    expect(ran).toEqual(['GET /hold', 'GET /other']);
    held.pop()!();
    const count_ = pipelined;
    const paths: string[] = [];
    for (let i = 0; i <= count_; i++) paths.push(String((await conn.readMessage()).body));
    expect(paths).toEqual(['/hold', ...Array.from({ length: count_ }, (_, i) => `/p${i}`)]);
    expect(mostAtOnce).toBe(2);
    conn.close();
  });
});
