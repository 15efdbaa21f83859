import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type ServiceHandle } from '../support/service.js';

/** Metrics by route template, and logs with request ids and without secrets. */
let svc: ServiceHandle;

beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => {
  await svc?.stop();
});

async function series(prefix: string): Promise<string[]> {
  const res = await svc.request('/metrics');
  expect(res.status).toBe(200);
  return (await res.text()).split('\n').filter((line) => line.startsWith(prefix));
}

describe('metrics', () => {
  it('need the API key', async () => {
    const res = await svc.request('/metrics', { auth: false });
    expect(res.status).toBe(401);
  });

  it('count requests by route template, so 1,000 distinct ids and cids add no series', async () => {
    const cid = () => randomBytes(32).toString('hex');
    await svc.request(`/jobs/${randomBytes(8).toString('hex')}`);
    await svc.request(`/artifacts/${cid()}/audio.wav`);
    await svc.request(`/nowhere/${randomBytes(8).toString('hex')}`);
    await series('http_requests_total{'); // the scrape counts itself from the next scrape on
    const before = await series('http_requests_total{');
    const histogramBefore = await series('http_request_duration_seconds_bucket{');

    for (let i = 0; i < 1000; i += 50) {
      await Promise.all(
        Array.from({ length: 50 }, (_, j) =>
          (j % 3 === 0
            ? svc.request(`/jobs/${randomBytes(8).toString('hex')}`)
            : j % 3 === 1
              ? svc.request(`/artifacts/${cid()}/audio.wav`)
              : svc.request(`/nowhere/${randomBytes(8).toString('hex')}`)
          ).then((res) => res.arrayBuffer()),
        ),
      );
    }

    const after = await series('http_requests_total{');
    expect(after.map((line) => line.replace(/ \d+$/, ''))).toEqual(before.map((line) => line.replace(/ \d+$/, '')));
    expect((await series('http_request_duration_seconds_bucket{')).length).toBe(histogramBefore.length);
    expect(after).toContainEqual(expect.stringMatching(/^http_requests_total\{method="GET",route="\/jobs\/\{id\}",status="404"\} \d+$/));
    expect(after).toContainEqual(expect.stringMatching(/route="\/artifacts\/\{cid\}\/\{name\}"/));
    expect(after).toContainEqual(expect.stringMatching(/route="unmatched"/));
    expect(after.join('\n')).not.toMatch(/[0-9a-f]{64}/);
  });

  it('expose the job, store and worker gauges', async () => {
    const names = (await (await svc.request('/metrics')).text()).split('\n').filter((line) => line.startsWith('# TYPE')).map((line) => line.split(' ')[2]);
    expect(names).toEqual(
      expect.arrayContaining([
        'jobs_finished_total',
        'job_duration_seconds',
        'downloaded_bytes_total',
        'store_bytes',
        'store_artifacts',
        'store_evictions_total',
        'jobs_queued',
        'workers_busy',
        'downloader_present',
      ]),
    );
    expect(await series('downloader_present ')).toEqual(['downloader_present 1']);
  });
});

describe('logs', () => {
  it('take a well-formed X-Request-Id, make one otherwise, return it, and stamp it on the request line', async () => {
    const given = await svc.request('/jobs/abc', { headers: { 'x-request-id': 'client-chosen-id-42' } });
    expect(given.headers.get('x-request-id')).toBe('client-chosen-id-42');
    const bad = await svc.request('/jobs/abc', { headers: { 'x-request-id': 'spaces and "quotes"' } });
    const made = bad.headers.get('x-request-id')!;
    expect(made).toMatch(/^[0-9a-f-]{36}$/);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const line = svc.logs.find((entry) => entry.msg === 'request' && entry.request_id === 'client-chosen-id-42');
    expect(line).toMatchObject({ method: 'GET', route: '/jobs/{id}', status: 404, latency_ms: expect.any(Number) });
    expect(svc.logs.some((entry) => entry.request_id === made)).toBe(true);
  });

  it('never contain API keys or URL signatures', async () => {
    await svc.request(`/artifacts/${'a'.repeat(64)}/audio.wav?expires=9999999999&sig=SECRET-SIGNATURE-VALUE`, { auth: false });
    await svc.request('/jobs/x', { auth: false, headers: { 'x-api-key': 'KEY-THAT-MUST-NOT-BE-LOGGED' } });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const output = svc.output();
    expect(output).toContain('"route":"/artifacts/{cid}/{name}"');
    expect(output).not.toContain(svc.apiKey);
    expect(output).not.toContain('SECRET-SIGNATURE-VALUE');
    expect(output).not.toContain('KEY-THAT-MUST-NOT-BE-LOGGED');
  });
});
