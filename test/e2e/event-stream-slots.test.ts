/**
 * getJobEvents' places per API key, held only as long as the HTTP exchange that carries a stream,
 * against the real service and a real nginx in front of it on loopback. HEAD gets the stream's
 * head and opens no stream; a stream whose exchange ends gives its place back, however it ends.
 * The places are counted from outside: how many streams the key can open before the 429. Jobs
 * stay queued (no workers), so no stream ends by itself.
 */
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApiBehindNginx, type ApiBehindNginx } from '../support/api-behind-nginx.js';
import { openEventStream, readEventStream, type EventStreamHandle } from '../support/event-stream.js';
import type { RunningNginx } from '../support/nginx.js';
import { openRawConnection, rawRequest } from '../support/raw-http.js';
import type { ServiceHandle } from '../support/service.js';

const PER_KEY = 3;

let front: ApiBehindNginx;
let svc: ServiceHandle;
let nginx: RunningNginx;
let jobId: string;

beforeAll(async () => {
  front = await startApiBehindNginx({ EVENT_STREAMS_PER_KEY: String(PER_KEY) });
  ({ svc, nginx } = front);
  jobId = (await svc.submit('http://127.0.0.1:9/event-slots.m4a')).job_id;
});

afterAll(() => front?.stop());

const auth = () => ({ authorization: `Bearer ${svc.apiKey}` });
const eventsPath = () => `/jobs/${jobId}/events`;
const streamEnds = () => svc.logs.filter((line) => line.msg === 'job event stream ended' && line.job_id === jobId);

/**
 * How many streams the key can open now: opened one by one until the first 429 (PER_KEY + 1 at
 * most), then all closed again, once the service has ended each of them.
 */
async function freePlaces(): Promise<number> {
  const opened: EventStreamHandle[] = [];
  try {
    for (let i = 0; i <= PER_KEY; i++) {
      const res = await fetch(`${svc.baseUrl}${eventsPath()}`, { headers: auth() });
      if (res.status === 429) {
        expect(await res.json()).toMatchObject({ code: 'too_many_event_streams', limit: 'per_key' });
        break;
      }
      expect(res.status).toBe(200);
      opened.push(readEventStream(res));
    }
    return opened.length;
  } finally {
    const endedBefore = streamEnds().length;
    await Promise.all(opened.map((stream) => stream.close()));
    await expect.poll(() => streamEnds().length).toBe(endedBefore + opened.length);
  }
}

describe('event-stream places', () => {
  it(`the control: ${PER_KEY} streams held take the key's places (the next is refused 429), and come back when they close`, async () => {
    expect(await freePlaces()).toBe(PER_KEY);
    const held = await Promise.all(
      Array.from({ length: PER_KEY }, () => openEventStream(`${svc.baseUrl}${eventsPath()}`, auth())),
    );
    expect(held.map((stream) => stream.response.status)).toEqual(Array(PER_KEY).fill(200));
    expect(await freePlaces()).toBe(0);
    const endedBefore = streamEnds().length;
    await Promise.all(held.map((stream) => stream.close()));
    await expect.poll(() => streamEnds().length).toBe(endedBefore + PER_KEY);
    expect(await freePlaces()).toBe(PER_KEY);
  });

  it("twenty HEADs, directly and through nginx, get the stream's head without a body and take no place", async () => {
    for (let i = 0; i < 10; i++) {
      for (const port of [svc.port, nginx.port]) {
        const res = await rawRequest(port, 'HEAD', eventsPath(), auth());
        expect(res.status).toBe(200);
        expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
        expect(res.bodyBytes).toBe(0);
      }
    }
    expect(await freePlaces()).toBe(PER_KEY);
  });

  it('HEADs pipelined on a kept-alive connection, each followed by a getJob: all answered in order, and no place taken', async () => {
    const conn = await openRawConnection(svc.port);
    try {
      const request = (method: string, target: string) =>
        `${method} ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${svc.apiKey}\r\n\r\n`;
      const rounds = PER_KEY + 2;
      conn.write(
        Array.from({ length: rounds }, () => request('HEAD', eventsPath()) + request('GET', `/jobs/${jobId}`)).join(''),
      );
      const text = () => conn.received().toString('latin1');
      await expect.poll(() => (text().match(/HTTP\/1\.1 200 OK/g) ?? []).length).toBe(2 * rounds);
      const types = [...text().matchAll(/content-type: ([^\r]+)/gi)].map((match) => match[1]);
      expect(types).toEqual(
        Array.from({ length: rounds }, () => ['text/event-stream; charset=utf-8', 'application/json']).flat(),
      );
      expect(text()).not.toContain('event: job');
      expect(await freePlaces()).toBe(PER_KEY);
    } finally {
      conn.close();
    }
  });

  it('with the places taken, HEAD is refused 429 as a GET would be', async () => {
    const held = await Promise.all(
      Array.from({ length: PER_KEY }, () => openEventStream(`${svc.baseUrl}${eventsPath()}`, auth())),
    );
    const refused = await rawRequest(svc.port, 'HEAD', eventsPath(), auth());
    expect(refused.status).toBe(429);
    expect(refused.headers.get('content-type')).toBe('application/problem+json');
    const endedBefore = streamEnds().length;
    await Promise.all(held.map((stream) => stream.close()));
    await expect.poll(() => streamEnds().length).toBe(endedBefore + PER_KEY);
  });

  it('a stream gives its place back when its exchange ends: the client resets its connection, or hangs up on nginx', async () => {
    // A GET over a raw socket, reset by the client once the stream has begun.
    const endedBefore = streamEnds().length;
    await new Promise<void>((resolve, reject) => {
      const socket = connect({ host: '127.0.0.1', port: svc.port }, () => {
        socket.write(`GET ${eventsPath()} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${svc.apiKey}\r\n\r\n`);
      });
      socket.on('error', reject);
      let received = '';
      socket.on('data', (chunk: Buffer) => {
        received += chunk.toString('latin1');
        if (!received.includes('event: job')) return;
        socket.resetAndDestroy();
        resolve();
      });
    });
    // Through nginx: the client goes away, nginx closes its connection to the app.
    const viaNginx = await openEventStream(nginx.url(eventsPath()), auth());
    await viaNginx.waitFor(() => viaNginx.records.length > 0, 'the first event');
    await viaNginx.close();
    await expect.poll(() => streamEnds().length).toBe(endedBefore + 2);
    expect(await freePlaces()).toBe(PER_KEY);
  });
});
