import { once } from 'node:events';
import { createConnection, createServer, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { databaseGoneMessage, freshDatabaseUrl } from '../support/postgres.js';
import { startService, type ServiceHandle } from '../support/service.js';

/**
 * PostgreSQL out of reach under a running node: the service reaches its database through a TCP
 * forwarder on loopback that the test cuts (every connection closed, new ones reset) and puts
 * back, or turns into a server that refuses this client as PostgreSQL does when the database is
 * gone. While it is cut or refusing, every operation that needs the database answers 503
 * database_unavailable with Retry-After, never 500 and never a 202 whose job was not stored; once
 * it is back, the same requests succeed without a restart.
 *
 * The forwarder keeps its port from start to end: a port let go during the cut could be taken by
 * any other process on the machine (another test's server, another run's PostgreSQL), and the
 * service would then talk to whatever answered there.
 */
type ForwarderMode = 'forward' | 'reset' | 'refuse';

interface Forwarder {
  port: number;
  /** Closes every connection, and sets what happens to new ones. */
  set(mode: ForwarderMode): void;
  close(): Promise<void>;
}

async function startForwarder(target: { host: string; port: number }): Promise<Forwarder> {
  const sockets = new Set<Socket>();
  let mode: ForwarderMode = 'forward';
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
  };
  const server = createServer((client) => {
    track(client);
    if (mode === 'reset') return client.resetAndDestroy();
    if (mode === 'refuse') return void client.once('data', () => client.end(databaseGoneMessage()));
    const upstream = createConnection(target);
    track(upstream);
    client.pipe(upstream).pipe(client);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const set = (next: ForwarderMode) => {
    mode = next;
    for (const socket of sockets) socket.destroy();
  };
  return {
    port: (server.address() as { port: number }).port,
    set,
    close: async () => {
      const closed = new Promise((resolve) => server.close(resolve));
      set('reset');
      await closed;
    },
  };
}

let media: MediaServer;
let forwarder: Forwarder;
let svc: ServiceHandle;

beforeAll(async () => {
  media = await startMediaServer();
  media.route('/slow.mp3', () => {
    // Never answers: the jobs stay queued or running, which is all this test needs of them.
  });
  const url = new URL(await freshDatabaseUrl());
  forwarder = await startForwarder({ host: url.hostname, port: Number(url.port) });
  url.port = String(forwarder.port);
  svc = await startService({
    env: { DATABASE_URL: url.toString(), FETCH_ALLOW_HOSTS: media.hostPort, WORKER_CONCURRENCY: '0' },
  });
});

afterAll(async () => {
  await svc?.stop();
  await forwarder?.close();
  await media?.close();
});

async function submit(url: string): Promise<Response> {
  return svc.request('/sources', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ url }),
  });
}

describe('the database out of reach', () => {
  it.each([
    { mode: 'reset' as const, what: 'cut off (connections closed, new ones reset)' },
    { mode: 'refuse' as const, what: 'refusing this client (its database gone)' },
  ])(
    'answers 503 database_unavailable with Retry-After while $what, and serves again once it is back',
    async ({ mode }) => {
      onTestFailed(() => console.error(`service output:\n${svc.output().slice(-30_000)}`));
      // Control: with the database there, a submission is stored and read back.
      const before = await submit(media.url(`/slow.mp3?before-${mode}`));
      expect(before.status).toBe(202);
      const job = (await before.json()) as { job_id: string };
      expect((await svc.request(`/jobs/${job.job_id}`)).status).toBe(200);

      forwarder.set(mode);
      const submitted = await submit(media.url(`/slow.mp3?during-${mode}`));
      expect(submitted.status).toBe(503);
      expect(submitted.headers.get('content-type')).toBe('application/problem+json');
      expect(submitted.headers.get('retry-after')).toBe('5');
      expect(await submitted.json()).toMatchObject({ status: 503, code: 'database_unavailable' });
      const polled = await svc.request(`/jobs/${job.job_id}`);
      expect(polled.status).toBe(503);
      expect(await polled.json()).toMatchObject({ code: 'database_unavailable' });
      const health = await svc.request('/healthz', { auth: false });
      expect(health.status).toBe(503);

      forwarder.set('forward');
      const deadline = Date.now() + 30_000;
      let after: Response;
      for (;;) {
        after = await submit(media.url(`/slow.mp3?after-${mode}`));
        if (after.status === 202 || Date.now() > deadline) break;
        expect(after.status).toBe(503);
        await after.body?.cancel();
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      expect(after.status).toBe(202);
      expect((await svc.request(`/jobs/${job.job_id}`)).status).toBe(200);
      // Nothing anywhere answered 500.
      expect(svc.logs.filter((line) => line.msg === 'unhandled error')).toEqual([]);
    },
  );
});
