import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import https from 'node:https';
import net, { type AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Dialer } from '../../src/egress/guard.js';
import { parseAllowHosts } from '../../src/policy/destination.js';
import { createCallbackSender, type CallbackSenderDeps } from '../../src/webhooks/send.js';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver.js';

/**
 * One callback attempt under the address policy at connect time. Names resolve through a fake
 * resolver and connections go through a fake dialer that reaches only this machine: a "public"
 * address it knows is bridged to a receiver on 127.0.0.1, anything else is recorded and never
 * connected. So a callback steered elsewhere (rebinding, a redirect) shows up as a dial that was
 * asked for, or was not.
 */
const PUBLIC_A = '93.184.216.34';
const PUBLIC_B = '93.184.216.35';
const TLS_DIR = path.join(import.meta.dirname, '../support/tls');

let receiver: WebhookReceiver;
let dns: Map<string, string[]>;
let dials: Array<{ address: string; port: number }>;
/** Public address → loopback port it stands for. */
let bridges: Map<string, number>;

beforeAll(async () => {
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  await receiver?.close();
});
afterEach(() => {
  receiver.requests.length = 0;
});

function senderDeps(overrides: Partial<CallbackSenderDeps> = {}): CallbackSenderDeps {
  dns = new Map([['hooks.example', [PUBLIC_A]]]);
  dials = [];
  bridges = new Map([[PUBLIC_A, receiver.port]]);
  const dial: Dialer = async (address, port) => {
    dials.push({ address, port });
    const bridged = bridges.get(address);
    if (bridged === undefined)
      throw Object.assign(new Error(`connect ECONNREFUSED ${address}:${port}`), { code: 'ECONNREFUSED' });
    const socket = net.connect(bridged, '127.0.0.1');
    await once(socket, 'connect');
    return socket;
  };
  return {
    resolve: (name) => {
      const found = dns.get(name);
      if (!found) return Promise.reject(Object.assign(new Error('not found'), { code: 'ENOTFOUND' }));
      return Promise.resolve(found);
    },
    dial,
    allowHosts: [],
    timeoutMs: 5_000,
    connectTimeoutMs: 3_000,
    ...overrides,
  };
}

const request = (url: string, body = '{"job_id":"j1"}') => ({ url, headers: { 'webhook-id': 'd1' }, body });
const never = new AbortController().signal;

describe('a callback attempt', () => {
  it('posts the body with its headers to the checked address, with the URL host as Host', async () => {
    const send = createCallbackSender(senderDeps());
    const result = await send(request('http://hooks.example/hook?x=1', '{"job_id":"j1","status":"done"}'), never);
    expect(result).toEqual({ status: 200, error: null });
    expect(dials).toEqual([{ address: PUBLIC_A, port: 80 }]);
    const [received] = receiver.requests;
    expect(received).toMatchObject({ method: 'POST', path: '/hook?x=1', body: '{"job_id":"j1","status":"done"}' });
    expect(received!.headers).toMatchObject({
      host: 'hooks.example',
      'content-type': 'application/json',
      'webhook-id': 'd1',
    });
  });

  it('reports the status of an answer that is not 2xx, and does not follow a redirect to a refused address', async () => {
    receiver.script(500);
    const send = createCallbackSender(senderDeps());
    expect(await send(request('http://hooks.example/hook'), never)).toEqual({ status: 500, error: null });

    // A 307 keeps the method and body: a client that followed it would POST to the metadata address.
    const redirecting = await startRedirector('http://169.254.169.254/latest/meta-data/');
    try {
      const deps = senderDeps();
      bridges.set(PUBLIC_B, redirecting.port);
      dns.set('redirects.example', [PUBLIC_B]);
      const result = await createCallbackSender(deps)(request('http://redirects.example/hook'), never);
      expect(result).toEqual({ status: 307, error: null });
      expect(redirecting.requests()).toBe(1);
      expect(dials).toEqual([{ address: PUBLIC_B, port: 80 }]);
    } finally {
      redirecting.close();
    }
  });

  it('refuses a name that resolves to a private address at connect time (rebinding) without dialing it', async () => {
    const deps = senderDeps();
    const send = createCallbackSender(deps);
    // Control: the same name, resolving publicly, is delivered.
    expect(await send(request('http://hooks.example/hook'), never)).toEqual({ status: 200, error: null });
    expect(dials).toHaveLength(1);

    dns.set('hooks.example', ['10.0.0.7']);
    expect(await send(request('http://hooks.example/hook'), never)).toEqual({ status: null, error: 'address_private' });
    dns.set('hooks.example', [PUBLIC_A, '169.254.169.254']);
    expect(await send(request('http://hooks.example/hook'), never)).toEqual({
      status: null,
      error: 'address_link_local',
    });
    dns.set('hooks.example', ['::ffff:127.0.0.1']);
    expect(await send(request('http://hooks.example/hook'), never)).toEqual({
      status: null,
      error: 'address_loopback',
    });
    expect(await send(request('http://localhost:8080/hook'), never)).toEqual({ status: null, error: 'host_localhost' });
    expect(await send(request('http://gone.example/hook'), never)).toEqual({
      status: null,
      error: 'host_unresolvable',
    });
    // Nothing was dialed after the control.
    expect(dials).toHaveLength(1);
    expect(receiver.requests).toHaveLength(1);
  });

  it('dials only checked addresses, falling back to the next one when a connection fails', async () => {
    const deps = senderDeps();
    dns.set('hooks.example', [PUBLIC_B, PUBLIC_A]);
    const result = await createCallbackSender(deps)(request('http://hooks.example:8443/hook'), never);
    expect(result).toEqual({ status: 200, error: null });
    expect(dials).toEqual([
      { address: PUBLIC_B, port: 8443 },
      { address: PUBLIC_A, port: 8443 },
    ]);
    bridges.clear();
    expect(await createCallbackSender(deps)(request('http://hooks.example/hook'), never)).toEqual({
      status: null,
      error: 'connect_failed',
    });
  });

  it('reaches an allow-listed loopback receiver (FETCH_ALLOW_HOSTS) and nothing else on loopback', async () => {
    const direct: Dialer = async (address, port) => {
      const socket = net.connect(port, address);
      await once(socket, 'connect');
      return socket;
    };
    const allowed = createCallbackSender(
      senderDeps({ dial: direct, allowHosts: parseAllowHosts([receiver.hostPort]) }),
    );
    expect(await allowed(request(receiver.url('/hook')), never)).toEqual({ status: 200, error: null });
    const otherPort = `http://127.0.0.1:${receiver.port === 65535 ? 1 : receiver.port + 1}/hook`;
    expect(await allowed(request(otherPort), never)).toEqual({ status: null, error: 'address_loopback' });
  });

  it('gives up after its time limit when the receiver does not answer', async () => {
    receiver.script('hang');
    const send = createCallbackSender(senderDeps({ timeoutMs: 300 }));
    const started = Date.now();
    expect(await send(request('http://hooks.example/hook'), never)).toEqual({ status: null, error: 'timeout' });
    expect(receiver.requests).toHaveLength(1);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("gives a connect its own short time limit (connect_timeout), apart from the attempt's", async () => {
    // An address that never completes a connect (it drops SYNs): the dial waits until aborted.
    const silentDial: Dialer = (address, port, signal) =>
      new Promise((_, reject) => {
        dials.push({ address, port });
        signal?.addEventListener('abort', () => reject(new Error('connect aborted')), { once: true });
      });
    const deps = senderDeps({ timeoutMs: 30_000, connectTimeoutMs: 200 });
    const send = createCallbackSender({ ...deps, dial: silentDial });
    const started = performance.now();
    expect(await send(request('http://hooks.example/hook'), never)).toEqual({ status: null, error: 'connect_timeout' });
    const took = performance.now() - started;
    // Ended by the connect's limit, not the attempt's: a behaviour, not a speed.
    expect(took).toBeGreaterThanOrEqual(190);
    expect(took).toBeLessThan(deps.timeoutMs);
    expect(dials).toEqual([{ address: PUBLIC_A, port: 80 }]);
    // Control: the same sender connects to an address that answers.
    expect(await createCallbackSender(deps)(request('http://hooks.example/hook'), never)).toEqual({
      status: 200,
      error: null,
    });
  });

  it('says aborted when stopped mid-attempt', async () => {
    receiver.script('hang');
    const stop = new AbortController();
    const sending = createCallbackSender(senderDeps())(request('http://hooks.example/hook'), stop.signal);
    await receiver.waitForRequests(1);
    stop.abort();
    expect(await sending).toEqual({ status: null, error: 'aborted' });
  });

  it('speaks TLS to the checked address and verifies the certificate against the URL host', async () => {
    const cert = readFileSync(path.join(TLS_DIR, 'hooks.example.crt'), 'utf8');
    const key = readFileSync(path.join(TLS_DIR, 'hooks.example.key'), 'utf8');
    const bodies: string[] = [];
    const server = https.createServer({ cert, key }, (req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        bodies.push(`${req.headers.host} ${body}`);
        res.writeHead(204).end();
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const deps = senderDeps({ tlsCa: cert });
      bridges.set(PUBLIC_A, (server.address() as AddressInfo).port);
      dns.set('impostor.example', [PUBLIC_A]);
      const send = createCallbackSender(deps);
      expect(await send(request('https://hooks.example/hook'), never)).toEqual({ status: 204, error: null });
      expect(bodies).toEqual(['hooks.example {"job_id":"j1"}']);
      // The same server under another name: its certificate does not name it.
      expect(await send(request('https://impostor.example/hook'), never)).toEqual({
        status: null,
        error: 'tls_failed',
      });
      // Without the test CA, the system's roots do not trust it either.
      expect(
        await createCallbackSender({ ...deps, tlsCa: undefined })(request('https://hooks.example/hook'), never),
      ).toEqual({ status: null, error: 'tls_failed' });
      expect(bodies).toHaveLength(1);
    } finally {
      server.close();
    }
  });
});

/** A server that answers every request with a 307 to `location`, and counts them. */
async function startRedirector(location: string) {
  let requests = 0;
  const server = net.createServer((socket) => {
    socket.once('data', () => {
      requests++;
      socket.end(
        `HTTP/1.1 307 Temporary Redirect\r\nLocation: ${location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
      );
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { port: (server.address() as AddressInfo).port, requests: () => requests, close: () => server.close() };
}
