import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type LogLine, type ServiceHandle } from '../support/service.js';

/** Metrics by route template, and logs with request ids and without secrets. */
let svc: ServiceHandle;
let media: MediaServer;
let toneBytes: number;

beforeAll(async () => {
  media = await startMediaServer();
  const tone = await makeTone(path.join(tmpdir(), 'source-fetch-fixtures'), {
    seconds: 3,
    channels: 2,
    sampleRate: 48000,
    format: 'm4a',
  });
  toneBytes = (await stat(tone.path)).size;
  media.serveFile('/metrics-tone.m4a', tone.path, { contentType: 'audio/mp4' });
  media.serveFile('/metrics-slow.m4a', tone.path, {
    contentType: 'audio/mp4',
    throttleBytesPerSec: Math.ceil(toneBytes / 4),
  });
  // The request-series test sends 2,000 requests with one key: no rate limit here.
  svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, RATE_LIMIT_PER_MINUTE: '0' } });
});
afterAll(async () => {
  await svc?.stop();
  await media?.close();
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
    await series('source_fetch_http_requests_total{'); // the scrape counts itself from the next scrape on
    const before = await series('source_fetch_http_requests_total{');
    const histogramBefore = await series('source_fetch_http_request_duration_seconds_bucket{');

    // 1,000 distinct job ids, 1,000 distinct content ids and 100 unmatched paths.
    const paths = [
      ...Array.from({ length: 1000 }, () => `/jobs/${randomBytes(8).toString('hex')}`),
      ...Array.from({ length: 1000 }, () => `/artifacts/${cid()}/audio.wav`),
      ...Array.from({ length: 100 }, () => `/nowhere/${randomBytes(8).toString('hex')}`),
    ];
    for (let i = 0; i < paths.length; i += 50) {
      await Promise.all(paths.slice(i, i + 50).map((p) => svc.request(p).then((res) => res.arrayBuffer())));
    }

    const after = await series('source_fetch_http_requests_total{');
    expect(after.map((line) => line.replace(/ \d+$/, ''))).toEqual(before.map((line) => line.replace(/ \d+$/, '')));
    expect((await series('source_fetch_http_request_duration_seconds_bucket{')).length).toBe(histogramBefore.length);
    expect(after).toContainEqual(
      expect.stringMatching(
        /^source_fetch_http_requests_total\{method="GET",route="\/jobs\/\{id\}",status="404"\} \d+$/,
      ),
    );
    expect(after).toContainEqual(expect.stringMatching(/route="\/artifacts\/\{cid\}\/\{name\}"/));
    expect(after).toContainEqual(expect.stringMatching(/route="unmatched"/));
    expect(after.join('\n')).not.toMatch(/[0-9a-f]{64}/);
  });

  it('count jobs by final status, their duration, downloaded bytes, queue depth and busy workers', async () => {
    const value = async (line: string) => Number((await series(`${line} `))[0]?.split(' ').pop() ?? 0);
    const doneBefore = await value('source_fetch_jobs_finished_total{status="done",born_done="false"}');
    const bornDoneBefore = await value('source_fetch_jobs_finished_total{status="done",born_done="true"}');
    const failedBefore = await value('source_fetch_job_failures_total{code="http_not_found"}');
    const bytesBefore = await value('source_fetch_downloaded_bytes_total');
    const durationsBefore = await value('source_fetch_job_duration_seconds_count{status="done"}');

    // A throttled download (about 4 s) keeps one worker busy; a second job waits behind nothing.
    const slow = await svc.submit(media.url('/metrics-slow.m4a'));
    await svc.waitForJob(slow.job_id, ['running']);
    // The job reads 'running' as soon as its claim is written; the worker counts as busy once the
    // claim is durable (its WAL synced), which on a loaded machine can come a little later.
    await expect.poll(() => value('source_fetch_workers_busy'), { timeout: 10_000 }).toBe(1);
    expect((await svc.getJob(slow.job_id)).status).toBe('running');
    expect(await value('source_fetch_jobs_queued')).toBe(0);
    expect((await svc.waitForJob(slow.job_id, ['done', 'failed'])).status).toBe('done');

    const fast = await svc.submit(media.url('/metrics-tone.m4a'));
    expect((await svc.waitForJob(fast.job_id, ['done', 'failed'])).status).toBe('done');
    expect((await svc.submit(media.url('/metrics-tone.m4a'))).born_done).toBe(true);
    const missing = await svc.submit(media.url('/metrics-missing.m4a'));
    expect((await svc.waitForJob(missing.job_id, ['done', 'failed'])).error?.code).toBe('http_not_found');

    expect(await value('source_fetch_jobs_finished_total{status="done",born_done="false"}')).toBe(doneBefore + 2);
    expect(await value('source_fetch_jobs_finished_total{status="done",born_done="true"}')).toBe(bornDoneBefore + 1);
    expect(await value('source_fetch_job_failures_total{code="http_not_found"}')).toBe(failedBefore + 1);
    expect(await value('source_fetch_job_duration_seconds_count{status="done"}')).toBe(durationsBefore + 2);
    expect(await value('source_fetch_downloaded_bytes_total')).toBe(bytesBefore + 2 * toneBytes);
    // Likewise a worker is free only once its job's end is durable and its runner has returned.
    await expect.poll(() => value('source_fetch_workers_busy'), { timeout: 10_000 }).toBe(0);
    expect(await value('source_fetch_jobs_queued')).toBe(0);
    expect(await value('source_fetch_store_artifacts')).toBeGreaterThanOrEqual(1);
    expect(await series('source_fetch_downloader_present ')).toEqual(['source_fetch_downloader_present 1']);
  });

  it("carry the service's prefix, and the process and Node.js metrics their standard names", async () => {
    const res = await svc.request('/metrics');
    expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    const text = await res.text();
    const families = [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map(([, name, type]) => ({
      name: name!,
      type: type!,
    }));
    expect(families.length).toBeGreaterThan(20);
    // prom-client's own, as every Node.js service exports them (process_*, nodejs_*)...
    const standard = families.filter((family) => !family.name.startsWith('source_fetch_'));
    expect(standard.filter((family) => !/^(process|nodejs)_/.test(family.name))).toEqual([]);
    expect(families).toEqual(
      expect.arrayContaining([
        { name: 'process_cpu_seconds_total', type: 'counter' },
        { name: 'process_resident_memory_bytes', type: 'gauge' },
        { name: 'process_open_fds', type: 'gauge' },
        { name: 'nodejs_eventloop_lag_seconds', type: 'gauge' },
        { name: 'nodejs_eventloop_lag_p99_seconds', type: 'gauge' },
        { name: 'nodejs_gc_duration_seconds', type: 'histogram' },
      ]),
    );
    // ...none of them also under the prefix...
    expect(families.filter((family) => /^source_fetch_(process|nodejs)_/.test(family.name))).toEqual([]);
    // ...and the service's own under it.
    const own = families.filter((family) => family.name.startsWith('source_fetch_')).map((family) => family.name);
    expect(own).toEqual(
      expect.arrayContaining([
        'source_fetch_http_requests_total',
        'source_fetch_jobs_queued',
        'source_fetch_callback_attempts_total',
      ]),
    );
    const samples = text.split('\n').filter((line) => line !== '' && !line.startsWith('#'));
    expect(samples.filter((line) => !/^(source_fetch|process|nodejs)_/.test(line))).toEqual([]);
    expect(
      Number(samples.find((line) => line.startsWith('process_resident_memory_bytes '))?.split(' ')[1]),
    ).toBeGreaterThan(1_000_000);
  });

  it('pass promtool check metrics (control: promtool flags a gauge named like a counter)', async () => {
    const text = await (await svc.request('/metrics')).text();
    // After the jobs above, the histograms and labelled counters have series to check.
    expect(text).toMatch(/^source_fetch_job_duration_seconds_bucket\{/m);
    expect(await promtoolCheckMetrics(text)).toEqual({ code: 0, output: '' });

    const bad = `${text}# HELP source_fetch_things_total A gauge.\n# TYPE source_fetch_things_total gauge\nsource_fetch_things_total 1\n`;
    const refused = await promtoolCheckMetrics(bad);
    expect(refused.code).not.toBe(0);
    expect(refused.output).toContain('source_fetch_things_total');
  });
});

/** `promtool check metrics` (Debian's prometheus package) on a scrape: its exit code and output. */
async function promtoolCheckMetrics(text: string): Promise<{ code: number | null; output: string }> {
  const child = spawn('promtool', ['check', 'metrics'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stdin.end(text);
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, output };
}

/** The first log line that matches, once the service has written it. */
async function logLine(matches: (line: LogLine) => boolean, timeoutMs = 5_000): Promise<LogLine> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const line = svc.logs.find(matches);
    if (line) return line;
    if (Date.now() > deadline) throw new Error('no such log line');
    await sleep(20);
  }
}

describe('logs', () => {
  it('take a well-formed X-Request-Id, make one otherwise, return it, and stamp it on the request line', async () => {
    const given = await svc.request('/jobs/abc', { headers: { 'x-request-id': 'client-chosen-id-42' } });
    expect(given.headers.get('x-request-id')).toBe('client-chosen-id-42');
    const bad = await svc.request('/jobs/abc', { headers: { 'x-request-id': 'spaces and "quotes"' } });
    const made = bad.headers.get('x-request-id')!;
    expect(made).toMatch(/^[0-9a-f-]{36}$/);
    const line = await logLine((entry) => entry.msg === 'request' && entry.request_id === 'client-chosen-id-42');
    expect(line).toMatchObject({ method: 'GET', route: '/jobs/{id}', status: 404, latency_ms: expect.any(Number) });
    expect(await logLine((entry) => entry.request_id === made)).toMatchObject({ msg: 'request', status: 404 });
  });

  it('tie every line of a job to it and to the request that submitted it; request lines name their job', async () => {
    const submitted = await svc.request('/sources', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': 'submit-request-7' },
      body: JSON.stringify({ url: media.url('/metrics-tone.m4a?logs') }),
    });
    expect(submitted.status).toBe(202);
    const { job_id: jobId } = (await submitted.json()) as { job_id: string };
    expect((await svc.waitForJob(jobId, ['done', 'failed'])).status).toBe('done');
    expect((await svc.request(`/jobs/${jobId}`, { headers: { 'x-request-id': 'poll-request-8' } })).status).toBe(200);
    await logLine((line) => line.msg === 'request' && line.request_id === 'poll-request-8');

    const lines = svc.logs.filter((line) => line.job_id === jobId);
    // The submission's line says what became of it.
    expect(lines.find((line) => line.msg === 'request' && line.request_id === 'submit-request-7')).toMatchObject({
      route: '/sources',
      status: 202,
      job_status: 'queued',
      born_done: false,
      callback: false,
    });
    expect(lines.find((line) => line.msg === 'request' && line.request_id === 'poll-request-8')).toMatchObject({
      route: '/jobs/{id}',
      status: 200,
    });
    // The worker's own lines carry the submission's request id.
    const workerLines = lines.filter((line) => line.msg !== 'request');
    expect(workerLines.map((line) => line.msg)).toContain('job done');
    for (const line of workerLines) expect(line.request_id).toBe('submit-request-7');
    // No line that names the job lacks a request id.
    expect(lines.filter((line) => typeof line.request_id !== 'string')).toEqual([]);
  });

  it('never contain API keys or URL signatures', async () => {
    await svc.request(`/artifacts/${'a'.repeat(64)}/audio.wav?expires=9999999999&sig=SECRET-SIGNATURE-VALUE`, {
      auth: false,
      headers: { 'x-request-id': 'signature-probe' },
    });
    await svc.request('/jobs/x', {
      auth: false,
      headers: { 'x-api-key': 'KEY-THAT-MUST-NOT-BE-LOGGED', 'x-request-id': 'key-probe' },
    });
    await logLine((line) => line.msg === 'request' && line.request_id === 'signature-probe');
    await logLine((line) => line.msg === 'request' && line.request_id === 'key-probe');
    const output = svc.output();
    expect(output).toContain('"route":"/artifacts/{cid}/{name}"');
    expect(output).not.toContain(svc.apiKey);
    expect(output).not.toContain('SECRET-SIGNATURE-VALUE');
    expect(output).not.toContain('KEY-THAT-MUST-NOT-BE-LOGGED');
  });
});
