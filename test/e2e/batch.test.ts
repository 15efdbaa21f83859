import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { documentedVerifyWebhook } from '../support/webhook-snippets.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver.js';

/**
 * POST /sources/batch with the real service, tools and database (each kind): one answer for many
 * URLs, each under the rules of a single submission. FETCH_ALLOW_HOSTS=127.0.0.1 lets the media
 * server and the callback receiver in; [::1] stays refused, which gives refusals that never leave
 * this machine.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const SECRET = 'batch-test-webhook-secret-0123456789abcdef';

interface Problem {
  status: number;
  code: string;
  detail: string;
  retry_after?: number;
  errors?: Array<{ path: string; message: string }>;
}
type Item = { outcome: 'accepted'; url: string; job: JobBody } | { outcome: 'refused'; url: string; problem: Problem };
interface BatchAnswer {
  accepted: number;
  refused: number;
  results: Item[];
}

let media: MediaServer;
let tone: MediaFixture;
let shared: MediaFixture;

beforeAll(async () => {
  tone = await makeTone(FIXTURE_DIR, { seconds: 1, channels: 2, sampleRate: 44100, format: 'flac' });
  // Large enough that the downloader's metadata step reads only its start: a whole GET is a download.
  shared = await makeTone(FIXTURE_DIR, { seconds: 4, channels: 2, sampleRate: 44100, format: 'wav' });
  media = await startMediaServer();
});
afterAll(async () => {
  await media?.close();
});

async function postBatch(
  svc: ServiceHandle,
  body: unknown,
  contentType = 'application/json',
): Promise<{ status: number; body: BatchAnswer & Problem }> {
  const res = await svc.request('/sources/batch', {
    method: 'POST',
    headers: { 'content-type': contentType },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as BatchAnswer & Problem };
}

describe.each(BACKENDS)('submitSourceBatch on %s', (kind) => {
  let svc: ServiceHandle;
  let receiver: WebhookReceiver;

  beforeAll(async () => {
    receiver = await startWebhookReceiver();
    svc = await startService({
      env: { ...(await serviceEnv(kind)), FETCH_ALLOW_HOSTS: '127.0.0.1', WEBHOOK_SECRET: SECRET },
    });
  });
  afterAll(async () => {
    await svc?.stop();
    await receiver?.close();
  });

  it('answers one item per URL, in order: accepted with its job, refused with its problem; a URL given twice is downloaded once, a stored one is born done; every job calls back', async () => {
    media.serveFile(`/${kind}/shared.wav`, shared.path, { contentType: 'audio/wav', throttleBytesPerSec: 512 * 1024 });
    media.serveFile(`/${kind}/stored.flac`, tone.path, { contentType: tone.contentType });
    const stored = await svc.waitForJob((await svc.submit(media.url(`/${kind}/stored.flac`))).job_id, [
      'done',
      'failed',
    ]);
    expect(stored.status).toBe('done');

    const hook = `/${kind}/batch`;
    const urls = [
      media.url(`/${kind}/shared.wav`),
      'ftp://127.0.0.1/a.flac',
      media.url(`/${kind}/shared.wav`),
      `http://[::1]:${media.hostPort.split(':')[1]}/${kind}/shared.wav`,
      media.url(`/${kind}/stored.flac`),
      `${media.url(`/${kind}/`)}${'a'.repeat(2100)}`,
    ];
    const { status, body } = await postBatch(svc, { urls, callback_url: receiver.url(hook) });
    expect(status).toBe(200);
    expect({ accepted: body.accepted, refused: body.refused }).toEqual({ accepted: 3, refused: 3 });
    expect(body.results.map((item) => [item.outcome, item.url])).toEqual(
      urls.map((url, i) => [[1, 3, 5].includes(i) ? 'refused' : 'accepted', url]),
    );
    const problems = body.results.flatMap((item) => (item.outcome === 'refused' ? [item.problem] : []));
    expect(problems.map(({ status: s, code }) => ({ status: s, code }))).toEqual([
      { status: 400, code: 'url_scheme_not_allowed' },
      { status: 422, code: 'address_loopback' },
      { status: 400, code: 'url_too_long' },
    ]);
    for (const problem of problems) expect(problem.detail).toEqual(expect.any(String));

    const jobs = body.results.flatMap((item) => (item.outcome === 'accepted' ? [item.job] : []));
    const [first, twice, bornDone] = jobs;
    expect(first!.job_id).not.toBe(twice!.job_id);
    expect(bornDone).toMatchObject({
      status: 'done',
      born_done: true,
      result: { content_id: stored.result!.content_id },
    });
    for (const job of jobs) expect(job.callback).toMatchObject({ url: receiver.url(hook), status: expect.any(String) });

    const done = await Promise.all([first, twice].map((job) => svc.waitForJob(job!.job_id, ['done', 'failed'])));
    expect(done.map((job) => job.status)).toEqual(['done', 'done']);
    expect(done[0]!.result!.content_id).toBe(done[1]!.result!.content_id);
    expect(media.downloadsOf(`/${kind}/shared.wav`)).toBe(1);

    // One callback per accepted job, each signed as docs/webhooks.md says.
    const verify = await documentedVerifyWebhook();
    const callbacks = await receiver.waitForRequests(3, 60_000, (request) => request.path === hook);
    expect(callbacks.map((request) => (JSON.parse(request.body) as JobBody).job_id).sort()).toEqual(
      jobs.map((job) => job.job_id).sort(),
    );
    // Under the key's own secret (getWebhookSecret), not WEBHOOK_SECRET itself.
    const { secrets } = (await (await svc.request('/webhook-secret')).json()) as { secrets: string[] };
    for (const request of callbacks) {
      expect(verify(secrets[0]!, request.headers, request.body)).toBe(true);
      expect(verify(SECRET, request.headers, request.body)).toBe(false);
    }
    expect(new Set(callbacks.map((request) => request.headers['webhook-id'])).size).toBe(3);
  });

  it('takes 100 URLs of the longest length at once, and refuses the whole batch when its body is wrong', async () => {
    const port = media.hostPort.split(':')[1];
    const longest = (i: number) => {
      const head = `http://[::1]:${port}/${i}/`;
      return head + 'x'.repeat(2048 - head.length);
    };
    const hundred = Array.from({ length: 100 }, (_, i) => longest(i));
    const full = await postBatch(svc, { urls: hundred });
    expect(full.status).toBe(200);
    expect({ accepted: full.body.accepted, refused: full.body.refused }).toEqual({ accepted: 0, refused: 100 });
    expect(new Set(full.body.results.map((item) => item.outcome === 'refused' && item.problem.code))).toEqual(
      new Set(['address_loopback']),
    );

    const refusals: Array<[unknown, number, string]> = [
      [{ urls: [...hundred, longest(100)] }, 400, 'validation_failed'],
      [{ urls: [] }, 400, 'validation_failed'],
      [{ urls: 'http://127.0.0.1/a' }, 400, 'validation_failed'],
      [{ urls: [42] }, 400, 'validation_failed'],
      [{ urls: ['http://127.0.0.1/a'], priority: 1 }, 400, 'validation_failed'],
      ['{"urls": [', 400, 'invalid_json'],
      [{ urls: ['http://127.0.0.1/a'], callback_url: 'http://10.0.0.1/hook' }, 422, 'address_private'],
      [{ urls: ['http://127.0.0.1/a'], callback_url: 'gopher://127.0.0.1/' }, 400, 'url_scheme_not_allowed'],
      [{ urls: ['http://127.0.0.1/a'], padding: 'x'.repeat(256 * 1024) }, 413, 'body_too_large'],
    ];
    for (const [body, status, code] of refusals) {
      const answer = await postBatch(svc, body);
      expect({ status: answer.status, code: answer.body.code }).toEqual({ status, code });
    }
    const notJson = await postBatch(svc, 'urls=http://127.0.0.1/a', 'application/x-www-form-urlencoded');
    expect({ status: notJson.status, code: notJson.body.code }).toEqual({
      status: 415,
      code: 'unsupported_media_type',
    });
    const keyless = await svc.request('/sources/batch', {
      method: 'POST',
      auth: false,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ urls: ['http://127.0.0.1/a'] }),
    });
    expect(keyless.status).toBe(401);
  });
});

describe('submitSourceBatch past MAX_QUEUED_JOBS', () => {
  it('accepts URLs while the queue has room and refuses the rest with queue_full and retry_after, in a 200', async () => {
    // No workers: the queued jobs stay queued.
    const svc = await startService({
      env: { FETCH_ALLOW_HOSTS: '127.0.0.1', MAX_QUEUED_JOBS: '2', WORKER_CONCURRENCY: '0' },
    });
    try {
      const urls = [1, 2, 3].map((i) => media.url(`/queue-full/${i}.flac`));
      const { status, body } = await postBatch(svc, { urls });
      expect(status).toBe(200);
      expect(
        body.results.map((item) =>
          item.outcome === 'accepted' ? item.job.status : `${item.problem.status} ${item.problem.code}`,
        ),
      ).toEqual(['queued', 'queued', '429 queue_full']);
      const refused = body.results[2] as Extract<Item, { outcome: 'refused' }>;
      expect(refused.problem.retry_after).toBeGreaterThan(0);
    } finally {
      await svc.stop();
    }
  });
});
