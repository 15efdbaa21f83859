/**
 * The job lane in the built service: getJob answered before the Hono app (src/http/job-lane.ts)
 * must answer exactly as the app does and leave the same traces. A query string sends the same
 * request to the app (the lane takes none; getJob reads none), which gives the comparison.
 * What the lane takes and hands over is tested in test/unit/job-lane.test.ts.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { METRIC_PREFIX } from '../../src/metrics.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { rawRequest, type RawResponse } from '../support/raw-http.js';
import { startService, type ServiceHandle } from '../support/service.js';

/** Headers that differ between any two answers. */
const PER_ANSWER = ['date', 'x-request-id'];
const headersOf = (res: RawResponse) => Object.fromEntries([...res.headers].filter(([name]) => !PER_ANSWER.includes(name)));
const bodyOf = (res: RawResponse) => res.raw.subarray(res.raw.length - res.bodyBytes).toString('utf8');

describe('the job lane in the service', () => {
  let media: MediaServer;
  let svc: ServiceHandle;
  let jobId: string;

  beforeAll(async () => {
    media = await startMediaServer();
    const tone = await makeTone(path.join(process.env.TMPDIR ?? '/tmp', 'source-fetch-fixtures'), { seconds: 2, channels: 2, sampleRate: 44100, format: 'flac' });
    media.serveFile('/job-lane.flac', tone.path, { contentType: 'audio/flac' });
    svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, RATE_LIMIT_PER_MINUTE: '0' } });
    jobId = (await svc.submit(media.url('/job-lane.flac'))).job_id;
    expect((await svc.waitForJob(jobId, ['done', 'failed'])).status).toBe('done');
  });

  afterAll(async () => {
    await svc?.stop();
    await media?.close();
  });

  const auth = (): Record<string, string> => ({ authorization: `Bearer ${svc.apiKey}` });
  const requestLine = (requestId: string) => svc.logs.find((line) => line.msg === 'request' && line.request_id === requestId);

  it("answers a done job's record with the app's status, headers and body", async () => {
    // Signed URLs expire a TTL after the second they are made in: asked again until both answers fall in one second.
    let viaLane: RawResponse | undefined;
    let viaApp: RawResponse | undefined;
    for (let attempt = 0; attempt < 5; attempt++) {
      viaLane = await rawRequest(svc.port, 'GET', `/jobs/${jobId}`, { ...auth(), 'x-request-id': `lane-${attempt}` });
      viaApp = await rawRequest(svc.port, 'GET', `/jobs/${jobId}?via=app`, { ...auth(), 'x-request-id': `app-${attempt}` });
      if (bodyOf(viaLane) === bodyOf(viaApp)) break;
    }
    expect(viaLane!.status).toBe(200);
    expect(headersOf(viaLane!)).toEqual(headersOf(viaApp!));
    expect(viaLane!.headers.get('content-type')).toBe('application/json');
    expect(bodyOf(viaLane!)).toBe(bodyOf(viaApp!));
    const record = JSON.parse(bodyOf(viaLane!)) as { job_id: string; status: string; result: { artifacts: Array<{ signed_url: string }> } };
    expect(record).toMatchObject({ job_id: jobId, status: 'done' });
    expect(record.result.artifacts[0]!.signed_url).toMatch(/\?expires=\d+&sig=[\w-]{43}$/);
  });

  it('leaves the same access-log line and request metrics as the app', async () => {
    const series = async () =>
      (await (await svc.request('/metrics')).text()).split('\n').find((line) => line.startsWith(`${METRIC_PREFIX}http_requests_total{method="GET",route="/jobs/{id}",status="200"}`));
    const before = Number((await series())?.split(' ')[1] ?? 0);
    await rawRequest(svc.port, 'GET', `/jobs/${jobId}`, { ...auth(), 'x-request-id': 'lane-logged' });
    await rawRequest(svc.port, 'GET', `/jobs/${jobId}?via=app`, { ...auth(), 'x-request-id': 'app-logged' });
    await expect.poll(() => requestLine('lane-logged') && requestLine('app-logged')).toBeTruthy();
    const expected = { method: 'GET', route: '/jobs/{id}', status: 200, job_id: jobId };
    expect(requestLine('lane-logged')).toMatchObject(expected);
    expect(requestLine('app-logged')).toMatchObject(expected);
    const shape = (line: Record<string, unknown>) => Object.keys(line).filter((key) => key !== 'time').sort();
    expect(shape(requestLine('lane-logged')!)).toEqual(shape(requestLine('app-logged')!));
    expect(Number((await series())?.split(' ')[1])).toBe(before + 2);
  });

  const refusals: Array<[string, () => string, () => Record<string, string>, number, string]> = [
    ['no such job', () => '/jobs/00000000-0000-0000-0000-000000000000', auth, 404, 'job_not_found'],
    ['no key', () => `/jobs/${jobId}`, () => ({}), 401, 'unauthorized'],
    ['a wrong key', () => `/jobs/${jobId}`, () => ({ 'x-api-key': 'not-a-key' }), 401, 'unauthorized'],
  ];
  it.each(refusals)('answers %s as the app does, with a problem document', async (_label, target, headers, status, code) => {
    const viaLane = await rawRequest(svc.port, 'GET', target(), headers());
    const viaApp = await rawRequest(svc.port, 'GET', `${target()}?via=app`, headers());
    expect([viaLane.status, viaApp.status]).toEqual([status, status]);
    expect(headersOf(viaLane)).toEqual(headersOf(viaApp));
    const problem = JSON.parse(bodyOf(viaLane)) as { code: string; request_id: string };
    expect(problem.code).toBe(code);
    expect(problem.request_id).toBe(viaLane.headers.get('x-request-id'));
  });
});

describe('the job lane and the rate limit', () => {
  const BURST = 20;
  let svc: ServiceHandle;

  beforeAll(async () => {
    // One token a minute: the burst is all a key has during the test. No workers: the job stays queued.
    svc = await startService({ env: { RATE_LIMIT_PER_MINUTE: '1', RATE_LIMIT_BURST: String(BURST), WORKER_CONCURRENCY: '0', FETCH_ALLOW_HOSTS: '127.0.0.1:9' } });
  });

  afterAll(async () => {
    await svc?.stop();
  });

  it('counts every request once, whether the lane answers it, hands it to the app or leaves it to the app', async () => {
    const jobId = (await svc.submit('http://127.0.0.1:9/queued.m4a')).job_id;
    const targets = [`/jobs/${jobId}`, '/jobs/00000000-0000-0000-0000-000000000000', `/jobs/${jobId}?via=app`];
    const statuses: number[] = [];
    // The submission took one token; the last request finds the bucket empty.
    for (let i = 1; i <= BURST; i++) statuses.push((await svc.request(targets[i % 3]!)).status);
    expect(statuses.slice(0, -1)).toEqual(Array.from({ length: BURST - 1 }, (_, i) => ((i + 1) % 3 === 1 ? 404 : 200)));
    const refused = await svc.request(`/jobs/${jobId}`);
    expect(statuses.at(-1)).toBe(429);
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { code: string }).code).toBe('rate_limited');
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
  });
});
