import http from 'node:http';
import type net from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { startEgressGuard, type EgressGuard, type GuardSession } from '../../src/egress/guard.js';
import { createUpstreamProxyDialer, parseUpstreamProxy, type UpstreamProxy } from '../../src/egress/upstream-proxy.js';
import { parseAllowHosts, type Resolver } from '../../src/policy/destination.js';
import { startRecordingProxy, type RecordingProxy } from '../support/recording-proxy.js';

/*
 * The egress guard through an operator's upstream proxy: a loopback proxy that records every
 * CONNECT it is asked for (and its credentials) and tunnels to loopback addresses only. Names
 * resolve through a table, so "media.test" plays a public host served on 127.0.0.1.
 */

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

const PROXY_USER = 'fetcher';
const PROXY_PASSWORD = 'upstream-pass-7f3a';

async function recordingProxy(password = PROXY_PASSWORD): Promise<RecordingProxy> {
  const proxy = await startRecordingProxy({ user: PROXY_USER, password });
  cleanup.push(() => proxy.close());
  return proxy;
}

interface Origin {
  port: number;
  requests: Array<{ url: string; host: string | undefined }>;
}

async function startOrigin(
  host = '127.0.0.1',
  handler?: (req: http.IncomingMessage, res: http.ServerResponse) => void,
): Promise<Origin> {
  const origin: Origin = { port: 0, requests: [] };
  const server = http.createServer((req, res) => {
    origin.requests.push({ url: req.url ?? '', host: req.headers.host });
    if (handler) return handler(req, res);
    res.setHeader('content-type', 'text/plain');
    res.end(`hello from ${req.url}`);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  origin.port = (server.address() as AddressInfo).port;
  cleanup.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return origin;
}

const table =
  (entries: Record<string, string[]>): Resolver =>
  (name) => {
    const found = entries[name];
    if (!found) return Promise.reject(Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' }));
    return Promise.resolve(found);
  };

function proxyConfig(port: number, password = PROXY_PASSWORD): UpstreamProxy {
  const parsed = parseUpstreamProxy(`http://${PROXY_USER}:${encodeURIComponent(password)}@127.0.0.1:${port}`);
  if (typeof parsed === 'string') throw new Error(parsed);
  return parsed;
}

async function guardThrough(upstream: UpstreamProxy, resolve: Resolver, allow: string[]) {
  const logged: object[] = [];
  const record = (o: object) => logged.push(o);
  const guard: EgressGuard = await startEgressGuard({
    resolve,
    dial: createUpstreamProxyDialer(upstream),
    allowHosts: parseAllowHosts(allow),
    logger: { warn: record, info: record },
    connectTimeoutMs: 2000,
  });
  cleanup.push(() => guard.close());
  const session: GuardSession = guard.openSession('job-1');
  const url = new URL(session.proxyUrlAt(guard.authority!));
  const auth = `Basic ${Buffer.from(`${url.username}:${url.password}`).toString('base64')}`;
  return { guard, session, auth, logged };
}

/** An absolute-URI GET through the guard. */
function getVia(guard: EgressGuard, auth: string, target: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1',
      port: guard.port!,
      path: target,
      headers: { 'proxy-authorization': auth },
      agent: false,
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** CONNECT through the guard, then one plain HTTP exchange in the tunnel when it opens. */
function connectVia(
  guard: EgressGuard,
  auth: string,
  authority: string,
  host: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1',
      port: guard.port!,
      method: 'CONNECT',
      path: authority,
      headers: { 'proxy-authorization': auth },
      agent: false,
    });
    req.on('connect', (res, socket: net.Socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        resolve({ status: res.statusCode ?? 0, body: '' });
        return;
      }
      let data = '';
      socket.setEncoding('utf8');
      socket.on('data', (c: string) => (data += c));
      socket.on('end', () => resolve({ status: 200, body: data }));
      socket.write(`GET /in-tunnel HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    });
    req.on('error', reject);
    req.end();
  });
}

const basicProxyAuth = `Basic ${Buffer.from(`${PROXY_USER}:${PROXY_PASSWORD}`).toString('base64')}`;

describe('egress guard through an upstream proxy', () => {
  it('checks the name, then asks the upstream for a tunnel to the checked address, never the name', async () => {
    const origin = await startOrigin();
    const upstream = await recordingProxy();
    const { guard, auth, session } = await guardThrough(
      proxyConfig(upstream.port),
      table({ 'media.test': ['127.0.0.1'] }),
      [`media.test:${origin.port}`],
    );

    const tunneled = await connectVia(guard, auth, `media.test:${origin.port}`, `media.test:${origin.port}`);
    expect(tunneled.status).toBe(200);
    expect(tunneled.body).toContain('hello from /in-tunnel');
    expect(upstream.asked).toEqual([{ target: `127.0.0.1:${origin.port}`, authorization: basicProxyAuth }]);
    expect(session.hostsContacted()).toEqual(['media.test']);
  });

  it('forwards plain http through such a tunnel too: the origin gets its own Host header', async () => {
    const origin = await startOrigin();
    const upstream = await recordingProxy();
    const { guard, auth } = await guardThrough(proxyConfig(upstream.port), table({ 'media.test': ['127.0.0.1'] }), [
      `media.test:${origin.port}`,
    ]);

    const answer = await getVia(guard, auth, `http://media.test:${origin.port}/a.wav?x=1`);
    expect(answer).toEqual({ status: 200, body: 'hello from /a.wav?x=1' });
    expect(upstream.asked.map((asked) => asked.target)).toEqual([`127.0.0.1:${origin.port}`]);
    expect(origin.requests).toEqual([{ url: '/a.wav?x=1', host: `media.test:${origin.port}` }]);
  });

  it('names an IPv6 address in brackets', async () => {
    const origin = await startOrigin('::1');
    const upstream = await recordingProxy();
    const { guard, auth } = await guardThrough(proxyConfig(upstream.port), table({ 'v6.test': ['::1'] }), [
      `v6.test:${origin.port}`,
    ]);
    expect((await getVia(guard, auth, `http://v6.test:${origin.port}/six`)).status).toBe(200);
    expect(upstream.asked.map((asked) => asked.target)).toEqual([`[::1]:${origin.port}`]);
  });

  it('refused destinations never reach the upstream; an allowed one right after does (the control)', async () => {
    const origin = await startOrigin();
    const upstream = await recordingProxy();
    const { guard, auth, session } = await guardThrough(
      proxyConfig(upstream.port),
      table({
        'media.test': ['127.0.0.1'],
        'intranet.test': ['10.1.2.3'],
        'mixed.test': ['93.184.216.34', '192.168.0.10'],
      }),
      [`media.test:${origin.port}`],
    );
    const refused = [
      await getVia(guard, auth, 'http://intranet.test/'),
      await getVia(guard, auth, 'http://mixed.test/'),
      await getVia(guard, auth, 'http://169.254.169.254/latest/meta-data/'),
      await getVia(guard, auth, `http://127.0.0.1:${origin.port}/`),
      await connectVia(guard, auth, 'intranet.test:443', 'intranet.test'),
    ];
    expect(refused.map((answer) => answer.status)).toEqual([403, 403, 403, 403, 403]);
    expect(session.refusals().map((refusal) => refusal.host)).toEqual([
      'intranet.test',
      'mixed.test',
      '169.254.169.254',
      '127.0.0.1',
      'intranet.test',
    ]);
    expect(upstream.asked).toEqual([]);

    expect((await getVia(guard, auth, `http://media.test:${origin.port}/ok`)).status).toBe(200);
    expect(upstream.asked.map((asked) => asked.target)).toEqual([`127.0.0.1:${origin.port}`]);
  });

  it('still refuses a plain-HTTP redirect to another scheme', async () => {
    const origin = await startOrigin('127.0.0.1', (_req, res) =>
      res.writeHead(302, { location: 'ftp://media.test/file' }).end(),
    );
    const upstream = await recordingProxy();
    const { guard, auth, session } = await guardThrough(
      proxyConfig(upstream.port),
      table({ 'media.test': ['127.0.0.1'] }),
      [`media.test:${origin.port}`],
    );
    const answer = await getVia(guard, auth, `http://media.test:${origin.port}/moved`);
    expect(answer.status).toBe(403);
    expect(answer.body).toMatch(/ftp: URL/);
    expect(session.refusals()).toHaveLength(1);
  });

  it('an upstream that refuses the credentials makes a 502; nothing logged carries them', async () => {
    const origin = await startOrigin();
    const upstream = await recordingProxy('another-password');
    const { guard, auth, logged } = await guardThrough(
      proxyConfig(upstream.port),
      table({ 'media.test': ['127.0.0.1'] }),
      [`media.test:${origin.port}`],
    );
    const answer = await getVia(guard, auth, `http://media.test:${origin.port}/x`);
    expect(answer.status).toBe(502);
    expect(answer.body).not.toContain(PROXY_PASSWORD);
    expect(upstream.asked).toHaveLength(1);
    expect(origin.requests).toEqual([]);
    const text = JSON.stringify(logged);
    expect(text).toContain('answered 407');
    expect(text).not.toContain(PROXY_PASSWORD);
    expect(text).not.toContain(basicProxyAuth.slice('Basic '.length));
  });

  it('an upstream that cannot be reached makes a 502 that names no credentials', async () => {
    const origin = await startOrigin();
    const upstream = await recordingProxy();
    const closedPort = upstream.port;
    await cleanup.pop()!(); // the proxy is gone
    const { guard, auth, logged } = await guardThrough(
      proxyConfig(closedPort),
      table({ 'media.test': ['127.0.0.1'] }),
      [`media.test:${origin.port}`],
    );
    expect((await getVia(guard, auth, `http://media.test:${origin.port}/x`)).status).toBe(502);
    expect(JSON.stringify(logged)).toContain('ECONNREFUSED');
    expect(JSON.stringify(logged)).not.toContain(PROXY_PASSWORD);
  });
});

describe('EGRESS_UPSTREAM_PROXY values', () => {
  it.each([
    ['http://proxy.internal:3128', { host: 'proxy.internal', port: 3128, authorization: null }],
    ['http://proxy.internal', { host: 'proxy.internal', port: 80, authorization: null }],
    [
      'http://u%3Ax:p%40ss@10.0.0.5:8080/',
      { host: '10.0.0.5', port: 8080, authorization: `Basic ${Buffer.from('u:x:p@ss').toString('base64')}` },
    ],
  ])('%s', (value, expected) => {
    expect(parseUpstreamProxy(value)).toMatchObject(expected);
  });

  it.each([
    'proxy:3128',
    'https://proxy:3128',
    'socks5://proxy:1080',
    'http://proxy:3128/path',
    'http://proxy:3128/?q=1',
    'http://u:%zz@proxy:3128',
  ])('refuses %s without repeating it', (value) => {
    const outcome = parseUpstreamProxy(value);
    expect(typeof outcome).toBe('string');
    expect(outcome).not.toContain('proxy:');
    expect(outcome).not.toContain('%zz');
  });
});
