/**
 * The app port's connection bounds against slowloris, on loopback against the real service: many
 * connections that open and never finish a request head. Each service runs with its descriptors
 * limited to FD_LIMIT (prlimit on its process), as a host's limit would be, so that holding
 * connections open can use them all up. Honest requests (a health check, a keyed scrape, a keyed
 * submission) are made on new connections before, during and after the attack; the attack's
 * connections are counted from the client (which the server closed, and when) and the server's
 * descriptors from its own metric.
 */
import { execFile } from 'node:child_process';
import { mkdir, open, readdir, readFile, truncate } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createUrlSigner } from '../../src/delivery/signed-url.js';
import { artifactRelativePath, artifactUrlPath } from '../../src/store/layout.js';
import { openEventStream, type EventStreamHandle } from '../support/event-stream.js';
import { startService, type ServiceHandle } from '../support/service.js';

const run = promisify(execFile);
const FD_LIMIT = 256;
const HALF_OPEN = 400;
const MAX_IDLE = 50;
const MAX_TOTAL = 100;
const HEADERS_TIMEOUT_S = 2;

const services: ServiceHandle[] = [];
const attacks: Attack[] = [];
const heldSockets: Socket[] = [];

afterEach(() => {
  for (const attack of attacks.splice(0)) attack.release();
  for (const socket of heldSockets.splice(0)) socket.destroy();
});
afterAll(async () => {
  await Promise.all(services.map((svc) => svc.stop()));
});

async function startLimited(env: Record<string, string>): Promise<ServiceHandle> {
  const svc = await startService({
    env: { WORKER_CONCURRENCY: '0', FETCH_ALLOW_HOSTS: '127.0.0.1:9', RATE_LIMIT_PER_MINUTE: '0', ...env },
  });
  services.push(svc);
  const pid = svc.process.pid!;
  expect((await readdir(`/proc/${pid}/fd`)).length).toBeLessThan(FD_LIMIT / 2);
  await run('prlimit', ['--pid', String(pid), `--nofile=${FD_LIMIT}:${FD_LIMIT}`]);
  return svc;
}

/** One request on a connection of its own: its status, or the error that ended it. */
function send(
  port: number,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
): Promise<string> {
  return new Promise((resolve) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        method,
        path,
        headers: { ...headers, connection: 'close' },
        agent: false,
        timeout: 10_000,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(String(res.statusCode)));
        res.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
      },
    );
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.end(body);
  });
}

let submissions = 0;
/** A health check, a keyed scrape and a keyed submission, each on a new connection. */
async function honestRequests(svc: ServiceHandle): Promise<string[]> {
  const auth = { authorization: `Bearer ${svc.apiKey}` };
  const body = JSON.stringify({ url: `http://127.0.0.1:9/bounds-${++submissions}.m4a` });
  return [
    await send(svc.port, 'GET', '/healthz'),
    await send(svc.port, 'GET', '/metrics', auth),
    await send(svc.port, 'POST', '/sources', { ...auth, 'content-type': 'application/json' }, body),
  ];
}

/** The service's open descriptors, by its own metric. */
async function openFds(svc: ServiceHandle): Promise<number> {
  const text = await (await svc.request('/metrics')).text();
  return Number(/^process_open_fds (\d+)/m.exec(text)![1]);
}

interface Attack {
  /** Connections the server has closed (or refused) so far. */
  closedByServer(): number;
  /** Resolves once the server has closed `count` of them; with when it closed the last of those. */
  untilClosed(count: number): Promise<number>;
  /** What the server sent on the connections it closed, each once. */
  answers(): string[];
  release(): void;
}

/** `count` connections, each sending the start of a request head and nothing more. */
async function slowloris(port: number, count: number): Promise<Attack> {
  const sockets: Socket[] = [];
  const answers: string[] = [];
  let closed = 0;
  let releasing = false;
  const waiters: Array<() => void> = [];
  await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<void>((resolve) => {
          const socket = connect({ host: '127.0.0.1', port }, () => {
            socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow');
            resolve();
          });
          let received = '';
          socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
          socket.on('error', () => resolve());
          socket.on('close', () => {
            if (releasing) return;
            closed++;
            answers.push(received.split('\r\n', 1)[0]!);
            for (const wake of waiters.splice(0)) wake();
          });
          sockets.push(socket);
        }),
    ),
  );
  const attack: Attack = {
    closedByServer: () => closed,
    untilClosed: (target) =>
      new Promise((resolve) => {
        const check = () => (closed >= target ? resolve(performance.now()) : waiters.push(check));
        check();
      }),
    answers: () => answers,
    release() {
      releasing = true;
      for (const socket of sockets) socket.destroy();
    },
  };
  attacks.push(attack);
  return attack;
}

describe('slowloris on the app port', () => {
  it(`the control, bounds as good as off (as before): ${HALF_OPEN} unfinished heads take every descriptor, and honest requests fail until they go`, async () => {
    const svc = await startLimited({
      HTTP_HEADERS_TIMEOUT_S: '60',
      HTTP_REQUEST_TIMEOUT_S: '300',
      HTTP_MAX_IDLE_CONNECTIONS: '1000000',
      HTTP_MAX_CONNECTIONS: '1000001',
    });
    expect(await honestRequests(svc)).toEqual(['200', '200', '202']);

    const attack = await slowloris(svc.port, HALF_OPEN);
    const during = await honestRequests(svc);
    expect(during.filter((outcome) => /^\d{3}$/.test(outcome))).toEqual([]);
    // The server holds what it could accept: at least half its descriptors' worth.
    expect(HALF_OPEN - attack.closedByServer()).toBeGreaterThanOrEqual(FD_LIMIT / 2);

    attack.release();
    await expect.poll(() => honestRequests(svc), { timeout: 10_000 }).toEqual(['200', '200', '202']);
  });

  it(`bounded: idle connections capped at ${MAX_IDLE}, the oldest closed first, heads cut after ${HEADERS_TIMEOUT_S} s, and honest requests answered throughout`, async () => {
    const svc = await startLimited({
      HTTP_HEADERS_TIMEOUT_S: String(HEADERS_TIMEOUT_S),
      HTTP_REQUEST_TIMEOUT_S: '10',
      HTTP_MAX_IDLE_CONNECTIONS: String(MAX_IDLE),
      HTTP_MAX_CONNECTIONS: String(MAX_TOTAL),
    });
    expect(await honestRequests(svc)).toEqual(['200', '200', '202']);
    const fdsBefore = await openFds(svc);

    const attack = await slowloris(svc.port, HALF_OPEN);
    const opened = performance.now();
    // All but MAX_IDLE are closed at once, the newest kept.
    await attack.untilClosed(HALF_OPEN - MAX_IDLE);
    expect(
      attack
        .answers()
        .slice(0, HALF_OPEN - MAX_IDLE)
        .every((answer) => answer === ''),
    ).toBe(true);
    const during = await honestRequests(svc);
    expect(during).toEqual(['200', '200', '202']);
    expect((await openFds(svc)) - fdsBefore).toBeLessThanOrEqual(MAX_IDLE + 5);
    await expect
      .poll(() => svc.logs.some((line) => line.msg.startsWith('connections closed: over the bounds')))
      .toBe(true);

    // The rest are cut by the head time-out (408), checked every second.
    const lastClosed = await attack.untilClosed(HALF_OPEN);
    const heldS = (lastClosed - opened) / 1000;
    expect(heldS).toBeGreaterThanOrEqual(HEADERS_TIMEOUT_S - 0.5);
    expect(heldS).toBeLessThan(HEADERS_TIMEOUT_S + 3);
    expect(attack.answers().filter((answer) => answer.startsWith('HTTP/1.1 408')).length).toBeGreaterThan(0);
    expect(await honestRequests(svc)).toEqual(['200', '200', '202']);
  });

  it('room kept for keyed clients: their event streams stay open past the total, and new requests are answered, while half-open connections churn', async () => {
    const STREAMS = 60;
    const svc = await startLimited({
      HTTP_HEADERS_TIMEOUT_S: String(HEADERS_TIMEOUT_S),
      HTTP_REQUEST_TIMEOUT_S: '10',
      HTTP_MAX_IDLE_CONNECTIONS: String(MAX_IDLE),
      HTTP_MAX_CONNECTIONS: String(MAX_TOTAL),
      EVENT_STREAMS_PER_KEY: String(STREAMS),
      EVENTS_KEEPALIVE_S: '1',
    });
    const job = await svc.submit('http://127.0.0.1:9/bounds-streamed.m4a');
    const streams: EventStreamHandle[] = [];
    try {
      for (let i = 0; i < STREAMS; i++)
        streams.push(
          await openEventStream(`${svc.baseUrl}/jobs/${job.job_id}/events`, { authorization: `Bearer ${svc.apiKey}` }),
        );
      expect(streams.map((stream) => stream.response.status)).toEqual(Array(STREAMS).fill(200));

      // Streams and idle connections together are past the total: idle ones are closed to make room.
      const attack = await slowloris(svc.port, HALF_OPEN);
      await attack.untilClosed(HALF_OPEN - (MAX_TOTAL - STREAMS));
      expect(await honestRequests(svc)).toEqual(['200', '200', '202']);
      const comments = streams.map((stream) => stream.comments);
      await Promise.all(
        streams.map((stream, i) =>
          stream.waitFor(() => stream.comments > comments[i]!, 'a keep-alive after the attack'),
        ),
      );
      await expect
        .poll(() =>
          svc.logs.find(
            (line) => line.msg.startsWith('connections closed: over the bounds') && Number(line.closed_over_total) > 0,
          ),
        )
        .toBeTruthy();
    } finally {
      await Promise.all(streams.map((stream) => stream.close()));
    }
  });
});

describe('answers nobody reads, on the app port', () => {
  const ATTACKER = '127.0.0.2';
  const HOLDERS = 150;
  const TOTAL = 60;
  const PER_CLIENT = 20;
  const SEND_TIMEOUT_S = 2;
  /** The attack's file: sparse, far larger than what the sockets' buffers absorb. */
  const BIG_CID = 'b'.repeat(64);

  /** A service whose store holds BIG_CID, and a signed URL for it (no key, not rate limited). */
  async function startWithBigFile(env: Record<string, string>): Promise<{ svc: ServiceHandle; signed: string }> {
    const svc = await startLimited({
      HTTP_MAX_IDLE_CONNECTIONS: '30',
      HTTP_MAX_CONNECTIONS: String(TOTAL),
      // The attacker is on loopback too: no peer is taken for a proxy here.
      HTTP_PROXY_ADDRESSES: '',
      ...env,
    });
    const file = path.join(svc.dataDir, 'artifacts', artifactRelativePath(BIG_CID, 'audio.wav'));
    await mkdir(path.dirname(file), { recursive: true });
    await (await open(file, 'w')).close();
    await truncate(file, 256 * 1024 * 1024);
    const signer = createUrlSigner((await readFile(path.join(svc.dataDir, 'url-signing-secret'), 'utf8')).trim());
    return { svc, signed: `${artifactUrlPath(BIG_CID, 'audio.wav')}?${signer.sign(BIG_CID, 'audio.wav', 3600).query}` };
  }

  /** `count` connections from ATTACKER, each asking for `target` and never reading its answer. */
  async function holdAnswers(port: number, target: string, count: number) {
    const sockets: Socket[] = [];
    await Promise.all(
      Array.from(
        { length: count },
        () =>
          new Promise<void>((resolve) => {
            const socket = connect({ host: '127.0.0.1', port, localAddress: ATTACKER }, () => {
              socket.pause();
              socket.write(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
              resolve();
            });
            socket.on('error', () => resolve());
            sockets.push(socket);
          }),
      ),
    );
    // A paused socket sees its end only when it reads: what the server closed is read from its side.
    heldSockets.push(...sockets);
  }

  /** The service's open descriptors, read from /proc: asking its metrics would take a connection. */
  const procFds = async (svc: ServiceHandle) => (await readdir(`/proc/${svc.process.pid}/fd`)).length;

  /** Connections the service has logged closing for these reasons, summed over its lines. */
  const closedInAll = (svc: ServiceHandle, fields: string[]) =>
    svc.logs
      .filter((line) => line.msg.startsWith('connections closed: over the bounds'))
      .reduce((sum, line) => sum + fields.reduce((n, field) => n + Number(line[field]), 0), 0);

  it(`the control, caps as good as off: ${HOLDERS} unread answers from one client take every connection, and honest requests fail`, async () => {
    // The attacker taken for a proxy: not capped per client. The idle cap just below the total, so
    // that only the total closes connections: on busy cores many heads arrive late, and with a
    // lower idle cap more than HOLDERS - TOTAL would be closed while idle, before the total is full.
    const { svc, signed } = await startWithBigFile({
      HTTP_PROXY_ADDRESSES: ATTACKER,
      HTTP_SEND_TIMEOUT_S: '3600',
      HTTP_MAX_IDLE_CONNECTIONS: String(TOTAL - 1),
    });
    expect(await honestRequests(svc)).toEqual(['200', '200', '202']);
    const fdsBefore = await procFds(svc);
    await holdAnswers(svc.port, signed, HOLDERS);
    // Every connection past the total closed (those still idle first): the rest are all answering.
    // At least: a keep-alive connection of the test's own left idle is closed among them.
    await expect
      .poll(() => closedInAll(svc, ['closed_idle', 'closed_over_total']), { timeout: 30_000 })
      .toBeGreaterThanOrEqual(HOLDERS - TOTAL);
    expect((await procFds(svc)) - fdsBefore).toBeGreaterThanOrEqual(TOTAL - 5);
    const during = await honestRequests(svc);
    expect(during.filter((outcome) => /^\d{3}$/.test(outcome))).toEqual([]);
  });

  it(`bounded: ${PER_CLIENT} connections per client, stalled answers closed after ${SEND_TIMEOUT_S} s, and honest requests answered throughout`, async () => {
    const { svc, signed } = await startWithBigFile({
      HTTP_MAX_CONNECTIONS_PER_CLIENT: String(PER_CLIENT),
      HTTP_SEND_TIMEOUT_S: String(SEND_TIMEOUT_S),
    });
    expect(await honestRequests(svc)).toEqual(['200', '200', '202']);
    const fdsBefore = await procFds(svc);
    await holdAnswers(svc.port, signed, HOLDERS);
    // Those past the cap are closed at once...
    await expect
      .poll(() => closedInAll(svc, ['closed_over_per_client']), { timeout: 30_000 })
      .toBe(HOLDERS - PER_CLIENT);
    expect(await honestRequests(svc)).toEqual(['200', '200', '202']);
    expect((await procFds(svc)) - fdsBefore).toBeLessThanOrEqual(PER_CLIENT + 5);
    // ...and the others once their answers have stalled for the send timeout: their descriptors
    // are given back (a paused client sees the end only when it reads).
    await expect.poll(() => closedInAll(svc, ['closed_send_timeout']), { timeout: 30_000 }).toBe(PER_CLIENT);
    await expect.poll(() => procFds(svc), { timeout: 30_000 }).toBeLessThanOrEqual(fdsBefore + 2);
    expect(await honestRequests(svc)).toEqual(['200', '200', '202']);
  });
});
