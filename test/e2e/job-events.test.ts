/**
 * getJobEvents end to end: two real nodes on one PostgreSQL and one artifact root, a worker node
 * that runs every job and an API-only node (WORKER_CONCURRENCY=0) that streams them, asked both
 * directly and through a real nginx rendering nginx/templates. Events in order with progress,
 * the final state and the end of the stream, resuming with Last-Event-ID, keep-alives through
 * nginx (and what its proxy_read_timeout does to a stream without them), the API key, cancel
 * seen on the stream, the per-key and per-node limits, a node's shutdown ending its streams
 * so that clients resume on another node, and a job's end told to every node at once (a third,
 * API-only node that reads its jobs once a minute streams it without waiting). getEvents: many
 * jobs in one stream, directly and through nginx, with 200 ids on its request line, unknown ids
 * refused, and one place in the per-key limit. And nginx with TLS and HTTP/2 as
 * docs/operations.md says: eight streams and a getJob on one connection.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, type ClientHttp2Session } from 'node:http2';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openEventStream, type EventStreamHandle, type StreamedRecord } from '../support/event-stream.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startNginx, type RunningNginx } from '../support/nginx.js';
import { freshDatabaseUrl } from '../support/postgres.js';
import { writeSelfSignedCertificate } from '../support/self-signed-certificate.js';
import { ROOT, startService, type JobBody, type ServiceHandle } from '../support/service.js';

const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const PLUGIN_DIR = path.join(ROOT, 'test/support/ytdlp-plugins');
const KEY = 'job-events-key-one-0123456789';
const OTHER_KEY = 'job-events-key-two-0123456789';
const PER_KEY = 3;
const PER_NODE = 4;
const sharedRoot = path.join(tmpdir(), `sf-events-${process.pid}-${Date.now()}`);

let media: MediaServer;
let databaseUrl: string;
let worker: ServiceHandle;
let api: ServiceHandle;
/** An API-only node whose streams read their jobs once a minute (EVENTS_POLL_MS). */
let slowPoll: ServiceHandle;
let nginx: RunningNginx;
/** Requests to the hanging route, answered when the test says so. */
const hanging: Array<() => void> = [];

function startNode(workers: number, extra: Record<string, string> = {}): Promise<ServiceHandle> {
  return startService({
    apiKey: KEY,
    env: {
      API_KEYS: `${KEY},${OTHER_KEY}`,
      DATABASE_URL: databaseUrl,
      ARTIFACT_ROOT: sharedRoot,
      WORKER_CONCURRENCY: String(workers),
      FETCH_ALLOW_HOSTS: media.hostPort,
      PYTHONPATH: PLUGIN_DIR,
      PYTHONDONTWRITEBYTECODE: '1',
      RATE_LIMIT_PER_MINUTE: '0',
      ...extra,
    },
  });
}

beforeAll(async () => {
  media = await startMediaServer();
  databaseUrl = await freshDatabaseUrl();
  // 8 s of 44.1 kHz stereo WAV (1.4 MB) at 320 KB/s: a download of about 4.5 s, with progress.
  const tone = await makeTone(FIXTURE_DIR, { seconds: 8, channels: 2, sampleRate: 44100, format: 'wav' });
  for (const name of ['one', 'two', 'three', 'four'])
    media.serveFile(`/${name}.wav`, tone.path, { contentType: 'audio/wav', throttleBytesPerSec: 320 * 1024 });
  // The downloader's first request here is never answered until the test lets go: a job that
  // runs and changes no more, until it is canceled.
  media.route('/hang.wav', (_req, res) => {
    hanging.push(() => res.destroy());
  });
  [worker, api, slowPoll] = await Promise.all([
    startNode(2),
    startNode(0, {
      ACCEL_REDIRECT_PREFIX: '/_artifacts/',
      EVENTS_KEEPALIVE_S: '1',
      EVENT_STREAMS_PER_KEY: String(PER_KEY),
      EVENT_STREAMS_PER_NODE: String(PER_NODE),
    }),
    startNode(0, { EVENTS_POLL_MS: '60000' }),
  ]);
  nginx = await startNginx({ appPort: api.port, artifactRoot: sharedRoot });
});

afterAll(async () => {
  for (const release of hanging.splice(0)) release();
  await nginx?.stop();
  await Promise.all([worker, api, slowPoll].map((svc) => svc?.stop().catch(() => undefined)));
  await media?.close();
  await rm(sharedRoot, { recursive: true, force: true });
});

const auth = (key = KEY) => ({ authorization: `Bearer ${key}` });
const directUrl = (id: string) => `${api.baseUrl}/jobs/${id}/events`;
const viaNginx = (id: string) => nginx.url(`/jobs/${id}/events`);
const STATUS_ORDER = ['queued', 'running', 'done'];

/** The record without what is signed anew at every read. */
function unsigned(record: StreamedRecord | JobBody) {
  const artifacts = (record.result?.artifacts ?? []) as Array<Record<string, unknown>>;
  return {
    ...record,
    result: record.result && {
      ...record.result,
      artifacts: artifacts.map(({ signed_url: _u, signed_url_expires_at: _e, ...rest }) => rest),
    },
  };
}

/** Events in order: status never goes back, progress never shrinks, no state sent twice in a row. */
function expectInOrder(stream: EventStreamHandle): void {
  const ranks = stream.records.map((record) => STATUS_ORDER.indexOf(record.status));
  expect(ranks.every((rank) => rank >= 0)).toBe(true);
  expect(ranks).toEqual([...ranks].sort((a, b) => a - b));
  const done = stream.records.filter((record) => record.progress !== null).map((record) => record.progress!.bytes_done);
  expect(done).toEqual([...done].sort((a, b) => a - b));
  const ids = stream.events.map((event) => event.id);
  for (let i = 1; i < ids.length; i++) expect(ids[i]).not.toBe(ids[i - 1]);
}

describe('job events', () => {
  it('a job the worker node runs, followed on the API-only node directly and through nginx: every change in order, then the final state, then the end', async () => {
    const submitted = await api.submit(media.url('/one.wav'));
    const [direct, proxied] = await Promise.all([
      openEventStream(directUrl(submitted.job_id), auth()),
      openEventStream(viaNginx(submitted.job_id), auth()),
    ]);
    for (const stream of [direct, proxied]) {
      expect(stream.response.status).toBe(200);
      expect(stream.response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
      expect(stream.response.headers.get('cache-control')).toBe('no-store');
    }
    // nginx acts on X-Accel-Buffering itself and does not pass it on.
    expect(direct.response.headers.get('x-accel-buffering')).toBe('no');
    expect(proxied.response.headers.get('x-accel-buffering')).toBeNull();

    // While the download runs, its progress arrives through nginx as it happens, not at the end.
    await proxied.waitFor(
      () => proxied.records.some((record) => (record.progress?.percent ?? 0) > 0 && record.progress!.percent! < 100),
      'progress through nginx',
    );
    expect((await api.getJob(submitted.job_id)).status).toBe('running');

    await Promise.all([direct.ended, proxied.ended]);
    const final = await api.getJob(submitted.job_id);
    expect(final.status).toBe('done');
    for (const stream of [direct, proxied]) {
      expectInOrder(stream);
      expect(
        stream.records.filter((record) => record.status === 'running' && record.progress !== null).length,
      ).toBeGreaterThanOrEqual(3);
      expect(stream.records.filter((record) => record.status === 'done')).toHaveLength(1);
      expect(unsigned(stream.records.at(-1)!)).toEqual(unsigned(final));
    }
    expect(proxied.events.at(-1)!.id).toBe(direct.events.at(-1)!.id);
    // It ran on the other node.
    expect(worker.logs.some((line) => line.job_id === submitted.job_id && line.msg === 'job done')).toBe(true);
    expect(api.logs.some((line) => line.job_id === submitted.job_id && line.msg === 'job done')).toBe(false);
  });

  it("a job's end reaches a stream at once on a node that reads its jobs once a minute (told through PostgreSQL by the node that ran it); its progress waits for that read (the control: the other node's stream shows it)", async () => {
    const submitted = await api.submit(media.url('/four.wav'));
    const [slow, usual] = await Promise.all([
      openEventStream(`${slowPoll.baseUrl}/jobs/${submitted.job_id}/events`, auth()),
      openEventStream(directUrl(submitted.job_id), auth()),
    ]);
    // The job runs for some 5 s; the slow node's first read of it would come after 60.
    await slow.waitFor(() => slow.records.some((record) => record.status === 'done'), "the job's end", 30_000);
    await Promise.all([slow.ended, usual.ended]);
    const final = await api.getJob(submitted.job_id);
    expect(final.status).toBe('done');
    // The state at the stream's open, then the end: nothing between.
    expect(slow.records).toHaveLength(2);
    expect(['queued', 'running']).toContain(slow.records[0]!.status);
    expect(unsigned(slow.records[1]!)).toEqual(unsigned(final));
    expect(
      usual.records.filter((record) => record.status === 'running' && record.progress !== null).length,
    ).toBeGreaterThanOrEqual(2);
    expect(slow.events.at(-1)!.id).toBe(usual.events.at(-1)!.id);
  });

  it('resumes with Last-Event-ID: through nginx, then directly, nothing sent twice; the final state known gets 204', async () => {
    const submitted = await api.submit(media.url('/two.wav'));
    const first = await openEventStream(viaNginx(submitted.job_id), auth());
    await first.waitFor(
      () => first.records.some((record) => record.status === 'running' && record.progress !== null),
      'a running state with progress',
    );
    await first.close();
    const lastId = first.events.at(-1)!.id!;

    const resumed = await openEventStream(directUrl(submitted.job_id), { ...auth(), 'last-event-id': lastId });
    await resumed.ended;
    expect(resumed.events.map((event) => event.id)).not.toContain(lastId);
    expect(resumed.records.at(-1)!.status).toBe('done');
    expectInOrder(resumed);

    const finalId = resumed.events.at(-1)!.id!;
    for (const url of [directUrl(submitted.job_id), viaNginx(submitted.job_id)]) {
      const res = await fetch(url, { headers: { ...auth(), 'last-event-id': finalId } });
      expect(res.status).toBe(204);
      expect(await res.text()).toBe('');
    }
    // A client that left before the end comes back to the final state alone, and the end.
    const late = await openEventStream(viaNginx(submitted.job_id), { ...auth(), 'last-event-id': lastId });
    await late.ended;
    expect(late.events.map((event) => event.id)).toEqual([finalId]);
  });

  it('through nginx, a job that stays the same gets keep-alives and no events, until it is canceled: then the stream ends', async () => {
    const submitted = await api.submit(media.url('/hang.wav'));
    const stream = await openEventStream(viaNginx(submitted.job_id), auth());
    await stream.waitFor(() => stream.records.some((record) => record.status === 'running'), 'running');
    const eventsBefore = stream.events.length;
    await stream.waitFor(() => stream.comments >= 3, 'three keep-alives (one a second)');
    expect(stream.events.length).toBe(eventsBefore);

    const canceled = await api.request(`/jobs/${submitted.job_id}/cancel`, { method: 'POST' });
    expect(canceled.status).toBe(200);
    await stream.ended;
    expect(stream.records.at(-1)!.status).toBe('canceled');
  });

  it('through nginx, a silent stream would be cut at proxy_read_timeout; the keep-alives hold it open past it', async () => {
    // Both nodes behind an nginx whose proxy_read_timeout is 3 s instead of 60: the API node
    // sends a keep-alive every second, the worker node every 15 s (the default), like a
    // keep-alive interval longer than nginx's timeout.
    const [shortTimeoutToApi, shortTimeoutToWorker] = await Promise.all([
      startNginx({ appPort: api.port, artifactRoot: sharedRoot, proxyReadTimeoutS: 3 }),
      startNginx({ appPort: worker.port, artifactRoot: sharedRoot, proxyReadTimeoutS: 3 }),
    ]);
    try {
      const submitted = await api.submit(media.url('/hang.wav?read-timeout'));
      const eventsPath = `/jobs/${submitted.job_id}/events`;
      const [kept, cut] = await Promise.all([
        openEventStream(shortTimeoutToApi.url(eventsPath), auth()),
        openEventStream(shortTimeoutToWorker.url(eventsPath), auth()),
      ]);
      await Promise.all(
        [kept, cut].map((stream) =>
          stream.waitFor(() => stream.records.some((record) => record.status === 'running'), 'running'),
        ),
      );

      // The control: nginx ends the stream that stayed silent for 3 s, though the job runs on.
      const cutAfter = Date.now();
      await cut.ended.catch(() => undefined);
      expect(Date.now() - cutAfter).toBeLessThan(10_000);
      expect(cut.records.at(-1)!.status).toBe('running');
      expect(shortTimeoutToWorker.errorLog()).toContain('upstream timed out');

      // The kept-alive stream is still open well past the timeout (waitFor fails if it ended).
      const openSince = kept.arrivals.at(-1)!.at;
      await kept.waitFor(
        () => kept.arrivals.some((arrival) => arrival.kind === 'comment' && arrival.at > openSince + 7_000),
        'keep-alives for 7 s',
      );
      expect(shortTimeoutToApi.errorLog()).not.toContain('upstream timed out');

      await api.request(`/jobs/${submitted.job_id}/cancel`, { method: 'POST' });
      await kept.ended;
      expect(kept.records.at(-1)!.status).toBe('canceled');
    } finally {
      await Promise.all([shortTimeoutToApi.stop(), shortTimeoutToWorker.stop()]);
    }
  });

  it(`refuses a key's stream past ${PER_KEY} and the node's past ${PER_NODE} with 429 too_many_event_streams; a closed one frees its place`, async () => {
    const submitted = await api.submit(media.url('/hang.wav?limits'));
    const open = (key: string) => openEventStream(directUrl(submitted.job_id), auth(key));
    const mine = await Promise.all(Array.from({ length: PER_KEY }, () => open(KEY)));
    for (const stream of mine) expect(stream.response.status).toBe(200);

    const refusedForKey = await fetch(directUrl(submitted.job_id), { headers: auth(KEY) });
    expect(refusedForKey.status).toBe(429);
    expect(refusedForKey.headers.get('content-type')).toBe('application/problem+json');
    expect(refusedForKey.headers.get('retry-after')).toBe('5');
    expect(await refusedForKey.json()).toMatchObject({ status: 429, code: 'too_many_event_streams', limit: 'per_key' });

    const others = await open(OTHER_KEY);
    expect(others.response.status).toBe(200);
    const refusedForNode = await fetch(viaNginx(submitted.job_id), { headers: auth(OTHER_KEY) });
    expect(refusedForNode.status).toBe(429);
    expect(await refusedForNode.json()).toMatchObject({ code: 'too_many_event_streams', limit: 'per_node' });

    // Hanging up gives the place back (the server notices the closed connection).
    await mine[0]!.close();
    let reopened: Response | undefined;
    for (let i = 0; i < 50 && reopened?.status !== 200; i++) {
      await reopened?.body?.cancel();
      reopened = await fetch(directUrl(submitted.job_id), { headers: auth(KEY) });
    }
    expect(reopened!.status).toBe(200);
    await reopened!.body!.cancel();
    await Promise.all([...mine.slice(1), others].map((stream) => stream.close()));
    await api.request(`/jobs/${submitted.job_id}/cancel`, { method: 'POST' });
  });

  it("a node's shutdown ends its streams at once; the client resumes on another node without a repeat", async () => {
    const leaving = await startNode(0, { SHUTDOWN_GRACE_S: '30' });
    const submitted = await api.submit(media.url('/three.wav'));
    const stream = await openEventStream(`${leaving.baseUrl}/jobs/${submitted.job_id}/events`, auth());
    await stream.waitFor(() => stream.records.some((record) => record.status === 'running'), 'running');
    const stopping = leaving.stop();
    // Ended by the server, cleanly, not cut off by its exit.
    await stream.ended;
    await stopping;
    expect(stream.records.at(-1)!.status).not.toBe('done');

    const resumed = await openEventStream(directUrl(submitted.job_id), {
      ...auth(),
      'last-event-id': stream.events.at(-1)!.id!,
    });
    await resumed.ended;
    expect(resumed.events.map((event) => event.id)).not.toContain(stream.events.at(-1)!.id);
    expect(resumed.records.at(-1)!.status).toBe('done');
  });

  it('answers 404 for a job that does not exist and 401 without a key, as getJob does', async () => {
    const missing = await fetch(directUrl('no-such-job'), { headers: auth() });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ code: 'job_not_found' });
    const anonymous = await fetch(viaNginx('no-such-job'));
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('content-type')).toBe('application/problem+json');
  });

  it('through nginx, a job that exists streams nothing without a valid key (the control: with one it does)', async () => {
    const submitted = await api.submit(media.url('/hang.wav?keyed'));
    for (const headers of [{}, auth('not-a-key-of-this-service-0123')]) {
      const refused = await fetch(viaNginx(submitted.job_id), { headers });
      expect(refused.status).toBe(401);
      expect(refused.headers.get('content-type')).toBe('application/problem+json');
      expect(await refused.text()).not.toContain(submitted.job_id);
    }
    const keyed = await openEventStream(viaNginx(submitted.job_id), auth());
    expect(keyed.response.status).toBe(200);
    await keyed.waitFor(() => keyed.records.some((record) => record.job_id === submitted.job_id), 'the job record');
    await keyed.close();
    await api.request(`/jobs/${submitted.job_id}/cancel`, { method: 'POST' });
  });

  it('getEvents: two running jobs and a finished one in one stream through nginx, each job as its own stream gives it, until both have ended', async () => {
    const finished = await api.submit(media.url('/one.wav'));
    await api.waitForJob(finished.job_id, ['done']);
    const [a, b] = [await api.submit(media.url('/two.wav?many')), await api.submit(media.url('/three.wav?many'))];
    const ids = [a.job_id, finished.job_id, b.job_id];
    const [many, ownA] = await Promise.all([
      openEventStream(nginx.url(`/events?jobs=${ids.join(',')}`), auth()),
      openEventStream(directUrl(a.job_id), auth()),
    ]);
    expect(many.response.status).toBe(200);
    expect(many.response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    // Progress of the running ones arrives as it happens.
    await many.waitFor(
      () => many.records.some((record) => record.job_id !== finished.job_id && (record.progress?.percent ?? 0) > 0),
      'progress of a running job',
    );
    await Promise.all([many.ended, ownA.ended]);
    // The opening states in the order named.
    expect(many.records.slice(0, 3).map((record) => record.job_id)).toEqual(ids);
    expect(many.records.filter((record) => record.job_id === finished.job_id)).toHaveLength(1);
    for (const id of [a.job_id, b.job_id]) {
      const records = many.records.filter((record) => record.job_id === id);
      expect(records.at(-1)).toMatchObject({ status: 'done', error: null });
      const states = records.map((record) => record.status);
      expect(states).toEqual([...states].sort((x, y) => STATUS_ORDER.indexOf(x) - STATUS_ORDER.indexOf(y)));
    }
    // a's final event here is the one its own stream sent: the same record, the same id.
    const finalA = many.events[many.records.findLastIndex((record) => record.job_id === a.job_id)]!;
    expect(finalA.id).toBe(ownA.events.at(-1)!.id);
    expect(unsigned(JSON.parse(finalA.data) as StreamedRecord)).toEqual(unsigned(ownA.records.at(-1)!));
    // nginx logged it without its ids.
    const [line] = await nginx.accessLines(
      (entry) => entry.route === '/events',
      (lines) => lines.length >= 1,
    );
    expect(line!.uri).toBe('/events?redacted');
    expect(line!.status).toBe('200');
  });

  it('getEvents: 200 ids on the request line through nginx stream; 201 are 400 too_many_jobs; an unknown id is 404 naming it', async () => {
    const hang = await api.submit(media.url('/hang.wav?many'));
    const known = Array.from({ length: 199 }, (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`);
    // 199 ids of jobs that do not exist, and one that does: the 404 names the 199.
    const missing = await fetch(nginx.url(`/events?jobs=${[...known, hang.job_id].join(',')}`), { headers: auth() });
    expect(missing.status).toBe(404);
    const problem = (await missing.json()) as { code: string; job_ids: string[] };
    expect(problem.code).toBe('job_not_found');
    expect(problem.job_ids).toEqual(known);

    // 200 ids, every one the running job's (named 200 times: carried once), through nginx.
    const twoHundred = Array.from({ length: 200 }, () => hang.job_id).join(',');
    expect(`GET /events?jobs=${twoHundred} HTTP/1.1`.length).toBeGreaterThan(7_000);
    const stream = await openEventStream(nginx.url(`/events?jobs=${twoHundred}`), auth());
    expect(stream.response.status).toBe(200);
    await stream.waitFor(() => stream.records.some((record) => record.status === 'running'), 'running');

    const tooMany = await fetch(nginx.url(`/events?jobs=${twoHundred},${hang.job_id}`), { headers: auth() });
    expect(tooMany.status).toBe(400);
    expect(await tooMany.json()).toMatchObject({ code: 'too_many_jobs', max_jobs: 200 });

    await api.request(`/jobs/${hang.job_id}/cancel`, { method: 'POST' });
    await stream.ended;
    expect(stream.records.map((record) => record.status).at(-1)).toBe('canceled');
    expect(new Set(stream.records.map((record) => record.job_id))).toEqual(new Set([hang.job_id]));
  });

  it(`getEvents: a stream of many jobs takes one of the key's ${PER_KEY} places, as a stream of one does`, async () => {
    const jobs = await Promise.all(
      ['a', 'b', 'c', 'd'].map((name) => api.submit(media.url(`/hang.wav?places-${name}`))),
    );
    const many = `${api.baseUrl}/events?jobs=${jobs.map((job) => job.job_id).join(',')}`;
    const held = await Promise.all(Array.from({ length: PER_KEY }, () => openEventStream(many, auth(OTHER_KEY))));
    expect(held.map((stream) => stream.response.status)).toEqual(Array(PER_KEY).fill(200));
    const refused = await fetch(many, { headers: auth(OTHER_KEY) });
    expect(refused.status).toBe(429);
    expect(await refused.json()).toMatchObject({ code: 'too_many_event_streams', limit: 'per_key' });
    const metrics = await api.request('/metrics');
    expect(await metrics.text()).toMatch(new RegExp(`^source_fetch_event_streams ${PER_KEY}$`, 'm'));
    await Promise.all(held.map((stream) => stream.close()));
    await Promise.all(jobs.map((job) => api.request(`/jobs/${job.job_id}/cancel`, { method: 'POST' })));
  });

  it('nginx with TLS and HTTP/2 (docs/operations.md): eight job streams and a getJob share one connection, the getJob answered while all eight stream', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'sf-h2-'));
    const tls = await writeSelfSignedCertificate(dir, '127.0.0.1');
    // The worker node: its limits take eight streams of one key.
    const h2 = await startNginx({ appPort: worker.port, artifactRoot: sharedRoot, tls });
    let session: ClientHttp2Session | undefined;
    try {
      const jobs = await Promise.all(Array.from({ length: 8 }, (_, i) => api.submit(media.url(`/hang.wav?h2=${i}`))));
      session = connect(h2.url(''), { rejectUnauthorized: false });
      const ask = (path: string) => session!.request({ ':path': path, ...auth() });
      // Each stream open until its first event has come.
      const streams = await Promise.all(
        jobs.map(
          (job) =>
            new Promise<{ status: number; close: () => void }>((resolve, reject) => {
              const request = ask(`/jobs/${job.job_id}/events`);
              let status = 0;
              request.on('response', (headers) => (status = Number(headers[':status'])));
              request.setEncoding('utf8');
              request.on('data', (chunk: string) => {
                if (chunk.includes('event: job')) resolve({ status, close: () => request.close() });
              });
              request.on('error', reject);
            }),
        ),
      );
      expect(streams.map((stream) => stream.status)).toEqual(Array(8).fill(200));
      const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const request = ask(`/jobs/${jobs[0]!.job_id}`);
        let status = 0;
        let body = '';
        request.on('response', (headers) => (status = Number(headers[':status'])));
        request.setEncoding('utf8');
        request.on('data', (chunk: string) => (body += chunk));
        request.on('end', () => resolve({ status, body }));
        request.on('error', reject);
      });
      expect(answer.status).toBe(200);
      expect((JSON.parse(answer.body) as { job_id: string }).job_id).toBe(jobs[0]!.job_id);
      // One session is one connection: nginx spoke HTTP/2 on it.
      expect(session.alpnProtocol).toBe('h2');
      for (const stream of streams) stream.close();
      await Promise.all(jobs.map((job) => api.request(`/jobs/${job.job_id}/cancel`, { method: 'POST' })));
    } finally {
      session?.close();
      await h2.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
