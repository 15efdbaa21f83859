/**
 * The submit lane in the built service: submitSource answered before the Hono app
 * (src/http/submit-lane.ts) must answer as the app does and leave the same traces. A query string
 * sends the same request to the app (the lane takes none; submitSource reads none), which gives
 * the comparison. No address off this machine is contacted: the refused URL stops at the policy
 * (an IP literal in a private range), and the media server is on loopback.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { METRIC_PREFIX } from '../../src/metrics.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type ServiceHandle } from '../support/service.js';

/** Headers that differ between any two answers (Location and the length: a new job's id, its times). */
const PER_ANSWER = ['date', 'x-request-id', 'location', 'content-length'];
const headersOf = (res: Response) => Object.fromEntries([...res.headers].filter(([name]) => !PER_ANSWER.includes(name)));

/** A record with what differs between two jobs of one URL taken out. */
function comparable(record: Record<string, unknown>): unknown {
  const { job_id: _id, created_at: _c, started_at: _s, finished_at: _f, ...rest } = record;
  const result = rest.result as { artifacts: Array<Record<string, unknown>> } | null;
  return {
    ...rest,
    result: result && { ...result, artifacts: result.artifacts.map(({ signed_url: _u, signed_url_expires_at: _e, ...artifact }) => artifact) },
  };
}

describe('the submit lane in the service', () => {
  let media: MediaServer;
  let svc: ServiceHandle;
  let stored: string;

  beforeAll(async () => {
    media = await startMediaServer();
    const tone = await makeTone(path.join(process.env.TMPDIR ?? '/tmp', 'source-fetch-fixtures'), { seconds: 2, channels: 2, sampleRate: 44100, format: 'flac' });
    media.serveFile('/submit-lane.flac', tone.path, { contentType: 'audio/flac' });
    media.serveFile('/submit-lane-queued.flac', tone.path, { contentType: 'audio/flac' });
    svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, RATE_LIMIT_PER_MINUTE: '0' } });
    stored = media.url('/submit-lane.flac');
    const first = await svc.submit(stored);
    expect((await svc.waitForJob(first.job_id, ['done', 'failed'])).status).toBe('done');
  });

  afterAll(async () => {
    await svc?.stop();
    await media?.close();
  });

  const post = (target: string, body: string, headers: Record<string, string> = {}, auth = true) =>
    svc.request(target, { method: 'POST', auth, headers: { 'content-type': 'application/json', ...headers }, body });
  const requestLine = (requestId: string) => svc.logs.find((line) => line.msg === 'request' && line.request_id === requestId);

  it("answers a born-done submission with the app's status, headers and record, and the same traces", async () => {
    const series = async () =>
      (await (await svc.request('/metrics')).text()).split('\n').find((line) => line.startsWith(`${METRIC_PREFIX}http_requests_total{method="POST",route="/sources",status="202"}`));
    const before = Number((await series())?.split(' ')[1] ?? 0);
    const body = JSON.stringify({ url: stored });
    const viaLane = await post('/sources', body, { 'x-request-id': 'lane-born-done' });
    const viaApp = await post('/sources?via=app', body, { 'x-request-id': 'app-born-done' });
    expect([viaLane.status, viaApp.status]).toEqual([202, 202]);
    expect(headersOf(viaLane)).toEqual(headersOf(viaApp));
    expect(viaLane.headers.get('content-type')).toBe('application/json');
    const [lane, app] = [(await viaLane.json()) as Record<string, unknown>, (await viaApp.json()) as Record<string, unknown>];
    expect(lane).toMatchObject({ status: 'done', born_done: true });
    expect(comparable(lane)).toEqual(comparable(app));
    expect(viaLane.headers.get('location')).toBe(`/jobs/${lane.job_id as string}`);
    expect((await svc.getJob(lane.job_id as string)).status).toBe('done');

    await expect.poll(() => requestLine('lane-born-done') && requestLine('app-born-done')).toBeTruthy();
    const expected = { method: 'POST', route: '/sources', status: 202, job_status: 'done', born_done: true, callback: false };
    expect(requestLine('lane-born-done')).toMatchObject({ ...expected, job_id: lane.job_id });
    expect(requestLine('app-born-done')).toMatchObject({ ...expected, job_id: app.job_id });
    const shape = (line: Record<string, unknown>) => Object.keys(line).filter((key) => key !== 'time').sort();
    expect(shape(requestLine('lane-born-done')!)).toEqual(shape(requestLine('app-born-done')!));
    expect(Number((await series())?.split(' ')[1])).toBe(before + 2);
  });

  it('queues a new URL, the second submission following the first, as the app does', async () => {
    const body = JSON.stringify({ url: media.url('/submit-lane-queued.flac') });
    const viaLane = await post('/sources', body);
    const viaApp = await post('/sources?via=app', body);
    expect([viaLane.status, viaApp.status]).toEqual([202, 202]);
    expect(headersOf(viaLane)).toEqual(headersOf(viaApp));
    const [lane, app] = [(await viaLane.json()) as { job_id: string; born_done: boolean }, (await viaApp.json()) as { job_id: string }];
    expect(lane.born_done).toBe(false);
    expect((await svc.waitForJob(lane.job_id, ['done', 'failed'])).status).toBe('done');
    expect((await svc.waitForJob(app.job_id, ['done', 'failed'])).status).toBe('done');
  });

  const refusals: Array<[string, string, Record<string, string>, boolean, number, string]> = [
    ['a refused destination', JSON.stringify({ url: 'http://10.0.0.1/a.mp3' }), {}, true, 422, 'address_private'],
    ['a body that is not JSON (handed to the app, read)', '{"url": ', {}, true, 400, 'invalid_json'],
    ['a body that is not a submission (handed to the app, read)', JSON.stringify({ url: 5 }), {}, true, 400, 'validation_failed'],
    ['a body that is not declared JSON', JSON.stringify({ url: 'http://10.0.0.1/a.mp3' }), { 'content-type': 'text/plain' }, true, 415, 'unsupported_media_type'],
    ['no key', JSON.stringify({ url: 'http://10.0.0.1/a.mp3' }), {}, false, 401, 'unauthorized'],
  ];
  it.each(refusals)('answers %s as the app does, with a problem document', async (_label, body, headers, auth, status, code) => {
    const viaLane = await post('/sources', body, headers, auth);
    const viaApp = await post('/sources?via=app', body, headers, auth);
    expect([viaLane.status, viaApp.status]).toEqual([status, status]);
    expect(headersOf(viaLane)).toEqual(headersOf(viaApp));
    const [lane, app] = [(await viaLane.json()) as Record<string, unknown>, (await viaApp.json()) as Record<string, unknown>];
    expect(lane.code).toBe(code);
    expect(lane.request_id).toBe(viaLane.headers.get('x-request-id'));
    expect({ ...lane, request_id: undefined }).toEqual({ ...app, request_id: undefined });
  });
});

describe('the submit lane and the rate limit', () => {
  const BURST = 12;
  let svc: ServiceHandle;

  beforeAll(async () => {
    // One token a minute: the burst is all a key has during the test. No workers: jobs stay queued.
    svc = await startService({ env: { RATE_LIMIT_PER_MINUTE: '1', RATE_LIMIT_BURST: String(BURST), WORKER_CONCURRENCY: '0', FETCH_ALLOW_HOSTS: '127.0.0.1:9' } });
  });

  afterAll(async () => {
    await svc?.stop();
  });

  it('counts every submission once, whether the lane answers it, hands it to the app or leaves it to the app', async () => {
    const submit = (i: number) => {
      const body = i % 3 === 2 ? '{"url": ' : JSON.stringify({ url: `http://127.0.0.1:9/rate-${i}.m4a` });
      return svc.request(i % 3 === 1 ? '/sources?via=app' : '/sources', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    };
    const statuses: number[] = [];
    for (let i = 0; i < BURST; i++) statuses.push((await submit(i)).status);
    expect(statuses).toEqual(Array.from({ length: BURST }, (_, i) => (i % 3 === 2 ? 400 : 202)));
    const refused = await submit(0);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { code: string }).code).toBe('rate_limited');
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
  });
});
