import { mkdtemp, rm, stat } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import net, { type AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createTcpDialer,
  startEgressGuard,
  type Dialer,
  type EgressGuard,
  type GuardSession,
} from '../../src/egress/guard.js';
import { classifyAddress } from '../../src/policy/address.js';
import { parseAllowHosts, type AllowList, type Resolver } from '../../src/policy/destination.js';
import { until } from '../support/until.js';

/*
 * Only loopback is ever connected to. Non-loopback destinations go through an injected resolver
 * and a recording dialer that either refuses outright or, to play a public host, connects to a
 * local origin server instead.
 */

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const fn of cleanup.splice(0).reverse()) await fn();
});

interface Origin {
  port: number;
  connections: number;
  requests: Array<{ method: string; url: string; headers: http.IncomingHttpHeaders; body: string }>;
}

/** A tiny http server on 127.0.0.1 that records what reaches it. */
async function startOrigin(handler?: (req: http.IncomingMessage, res: http.ServerResponse) => void): Promise<Origin> {
  const origin: Origin = { port: 0, connections: 0, requests: [] };
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      origin.requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      if (handler) return handler(req, res);
      res.setHeader('content-type', 'text/plain');
      res.end(`hello ${req.method} ${req.url} ${body}`);
    });
  });
  server.on('connection', () => origin.connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
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

interface RecordingDialer extends Dialer {
  calls: Array<{ address: string; port: number }>;
}

/**
 * Records every dial. Loopback addresses are really dialled; any other address either fails or,
 * when `pretend` maps it to a local port, is connected to that local origin instead.
 */
function recordingDialer(pretend: Record<string, number> = {}, fail: string[] = []): RecordingDialer {
  const real = createTcpDialer();
  const calls: Array<{ address: string; port: number }> = [];
  const dial = async (address: string, port: number, signal?: AbortSignal): Promise<Duplex> => {
    calls.push({ address, port });
    if (fail.includes(address)) throw new Error('connect ECONNREFUSED (fake)');
    const standIn = pretend[address];
    if (standIn !== undefined) return real('127.0.0.1', standIn, signal);
    if (classifyAddress(address).range !== 'loopback') throw new Error(`test dialer refuses ${address}`);
    return real(address, port, signal);
  };
  return Object.assign(dial, { calls });
}

function tableResolver(table: Record<string, string[][]>): Resolver & { asked: string[] } {
  const asked: string[] = [];
  const resolve = (name: string): Promise<string[]> => {
    asked.push(name);
    const next = table[name]?.shift();
    if (next === undefined) return Promise.reject(Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' }));
    return Promise.resolve(next);
  };
  return Object.assign(resolve, { asked });
}

const refuseLookups = (): Resolver & { asked: string[] } => tableResolver({});

interface Logged {
  warn: object[];
  info: object[];
}

async function startGuard(opts: {
  resolve: Resolver;
  dial: Dialer;
  allowHosts?: AllowList;
  idleTimeoutMs?: number;
  connectTimeoutMs?: number;
}): Promise<{ guard: EgressGuard; session: GuardSession; logged: Logged }> {
  const logged: Logged = { warn: [], info: [] };
  const guard = await startEgressGuard({
    resolve: opts.resolve,
    dial: opts.dial,
    allowHosts: opts.allowHosts ?? [],
    logger: { warn: (o) => logged.warn.push(o), info: (o) => logged.info.push(o) },
    connectTimeoutMs: opts.connectTimeoutMs ?? 2000,
    idleTimeoutMs: opts.idleTimeoutMs,
  });
  cleanup.push(() => guard.close());
  return { guard, session: guard.openSession('job-1'), logged };
}

function authOf(session: GuardSession): string {
  // The credentials do not depend on where the guard is reached.
  const u = new URL(session.proxyUrlAt('127.0.0.1:1'));
  return `Basic ${Buffer.from(`${u.username}:${u.password}`).toString('base64')}`;
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** An absolute-URI request through the guard, as yt-dlp sends for http:// URLs. */
function viaProxy(
  guardPort: number,
  target: string,
  opts: { auth?: string; method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.auth !== undefined) headers['proxy-authorization'] = opts.auth;
    const req = http.request({
      host: '127.0.0.1',
      port: guardPort,
      method: opts.method ?? 'GET',
      path: target,
      headers,
      agent: false,
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      res.on('close', () => {
        if (!res.complete) reject(new Error('response cut off'));
      });
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** CONNECT through the guard; on 200 the socket is the tunnel. */
function connectVia(
  guardPort: number,
  authority: string,
  auth?: string,
): Promise<{ status: number; socket: net.Socket; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1',
      port: guardPort,
      method: 'CONNECT',
      path: authority,
      headers: auth === undefined ? {} : { 'proxy-authorization': auth },
      agent: false,
    });
    req.on('connect', (res, socket) => {
      if (res.statusCode !== 200) socket.destroy();
      resolve({ status: res.statusCode ?? 0, socket, body: '' });
    });
    // Node reports a non-2xx CONNECT answer as a 'connect' too, but be safe with 'response'.
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, socket: res.socket, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** A plain HTTP/1.1 exchange over an open tunnel. */
function overTunnel(socket: net.Socket, host: string, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let data = '';
    socket.setEncoding('utf8');
    socket.on('data', (c: string) => (data += c));
    socket.on('end', () => resolve(data));
    socket.on('error', reject);
    socket.write(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  });
}

describe('egress guard: authentication', () => {
  it('answers 407 to requests without valid session credentials, and reaches nothing', async () => {
    const origin = await startOrigin();
    const resolve = refuseLookups();
    const dial = recordingDialer();
    const { guard, session } = await startGuard({
      resolve,
      dial,
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
    });
    const good = new URL(session.proxyUrlAt(guard.authority!));
    const basic = (s: string): string => `Basic ${Buffer.from(s).toString('base64')}`;
    const wrong = [
      undefined,
      '',
      basic(`${good.username}:not-the-token`),
      basic(`someone-else:${good.password}`),
      basic(`${good.username}:${good.password}x`),
      basic(`${good.username}`),
      `Bearer ${good.password}`,
      `Basic ${good.password}`,
    ];
    const target = `http://127.0.0.1:${origin.port}/secret`;
    for (const auth of wrong) {
      const answer = await viaProxy(guard.port!, target, auth === undefined ? {} : { auth });
      expect(answer.status, String(auth)).toBe(407);
      expect(answer.headers['proxy-authenticate']).toMatch(/^Basic /);
      const tunnel = await connectVia(guard.port!, `127.0.0.1:${origin.port}`, auth);
      expect(tunnel.status, String(auth)).toBe(407);
    }
    expect(dial.calls).toEqual([]);
    expect(resolve.asked).toEqual([]);
    expect(origin.connections).toBe(0);

    // The real credentials work, and stop working once the session is closed.
    expect((await viaProxy(guard.port!, target, { auth: authOf(session) })).status).toBe(200);
    session.close();
    expect((await viaProxy(guard.port!, target, { auth: authOf(session) })).status).toBe(407);
    expect(origin.requests).toHaveLength(1);
  });

  it('issues distinct credentials per session, shaped as a proxy URL on loopback', async () => {
    const { guard, session } = await startGuard({ resolve: refuseLookups(), dial: recordingDialer() });
    const other = guard.openSession('job-2');
    const a = new URL(session.proxyUrlAt(guard.authority!));
    const b = new URL(other.proxyUrlAt(guard.authority!));
    expect(a.protocol).toBe('http:');
    expect(a.hostname).toBe('127.0.0.1');
    expect(Number(a.port)).toBe(guard.port!);
    expect(a.username).toBe('job-1');
    expect(b.username).toBe('job-2');
    expect(a.password.length).toBeGreaterThanOrEqual(32);
    expect(a.password).not.toBe(b.password);
    expect(() => guard.openSession('bad label@x')).toThrow();
  });

  it('listens on a Unix socket only its own user may use, with no TCP port', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'guard-'));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const socketPath = path.join(dir, 'guard.sock');
    const guard = await startEgressGuard({
      resolve: refuseLookups(),
      dial: recordingDialer(),
      allowHosts: [],
      socketPath,
    });
    cleanup.push(() => guard.close());
    expect(guard.port).toBeNull();
    expect(guard.authority).toBeNull();
    expect(guard.socketPath).toBe(socketPath);
    expect((await stat(socketPath)).mode & 0o777).toBe(0o600);
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(socketPath, () =>
        socket.write('GET http://x.example/ HTTP/1.1\r\nHost: x.example\r\n\r\n'),
      );
      socket.once('data', (chunk) => {
        resolve(chunk.toString('latin1').split('\r\n')[0]!);
        socket.destroy();
      });
      socket.on('error', reject);
    });
    expect(answer).toBe('HTTP/1.1 407 Proxy Authentication Required');
  });

  it('refuses to listen anywhere but loopback', async () => {
    await expect(
      startEgressGuard({ resolve: refuseLookups(), dial: recordingDialer(), allowHosts: [], host: '0.0.0.0' }),
    ).rejects.toThrow(/loopback/);
  });
});

describe('egress guard: refused destinations', () => {
  it.each([
    ['metadata.example', '169.254.169.254', 'link_local'],
    ['internal.example', '10.0.0.1', 'private'],
    ['mixed.example', '93.184.216.34,fd00::1', 'unique_local'],
    ['mapped.example', '::ffff:127.0.0.1', 'loopback'],
  ])('refuses %s (→ %s) with 403, records it, and never dials', async (name, addresses, range) => {
    const resolve = tableResolver({ [name]: [addresses.split(','), addresses.split(',')] });
    const dial = recordingDialer();
    const { guard, session, logged } = await startGuard({ resolve, dial });

    const answer = await viaProxy(guard.port!, `http://${name}/latest/meta-data/`, { auth: authOf(session) });
    expect(answer.status).toBe(403);
    expect(answer.body).toContain(name);
    const tunnel = await connectVia(guard.port!, `${name}:443`, authOf(session));
    expect(tunnel.status).toBe(403);

    expect(dial.calls).toEqual([]);
    expect(session.refusals()).toEqual([
      { host: name, port: 80, code: 'destination_refused', message: expect.stringContaining(range) },
      { host: name, port: 443, code: 'destination_refused', message: expect.stringContaining(name) },
    ]);
    expect(logged.warn).toHaveLength(2);
    expect(logged.warn[0]).toMatchObject({ job_id: 'job-1', host: name, reason: `address_${range}` });
  });

  it.each([
    ['http://169.254.169.254/latest/meta-data/', 'link_local'],
    ['http://[::ffff:a9fe:a9fe]/', 'link_local'],
    ['http://0x7f.1:8080/', 'loopback'],
    ['http://localhost:8080/', 'localhost'],
    ['http://[fd00:ec2::254]/', 'unique_local'],
  ])('refuses the literal %s without a lookup', async (target, reason) => {
    const resolve = refuseLookups();
    const dial = recordingDialer();
    const { guard, session } = await startGuard({ resolve, dial });
    expect((await viaProxy(guard.port!, target, { auth: authOf(session) })).status).toBe(403);
    expect(session.refusals()[0]?.message).toContain(reason);
    expect(resolve.asked).toEqual([]);
    expect(dial.calls).toEqual([]);
  });

  it('refuses a loopback server that is not allow-listed on that port: it sees no connection', async () => {
    const allowed = await startOrigin();
    const other = await startOrigin();
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial: recordingDialer(),
      allowHosts: parseAllowHosts([`127.0.0.1:${allowed.port}`]),
    });
    const auth = authOf(session);
    expect((await viaProxy(guard.port!, `http://127.0.0.1:${other.port}/`, { auth })).status).toBe(403);
    expect((await connectVia(guard.port!, `127.0.0.1:${other.port}`, auth)).status).toBe(403);
    expect((await viaProxy(guard.port!, `http://[::1]:${allowed.port}/`, { auth })).status).toBe(403);
    expect(other.connections).toBe(0);
    expect(allowed.connections).toBe(0);
    expect(session.refusals().map((r) => r.port)).toEqual([other.port, other.port, allowed.port]);
  });
});

describe('egress guard: forwarding', () => {
  it('forwards an absolute-URI request to an allow-listed loopback origin, streaming both bodies', async () => {
    const origin = await startOrigin((req, res) => {
      res.writeHead(201, { 'x-origin': 'yes', 'keep-alive': 'timeout=77', connection: 'x-hop-out', 'x-hop-out': '1' });
      res.end('created');
    });
    const dial = recordingDialer();
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial,
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
    });
    const answer = await viaProxy(guard.port!, `http://127.0.0.1:${origin.port}/upload?b=2&a=1`, {
      auth: authOf(session),
      method: 'POST',
      headers: {
        host: 'spoofed.example',
        'content-type': 'text/plain',
        'proxy-connection': 'keep-alive',
        connection: 'x-hop-in',
        'x-hop-in': 'secret',
        'x-end-to-end': 'kept',
      },
      body: 'x'.repeat(100_000),
    });
    expect(answer.status).toBe(201);
    expect(answer.body).toBe('created');
    expect(answer.headers['x-origin']).toBe('yes');
    expect(answer.headers['x-hop-out']).toBeUndefined();
    expect(answer.headers['keep-alive']).not.toBe('timeout=77');

    const seen = origin.requests[0]!;
    expect(seen.method).toBe('POST');
    expect(seen.url).toBe('/upload?b=2&a=1');
    expect(seen.body).toHaveLength(100_000);
    expect(seen.headers.host).toBe(`127.0.0.1:${origin.port}`);
    expect(seen.headers['x-end-to-end']).toBe('kept');
    expect(seen.headers['proxy-authorization']).toBeUndefined();
    expect(seen.headers['proxy-connection']).toBeUndefined();
    expect(seen.headers['x-hop-in']).toBeUndefined();
    expect(dial.calls).toEqual([{ address: '127.0.0.1', port: origin.port }]);
    expect(session.refusals()).toEqual([]);
  });

  it('tunnels CONNECT to an allow-listed loopback origin', async () => {
    const origin = await startOrigin();
    const dial = recordingDialer();
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial,
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
    });
    const tunnel = await connectVia(guard.port!, `127.0.0.1:${origin.port}`, authOf(session));
    expect(tunnel.status).toBe(200);
    const raw = await overTunnel(tunnel.socket, `127.0.0.1:${origin.port}`, '/through-tunnel');
    expect(raw).toMatch(/^HTTP\/1\.1 200 OK/);
    expect(raw).toContain('hello GET /through-tunnel');
    expect(dial.calls).toEqual([{ address: '127.0.0.1', port: origin.port }]);
  });

  it('passes redirects back instead of following them, so each hop is checked', async () => {
    const origin = await startOrigin((_req, res) => {
      res.writeHead(302, { location: 'http://169.254.169.254/latest/meta-data/' });
      res.end();
    });
    const dial = recordingDialer();
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial,
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
    });
    const auth = authOf(session);
    const first = await viaProxy(guard.port!, `http://127.0.0.1:${origin.port}/go`, { auth });
    expect(first.status).toBe(302);
    expect(first.headers.location).toBe('http://169.254.169.254/latest/meta-data/');
    // The client's next hop comes back through the guard and is refused there.
    expect((await viaProxy(guard.port!, first.headers.location!, { auth })).status).toBe(403);
    expect(dial.calls).toEqual([{ address: '127.0.0.1', port: origin.port }]);
    expect(origin.requests).toHaveLength(1);
  });

  it.each([
    ['ftp://127.0.0.1:2121/a.mp3', /ftp: URL/],
    ['FTP://internal.example/a.mp3', /ftp: URL/],
    ['file:///etc/passwd', /file: URL/],
    ['http://127.0.0.1/x.m3u8#__youtubedl_smuggle=%7B%7D', /smuggled/],
    ['/x.m3u8#__YOUTUBEDL_SMUGGLE={}', /smuggled/],
    ['/x.m3u8#%5F%5Fyoutubedl%5Fsmuggle={}', /smuggled/],
  ])(
    'refuses a redirect to %s with 403, records the refusal, and passes nothing of the answer on',
    async (location, reason) => {
      const origin = await startOrigin((_req, res) => {
        res.writeHead(302, { location, 'x-origin-banner': 'internal' });
        res.end('redirect body');
      });
      const { guard, session } = await startGuard({
        resolve: refuseLookups(),
        dial: recordingDialer(),
        allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
      });
      const answer = await viaProxy(guard.port!, `http://127.0.0.1:${origin.port}/go`, { auth: authOf(session) });
      expect(answer.status).toBe(403);
      expect(answer.headers.location).toBeUndefined();
      expect(answer.headers['x-origin-banner']).toBeUndefined();
      expect(answer.body).toMatch(reason);
      expect(session.refusals()).toEqual([
        { host: '127.0.0.1', port: origin.port, code: 'destination_refused', message: expect.stringMatching(reason) },
      ]);
    },
  );

  it('passes an ordinary http(s) redirect, relative or absolute, untouched', async () => {
    for (const location of ['/next.mp3', 'https://cdn.example/a.mp3?x=1#t=3']) {
      const origin = await startOrigin((_req, res) => {
        res.writeHead(302, { location });
        res.end();
      });
      const { guard, session } = await startGuard({
        resolve: refuseLookups(),
        dial: recordingDialer(),
        allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
      });
      const answer = await viaProxy(guard.port!, `http://127.0.0.1:${origin.port}/go`, { auth: authOf(session) });
      expect(answer.status).toBe(302);
      expect(answer.headers.location).toBe(location);
      expect(session.refusals()).toEqual([]);
    }
  });

  it('remembers the hosts a session has connected to, by name, and not those it refused', async () => {
    const origin = await startOrigin();
    const resolve = tableResolver({ 'media.example': [['93.184.216.34']], 'cdn.example': [['93.184.216.35']] });
    const dial = recordingDialer({ '93.184.216.34': origin.port, '93.184.216.35': origin.port });
    const { guard, session } = await startGuard({ resolve, dial });
    const auth = authOf(session);
    expect((await viaProxy(guard.port!, 'http://Media.Example./a', { auth })).status).toBe(200);
    expect((await connectVia(guard.port!, 'cdn.example:443', auth)).status).toBe(200);
    expect((await viaProxy(guard.port!, 'http://169.254.169.254/', { auth })).status).toBe(403);
    expect(session.hostsContacted()).toEqual(['media.example', 'cdn.example']);
  });

  it('resolves once and dials the checked address, not the name (DNS rebinding)', async () => {
    const origin = await startOrigin();
    // First answer public, then the metadata address: a rebinding attack.
    const resolve = tableResolver({ 'media.example': [['93.184.216.34'], ['169.254.169.254']] });
    const dial = recordingDialer({ '93.184.216.34': origin.port });
    const { guard, session } = await startGuard({ resolve, dial });
    const auth = authOf(session);

    const first = await viaProxy(guard.port!, 'http://media.example/audio.m4a', { auth });
    expect(first.status).toBe(200);
    expect(resolve.asked).toEqual(['media.example']);
    expect(dial.calls).toEqual([{ address: '93.184.216.34', port: 80 }]);
    expect(origin.requests[0]?.headers.host).toBe('media.example');

    const second = await viaProxy(guard.port!, 'http://media.example/audio.m4a', { auth });
    expect(second.status).toBe(403);
    expect(resolve.asked).toEqual(['media.example', 'media.example']);
    expect(dial.calls).toHaveLength(1);
    expect(session.refusals()).toHaveLength(1);
  });

  it('tunnels to the checked address of a name too', async () => {
    const origin = await startOrigin();
    const resolve = tableResolver({ 'cdn.example': [['2606:4700::1111', '93.184.216.34']] });
    const dial = recordingDialer({ '2606:4700::1111': origin.port });
    const { guard, session } = await startGuard({ resolve, dial });
    const tunnel = await connectVia(guard.port!, 'cdn.example:443', authOf(session));
    expect(tunnel.status).toBe(200);
    expect(await overTunnel(tunnel.socket, 'cdn.example', '/seg1.ts')).toContain('hello GET /seg1.ts');
    expect(dial.calls).toEqual([{ address: '2606:4700::1111', port: 443 }]);
    expect(resolve.asked).toEqual(['cdn.example']);
  });

  it('falls back only to other checked addresses when a dial fails, then answers 502', async () => {
    const origin = await startOrigin();
    const resolve = tableResolver({
      'dual.example': [['2606:4700::1111', '93.184.216.34']],
      'down.example': [['8.8.8.8']],
    });
    const dial = recordingDialer({ '93.184.216.34': origin.port }, ['2606:4700::1111', '8.8.8.8']);
    const { guard, session } = await startGuard({ resolve, dial });
    const auth = authOf(session);
    expect((await viaProxy(guard.port!, 'http://dual.example/', { auth })).status).toBe(200);
    expect(dial.calls).toEqual([
      { address: '2606:4700::1111', port: 80 },
      { address: '93.184.216.34', port: 80 },
    ]);
    expect((await viaProxy(guard.port!, 'http://down.example/', { auth })).status).toBe(502);
    expect((await connectVia(guard.port!, 'down.example:443', auth)).status).toBe(502);
    expect(session.refusals()).toEqual([]);
  });

  it.each(['ftp://127.0.0.1:2121/seg0.ts', 'file:///etc/passwd'])(
    'refuses a request for %s (a current yt-dlp sends ftp: segments to its proxy) with 403, records the refusal, and dials nothing',
    async (url) => {
      const dial = recordingDialer();
      const { guard, session } = await startGuard({
        resolve: refuseLookups(),
        dial,
        allowHosts: parseAllowHosts(['127.0.0.1:2121']),
      });
      const answer = await viaProxy(guard.port!, url, { auth: authOf(session) });
      expect(answer.status).toBe(403);
      expect(dial.calls).toEqual([]);
      expect(session.refusals()).toEqual([
        expect.objectContaining({
          code: 'destination_refused',
          message: expect.stringMatching(/asked for a (ftp|file): URL; only http and https are fetched/),
        }),
      ]);
      // Control: an http: request to the same allowed address is dialled.
      await viaProxy(guard.port!, 'http://127.0.0.1:2121/seg0.ts', { auth: authOf(session) });
      expect(dial.calls).toEqual([{ address: '127.0.0.1', port: 2121 }]);
    },
  );

  it('answers 502 for an unresolvable host and 400 for what it cannot proxy', async () => {
    const dial = recordingDialer();
    const { guard, session } = await startGuard({ resolve: refuseLookups(), dial });
    const auth = authOf(session);
    expect((await viaProxy(guard.port!, 'http://nowhere.example/', { auth })).status).toBe(502);
    expect((await viaProxy(guard.port!, '/origin-form', { auth })).status).toBe(400);
    expect((await viaProxy(guard.port!, 'https://media.example/', { auth })).status).toBe(400);
    expect((await connectVia(guard.port!, 'media.example', auth)).status).toBe(400);
    expect((await viaProxy(guard.port!, 'http://bad_host!.example/', { auth })).status).toBe(400);
    expect(dial.calls).toEqual([]);
    expect(session.refusals()).toEqual([]);
  });
});

describe('egress guard: teardown', () => {
  it('cuts the client off when the upstream dies mid-body', async () => {
    const origin = await startOrigin((_req, res) => {
      res.writeHead(200, { 'content-length': '1000' });
      res.write('partial');
      setTimeout(() => res.socket?.destroy(), 20);
    });
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial: recordingDialer(),
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
    });
    await expect(
      viaProxy(guard.port!, `http://127.0.0.1:${origin.port}/`, { auth: authOf(session) }),
    ).rejects.toThrow();
  });

  it('closes a tunnel that stays idle', async () => {
    const origin = await startOrigin();
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial: recordingDialer(),
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
      idleTimeoutMs: 100,
    });
    const tunnel = await connectVia(guard.port!, `127.0.0.1:${origin.port}`, authOf(session));
    expect(tunnel.status).toBe(200);
    await new Promise<void>((resolve) => tunnel.socket.once('close', () => resolve()));
  });

  it('closing a session destroys its open tunnels', async () => {
    const origin = await startOrigin();
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial: recordingDialer(),
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
    });
    const tunnel = await connectVia(guard.port!, `127.0.0.1:${origin.port}`, authOf(session));
    expect(tunnel.status).toBe(200);
    const closed = new Promise<void>((resolve) => tunnel.socket.once('close', () => resolve()));
    session.close();
    await closed;
    expect(tunnel.socket.destroyed).toBe(true);
  });

  it('closing the guard destroys open tunnels and stops listening', async () => {
    const origin = await startOrigin();
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial: recordingDialer(),
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
    });
    const tunnel = await connectVia(guard.port!, `127.0.0.1:${origin.port}`, authOf(session));
    const closed = new Promise<void>((resolve) => tunnel.socket.once('close', () => resolve()));
    await guard.close();
    await closed;
    await expect(
      viaProxy(guard.port!, `http://127.0.0.1:${origin.port}/`, { auth: authOf(session) }),
    ).rejects.toThrow();
  });
});

/** A loopback port nothing listens on (it was free a moment ago). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A TCP server on loopback that accepts and reads, and never sends a byte; `received` resolves at the first byte in. */
async function startSilentOrigin(): Promise<{ port: number; received: Promise<void> }> {
  const sockets = new Set<net.Socket>();
  let gotBytes!: () => void;
  const received = new Promise<void>((resolve) => (gotBytes = resolve));
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.once('data', () => gotBytes());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanup.push(
    () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  );
  return { port: (server.address() as AddressInfo).port, received };
}

const failed = (host: string, port: number, code: string) => ({ host, port, code, message: expect.any(String) });

describe('egress guard: a session byte limit (SessionOptions.maxBytes)', () => {
  const BODY = 'y'.repeat(64 * 1024);

  it('past maxBytes a plain request is cut and no new connection is made; under it, and without a limit, it is whole', async () => {
    const origin = await startOrigin((_req, res) => res.end(BODY));
    const dial = recordingDialer();
    const { guard } = await startGuard({
      resolve: refuseLookups(),
      dial,
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
    });
    const url = `http://127.0.0.1:${origin.port}/feed`;
    const limited = guard.openSession('job-limited', { maxBytes: 16 * 1024 });
    await expect(viaProxy(guard.port!, url, { auth: authOf(limited) })).rejects.toThrow();
    expect(limited.overByteLimit()).toBe(true);
    const dials = dial.calls.length;
    const again = await viaProxy(guard.port!, url, { auth: authOf(limited) });
    expect(again.status).toBe(502);
    expect(dial.calls).toHaveLength(dials);

    const roomy = guard.openSession('job-roomy', { maxBytes: 128 * 1024 });
    expect((await viaProxy(guard.port!, url, { auth: authOf(roomy) })).body).toBe(BODY);
    expect(roomy.overByteLimit()).toBe(false);
    const unlimited = guard.openSession('job-unlimited');
    expect((await viaProxy(guard.port!, url, { auth: authOf(unlimited) })).body).toBe(BODY);
    expect(unlimited.overByteLimit()).toBe(false);
  });

  it('counts what a CONNECT tunnel brings back: past maxBytes the tunnel is cut', async () => {
    const origin = await startOrigin((_req, res) => res.end(BODY));
    const { guard } = await startGuard({
      resolve: refuseLookups(),
      dial: recordingDialer(),
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
    });
    const limited = guard.openSession('job-limited', { maxBytes: 16 * 1024 });
    const tunnel = await connectVia(guard.port!, `127.0.0.1:${origin.port}`, authOf(limited));
    expect(tunnel.status).toBe(200);
    const raw = await overTunnel(tunnel.socket, `127.0.0.1:${origin.port}`, '/feed').catch(() => '');
    expect(raw.length).toBeLessThan(BODY.length);
    expect(limited.overByteLimit()).toBe(true);

    const roomy = guard.openSession('job-roomy', { maxBytes: 128 * 1024 });
    const whole = await connectVia(guard.port!, `127.0.0.1:${origin.port}`, authOf(roomy));
    expect(await overTunnel(whole.socket, `127.0.0.1:${origin.port}`, '/feed')).toContain(BODY);
    expect(roomy.overByteLimit()).toBe(false);
  });
});

describe('egress guard: upstream failures, recorded per session with their cause', () => {
  it('a closed port: connection_refused, for a plain request and a CONNECT alike', async () => {
    const port = await closedPort();
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial: recordingDialer(),
      allowHosts: parseAllowHosts([`127.0.0.1:${port}`]),
    });
    const auth = authOf(session);
    expect((await viaProxy(guard.port!, `http://127.0.0.1:${port}/a.mp3`, { auth })).status).toBe(502);
    expect((await connectVia(guard.port!, `127.0.0.1:${port}`, auth)).status).toBe(502);
    expect(session.upstreamFailures()).toEqual([
      failed('127.0.0.1', port, 'connection_refused'),
      failed('127.0.0.1', port, 'connection_refused'),
    ]);
    expect(session.refusals()).toEqual([]);
  });

  it('a name that does not exist, and one the name servers did not answer: host_not_found, host_lookup_failed', async () => {
    const failing = (code: string) => Object.assign(new Error(code), { code });
    const resolve: Resolver = (name) =>
      Promise.reject(
        failing(name.startsWith('gone') ? 'ENOTFOUND' : name.startsWith('empty') ? 'ENODATA' : 'ETIMEOUT'),
      );
    const { guard, session } = await startGuard({ resolve, dial: recordingDialer() });
    const auth = authOf(session);
    expect((await viaProxy(guard.port!, 'http://gone.example/a.mp3', { auth })).status).toBe(502);
    expect((await connectVia(guard.port!, 'empty.example:443', auth)).status).toBe(502);
    expect((await viaProxy(guard.port!, 'http://silent.example/a.mp3', { auth })).status).toBe(502);
    expect(session.upstreamFailures()).toEqual([
      failed('gone.example', 80, 'host_not_found'),
      failed('empty.example', 443, 'host_not_found'),
      failed('silent.example', 80, 'host_lookup_failed'),
    ]);
  });

  it('a connection not accepted in time: connect_timeout; another failed dial: network_error', async () => {
    const resolve = tableResolver({ 'slow.example': [['93.184.216.34']], 'odd.example': [['8.8.8.8']] });
    // Plays a host whose SYNs go unanswered: the dial ends only when its signal aborts.
    const dial: Dialer = (address, _port, signal) =>
      address === '8.8.8.8'
        ? Promise.reject(new Error('the upstream proxy answered 502 to CONNECT'))
        : new Promise((_resolve, reject) =>
            signal?.addEventListener('abort', () => reject(new Error('connect aborted'))),
          );
    const { guard, session } = await startGuard({ resolve, dial, connectTimeoutMs: 50 });
    const auth = authOf(session);
    expect((await viaProxy(guard.port!, 'http://slow.example/a.mp3', { auth })).status).toBe(502);
    expect((await viaProxy(guard.port!, 'http://odd.example/a.mp3', { auth })).status).toBe(502);
    expect(session.upstreamFailures()).toEqual([
      failed('slow.example', 80, 'connect_timeout'),
      failed('odd.example', 80, 'network_error'),
    ]);
  });

  it('an origin that takes the request and never answers: no_answer, once the client gives up', async () => {
    const origin = await startSilentOrigin();
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial: recordingDialer(),
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
    });
    const controller = new AbortController();
    const asked = fetchVia(guard.port!, `http://127.0.0.1:${origin.port}/a.mp3`, authOf(session), controller.signal);
    await origin.received;
    // Still waiting: nothing recorded yet.
    expect(session.upstreamFailures()).toEqual([]);
    controller.abort();
    await expect(asked).rejects.toThrow();
    const recorded = await until('the failure recorded', () =>
      session.upstreamFailures().length > 0 ? session.upstreamFailures() : undefined,
    );
    expect(recorded).toEqual([failed('127.0.0.1', origin.port, 'no_answer')]);
  });

  it('a tunnel whose origin never answers: no_answer when the session closes; a tunnel nobody spoke in: nothing', async () => {
    const origin = await startSilentOrigin();
    const quiet = await startSilentOrigin();
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial: recordingDialer(),
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`, `127.0.0.1:${quiet.port}`]),
    });
    const auth = authOf(session);
    const spoken = await connectVia(guard.port!, `127.0.0.1:${origin.port}`, auth);
    const unspoken = await connectVia(guard.port!, `127.0.0.1:${quiet.port}`, auth);
    expect([spoken.status, unspoken.status]).toEqual([200, 200]);
    spoken.socket.write('\x16\x03\x01 a ClientHello');
    await origin.received;
    session.close();
    expect(session.upstreamFailures()).toEqual([failed('127.0.0.1', origin.port, 'no_answer')]);
  });

  it('the control: answered requests and tunnels record nothing', async () => {
    const origin = await startOrigin();
    const { guard, session } = await startGuard({
      resolve: refuseLookups(),
      dial: recordingDialer(),
      allowHosts: parseAllowHosts([`127.0.0.1:${origin.port}`]),
    });
    const auth = authOf(session);
    expect((await viaProxy(guard.port!, `http://127.0.0.1:${origin.port}/a`, { auth })).status).toBe(200);
    const tunnel = await connectVia(guard.port!, `127.0.0.1:${origin.port}`, auth);
    expect(await overTunnel(tunnel.socket, '127.0.0.1', '/b')).toContain('hello GET /b');
    session.close();
    expect(session.upstreamFailures()).toEqual([]);
  });
});

/** A plain request through the guard that `signal` can abandon mid-way. */
function fetchVia(guardPort: number, target: string, auth: string, signal: AbortSignal): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1',
      port: guardPort,
      path: target,
      headers: { 'proxy-authorization': auth },
      agent: false,
      signal,
    });
    req.on('response', (res) => resolve(res.statusCode ?? 0));
    req.on('error', reject);
    req.end();
  });
}
