import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeOfflineTools, type OfflineTools } from '../support/offline-tools.js';
import { ROOT, startService, type ServiceHandle } from '../support/service.js';

/**
 * The HTTP contract: authentication, input validation, problem documents, the address policy at
 * submission. This file submits addresses off this machine (169.254.169.254, 10.0.0.1,
 * example.org...) that must be refused before any job exists. The service therefore runs with
 * stand-in tools that never touch the network (test/support/offline-tools.ts): were the policy to
 * regress and let such a job run, neither the worker nor the egress guard could connect anywhere,
 * because no downloader would ever ask the guard for anything.
 */
let svc: ServiceHandle;
let toolsDir: string;
let tools: OfflineTools;

beforeAll(async () => {
  toolsDir = await mkdtemp(path.join(tmpdir(), 'api-offline-tools-'));
  tools = await writeOfflineTools(toolsDir);
  svc = await startService({ env: { ...tools.env } });
});
afterAll(async () => {
  await svc?.stop();
  if (toolsDir) await rm(toolsDir, { recursive: true, force: true });
});

async function problem(res: Response): Promise<{ status: number; code: string; detail: string; [k: string]: unknown }> {
  expect(res.headers.get('content-type')).toContain('application/problem+json');
  return (await res.json()) as { status: number; code: string; detail: string };
}

function post(body: string, headers: Record<string, string> = { 'content-type': 'application/json' }) {
  return svc.request('/sources', { method: 'POST', headers, body });
}

describe('authentication', () => {
  it('refuses requests without a key, with a wrong key, and accepts both header forms', async () => {
    const none = await svc.request('/jobs/x', { auth: false });
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Bearer');
    const noneBody = await problem(none);
    expect(noneBody.code).toBe('unauthorized');

    const wrong = await svc.request('/jobs/x', { headers: { authorization: `Bearer ${svc.apiKey}x` } });
    expect(wrong.status).toBe(401);
    const wrongBody = await problem(wrong);
    expect(wrongBody.detail).toBe(noneBody.detail);

    const wrongHeader = await svc.request('/jobs/x', {
      auth: false,
      headers: { 'x-api-key': 'not-the-key-at-all-123' },
    });
    expect(wrongHeader.status).toBe(401);

    const viaHeader = await svc.request('/jobs/x', { auth: false, headers: { 'x-api-key': svc.apiKey } });
    expect(viaHeader.status).toBe(404);
    const viaBearer = await svc.request('/jobs/x');
    expect(viaBearer.status).toBe(404);
    expect((await problem(viaBearer)).code).toBe('job_not_found');
  });

  it('accepts several keys at once (rotation)', async () => {
    const rotating = await startService({
      apiKey: 'first-key-0123456789,second-key-0123456789',
      env: { ...tools.env },
    });
    try {
      for (const key of ['first-key-0123456789', 'second-key-0123456789']) {
        const res = await rotating.request('/jobs/x', { headers: { authorization: `Bearer ${key}` } });
        expect(res.status).toBe(404);
      }
    } finally {
      await rotating.stop();
    }
  });

  it('never writes a key to the log', async () => {
    await svc.request('/jobs/x', { headers: { authorization: 'Bearer wrong-key-that-must-not-be-logged' } });
    expect(svc.output()).not.toContain(svc.apiKey);
    expect(svc.output()).not.toContain('wrong-key-that-must-not-be-logged');
  });

  it('leaves the health check open', async () => {
    const res = await svc.request('/healthz', { auth: false });
    expect([200, 503]).toContain(res.status);
  });
});

describe('submitSource input', () => {
  it('answers 415 for a body that is not JSON', async () => {
    const res = await post('url=http://example.org/', { 'content-type': 'application/x-www-form-urlencoded' });
    expect(res.status).toBe(415);
    expect((await problem(res)).code).toBe('unsupported_media_type');
  });

  it('answers 400 for malformed JSON and for a missing or mistyped url', async () => {
    expect((await problem(await post('{"url": '))).code).toBe('invalid_json');
    const missing = await problem(await post('{}'));
    expect(missing.code).toBe('validation_failed');
    expect(missing.errors).toEqual([expect.objectContaining({ path: 'url' })]);
    expect((await problem(await post('{"url": 42}'))).code).toBe('validation_failed');
    expect((await problem(await post('{"url": "http://example.org/", "extra": 1}'))).code).toBe('validation_failed');
  });

  it('answers 413 for a body over 8 KiB', async () => {
    const res = await post(JSON.stringify({ url: `http://example.org/${'a'.repeat(9000)}` }));
    expect(res.status).toBe(413);
    expect((await problem(res)).code).toBe('body_too_large');
  });

  it('refuses URLs over 2048 characters', async () => {
    const res = await post(JSON.stringify({ url: `http://example.org/${'a'.repeat(2100)}` }));
    expect(res.status).toBe(400);
  });

  it.each([
    ['ftp://example.org/a.mp3', 400, 'url_scheme_not_allowed'],
    ['file:///etc/passwd', 400, 'url_scheme_not_allowed'],
    ['not a url', 400, 'url_invalid'],
    ['http://user:pass@example.org/a.mp3', 400, 'url_credentials_not_allowed'],
    ['http://localhost/a.mp3', 422, 'host_localhost'],
    ['http://media.localhost/a.mp3', 422, 'host_localhost'],
    ['http://127.0.0.1:9/a.mp3', 422, 'address_loopback'],
    ['http://[::1]/a.mp3', 422, 'address_loopback'],
    ['http://169.254.169.254/latest/meta-data/', 422, 'address_link_local'],
    ['http://10.0.0.1/a.mp3', 422, 'address_private'],
    ['http://192.168.1.1/a.mp3', 422, 'address_private'],
    ['http://0x7f000001/a.mp3', 422, 'address_loopback'],
    ['http://[::ffff:169.254.169.254]/', 422, 'address_link_local'],
  ])('refuses %s with %i %s, before any job exists', async (url, status, code) => {
    const res = await post(JSON.stringify({ url }));
    expect(res.status).toBe(status);
    const body = await problem(res);
    expect(body.code).toBe(code);
    expect(body.status).toBe(status);
  });

  it('runs with the stand-in tools, so a job that slipped through could not connect anywhere', async () => {
    const health = (await (await svc.request('/healthz')).json()) as Record<string, { path?: string | null }>;
    expect(health.downloader?.path).toBe(tools.env.YTDLP_PATH);
    expect(health.ffmpeg?.path).toBe(tools.env.FFMPEG_PATH);
  });

  it('started no tool for any of these submissions', async () => {
    // A job that slipped through would be picked up by a worker at once; give it a moment.
    await sleep(500);
    expect(await tools.calls()).toEqual([]);
  });
});

describe('submitSource accepted', () => {
  it('answers 202 with Location: /jobs/{id} naming the job_id of the body, and that record is there', async () => {
    // Its own service and stand-in tools: the one above must never start a tool. Port 9 of this
    // machine is allowed so the URL passes the policy; no downloader runs, so nothing connects.
    const ownDir = await mkdtemp(path.join(tmpdir(), 'api-offline-tools-accepted-'));
    const own = await writeOfflineTools(ownDir);
    const accepting = await startService({ env: { ...own.env, FETCH_ALLOW_HOSTS: '127.0.0.1:9' } });
    try {
      const res = await accepting.request('/sources', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ url: 'http://127.0.0.1:9/accepted.m4a' }),
      });
      expect(res.status).toBe(202);
      expect(res.headers.get('content-type')).toContain('application/json');
      const body = (await res.json()) as { job_id: string; status: string; url: string; born_done: boolean };
      expect(body.job_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      expect(body).toMatchObject({ url: 'http://127.0.0.1:9/accepted.m4a', born_done: false });
      expect(['queued', 'running']).toContain(body.status);
      const location = res.headers.get('location');
      expect(location).toBe(`/jobs/${body.job_id}`);

      // Location is where the record is polled; with the stand-in downloader the job fails.
      const polled = await accepting.request(location!);
      expect(polled.status).toBe(200);
      expect(((await polled.json()) as { job_id: string }).job_id).toBe(body.job_id);
      const ended = await accepting.waitForJob(body.job_id, ['done', 'failed', 'canceled'], 20_000);
      expect(ended.status).toBe('failed');
      expect(ended.error!.code).toMatch(/^[a-z_]+$/);
      expect((await own.calls()).some((call) => call.startsWith('yt-dlp '))).toBe(true);

      // Each 202 names its own job.
      const second = await accepting.request('/sources', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ url: 'http://127.0.0.1:9/another.m4a' }),
      });
      expect(second.status).toBe(202);
      const secondBody = (await second.json()) as { job_id: string };
      expect(secondBody.job_id).not.toBe(body.job_id);
      expect(second.headers.get('location')).toBe(`/jobs/${secondBody.job_id}`);
    } finally {
      await accepting.stop();
      await rm(ownDir, { recursive: true, force: true });
    }
  });
});

describe('the interface description', () => {
  it('is served at /openapi.json and equals the generated file in the repository', async () => {
    const res = await svc.request('/openapi.json', { auth: false });
    expect(res.status).toBe(200);
    const served = (await res.json()) as { paths: Record<string, Record<string, { operationId?: string }>> };
    const committed: unknown = JSON.parse(await readFile(path.join(ROOT, 'openapi.json'), 'utf8'));
    expect(served).toEqual(committed);
    const operations = Object.values(served.paths)
      .flatMap((item) => Object.values(item).map((op) => op.operationId))
      .sort();
    expect(operations).toEqual([
      'cancelJob',
      'getArtifact',
      'getEvents',
      'getHealth',
      'getJob',
      'getJobEvents',
      'getMetrics',
      'getStoreScrub',
      'getWebhookSecret',
      'listJobItems',
      'scrubStore',
      'submitSource',
      'submitSourceBatch',
    ]);
  });
});

describe('unknown routes', () => {
  it('answer a 404 problem document', async () => {
    const res = await svc.request('/nope');
    expect(res.status).toBe(404);
    expect((await problem(res)).code).toBe('route_not_found');
  });
});
