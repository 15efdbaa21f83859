/**
 * Which dispatcher answers a request (src/http/server.ts): node's router (`beforeApp`) for an
 * ordinary request, and the app for one with `Expect: 100-continue` (node's 'checkContinue'), or
 * for one the router passes on. test/e2e/api-contract.test.ts relies on this to send the same
 * request to both; this is its control.
 */
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startHttpServer } from '../../src/http/server.js';
import { openRawConnection } from '../support/raw-http.js';

let server: Server;
let port: number;

beforeAll(async () => {
  server = startHttpServer(
    {
      fetch: () => new Response('app', { status: 200 }),
      beforeApp: (req, res, toApp) => {
        if (req.url === '/not-mine') return toApp();
        res.writeHead(200, { 'content-length': 6 });
        res.end('router');
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
      log: { warn: () => undefined, debug: () => undefined } as never,
    },
    () => undefined,
  );
  await once(server, 'listening');
  port = (server.address() as AddressInfo).port;
});

afterAll(() => {
  server?.close();
});

async function answeredBy(head: string): Promise<string> {
  const connection = await openRawConnection(port);
  connection.write(`${head}Host: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}`);
  let message = await connection.readMessage();
  if (message.status === 100) message = await connection.readMessage();
  connection.close();
  return message.body.toString('utf8');
}

it('hands an ordinary request to the router, one with Expect: 100-continue to the app, and what the router passes on to the app', async () => {
  expect(await answeredBy('POST /sources HTTP/1.1\r\n')).toBe('router');
  expect(await answeredBy('POST /sources HTTP/1.1\r\nExpect: 100-continue\r\n')).toBe('app');
  expect(await answeredBy('POST /not-mine HTTP/1.1\r\n')).toBe('app');
});
