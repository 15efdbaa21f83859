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
import { readdir } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { promisify } from 'node:util';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
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

afterEach(() => {
  for (const attack of attacks.splice(0)) attack.release();
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
