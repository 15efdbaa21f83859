import { execFile } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { ROOT, startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { until } from '../support/until.js';
import {
  documentedVerifiedJob,
  documentedVerifyWebhook,
  type VerifiedJob,
  type VerifyWebhook,
} from '../support/webhook-snippets.js';
import { startWebhookReceiver, type ReceivedCallback, type WebhookReceiver } from '../support/webhook-receiver.js';

/**
 * Each API key's own callback signing secret (docs/webhooks.md), with the real service and a
 * receiver on loopback that checks every callback with the page's hand-written snippet under the
 * one secret it holds, key B's, fetched from getWebhookSecret with key B: a callback about key A's
 * job, sent to it (any key may name any callback_url), is refused; key B's own job's is accepted
 * (the control). A record that a holder of key A's secret forges for key B's receiver is refused
 * there too, and the same record signed with key B's secret is accepted (the control: only the
 * secret tells them apart). The jobs' sources answer 404, so each job fails at once and its
 * callback leaves.
 */
const KEY_A = randomBytes(24).toString('base64url');
const KEY_B = randomBytes(24).toString('base64url');
const SECRET_FORM = /^whsec_[A-Za-z0-9+/]{43}=$/;

let media: MediaServer;
let svc: ServiceHandle;
let receiver: WebhookReceiver;
let verifyWebhook: VerifyWebhook;
let verifiedJob: VerifiedJob;
let secretA: string;
let secretB: string;

async function askSecrets(key: string | undefined): Promise<Response> {
  return svc.request(
    '/webhook-secret',
    key === undefined ? { auth: false } : { headers: { authorization: `Bearer ${key}` } },
  );
}

async function secretsOf(key: string): Promise<string[]> {
  const res = await askSecrets(key);
  expect(res.status).toBe(200);
  expect(res.headers.get('cache-control')).toBe('no-store');
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  return ((await res.json()) as { secrets: string[] }).secrets;
}

async function submitAs(key: string, source: string, callbackUrl: string): Promise<JobBody> {
  const res = await svc.request('/sources', {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: media.url(source), callback_url: callbackUrl }),
  });
  expect(res.status).toBe(202);
  return (await res.json()) as JobBody;
}

/** What the page's `standardwebhooks` snippet makes of a callback: the job record, or the message it throws. */
function libraryVerdict(secret: string, request: Pick<ReceivedCallback, 'headers' | 'body'>): unknown {
  try {
    return verifiedJob(secret, request.headers, request.body);
  } catch (err) {
    return (err as Error).message;
  }
}

/** A Standard Webhooks signature made by hand, as anyone holding `secret` can make one. */
function signAs(secret: string, id: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  return `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
}

beforeAll(async () => {
  media = await startMediaServer();
  verifyWebhook = await documentedVerifyWebhook();
  verifiedJob = await documentedVerifiedJob();
  svc = await startService({ apiKey: KEY_A, env: { API_KEYS: `${KEY_A},${KEY_B}`, FETCH_ALLOW_HOSTS: '127.0.0.1' } });
  secretA = (await secretsOf(KEY_A)).join(' ');
  secretB = (await secretsOf(KEY_B)).join(' ');
  // Key B's receiver: it holds key B's secret, and nothing else.
  receiver = await startWebhookReceiver({
    verify: (request) => verifyWebhook(secretB, request.headers, request.body),
  });
});
afterAll(async () => {
  await svc?.stop();
  await receiver?.close();
  await media?.close();
});

describe('a callback signing secret per API key', () => {
  it('getWebhookSecret gives each key its own secret, the same at every ask, never the service secret; no key: 401', async () => {
    expect(secretA).toMatch(SECRET_FORM);
    expect(secretB).toMatch(SECRET_FORM);
    expect(secretA).not.toBe(secretB);
    expect(await secretsOf(KEY_A)).toEqual([secretA]);
    expect(await secretsOf(KEY_B)).toEqual([secretB]);
    // WEBHOOK_SECRET is unset: the service secret was generated into the data dir. No key is given it.
    const master = (await readFile(path.join(svc.dataDir, 'webhook-secret'), 'utf8')).trim();
    expect(master).toMatch(SECRET_FORM);
    expect([secretA, secretB]).not.toContain(master);

    for (const key of [undefined, 'wrong-key-0123456789abcdef']) {
      const refused = await askSecrets(key);
      expect(refused.status).toBe(401);
      const body = await refused.text();
      expect((JSON.parse(body) as { code: string }).code).toBe('unauthorized');
      for (const secret of [secretA, secretB, master]) expect(body.includes(secret.slice(6))).toBe(false);
    }
  });

  it("key B's receiver refuses a callback about key A's job sent to it, and accepts key B's own (control)", async () => {
    const ofA = await submitAs(KEY_A, '/a/missing.flac', receiver.url('/from-a'));
    const ofB = await submitAs(KEY_B, '/b/missing.flac', receiver.url('/from-b'));
    const [fromA] = await receiver.waitForRequests(1, 60_000, (request) => request.path === '/from-a');
    const [fromB] = await receiver.waitForRequests(1, 60_000, (request) => request.path === '/from-b');
    expect(JSON.parse(fromA!.body)).toMatchObject({ job_id: ofA.job_id, status: 'failed' });
    expect(JSON.parse(fromB!.body)).toMatchObject({ job_id: ofB.job_id, status: 'failed' });

    // The receiver's own check (the page's hand-written snippet under key B's secret) answered.
    expect(fromA!.answer).toBe(401);
    expect(fromB!.answer).toBe(200);
    // The page's library snippet agrees; key A's callback is genuine, under key A's secret.
    expect(libraryVerdict(secretB, fromA!)).toBe('No matching signature found');
    expect(libraryVerdict(secretB, fromB!)).toEqual(JSON.parse(fromB!.body));
    expect(libraryVerdict(secretA, fromA!)).toEqual(JSON.parse(fromA!.body));
    expect(libraryVerdict(secretA, fromB!)).toBe('No matching signature found');

    // The service records what the receiver answered.
    const callbackOf = async (key: string, id: string) =>
      (
        (await (await svc.request(`/jobs/${id}`, { headers: { authorization: `Bearer ${key}` } })).json()) as {
          callback: { status: string; attempts: Array<{ status: number | null }> };
        }
      ).callback;
    await until("key B's callback recorded as delivered", async () =>
      (await callbackOf(KEY_B, ofB.job_id)).status === 'delivered' ? true : undefined,
    );
    expect((await callbackOf(KEY_A, ofA.job_id)).attempts[0]).toMatchObject({ status: 401 });
  });

  it("refuses a record forged with key A's secret for key B's job; the same record signed with key B's passes (control)", async () => {
    const [genuine] = await receiver.waitForRequests(1, 60_000, (request) => request.path === '/from-b');
    const forged = JSON.stringify({ ...(JSON.parse(genuine!.body) as object), status: 'done', error: null });
    const id = `forged-${randomBytes(8).toString('hex')}`;
    const timestamp = Math.floor(Date.now() / 1000);
    const post = (where: string, secret: string) =>
      fetch(receiver.url(where), {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'webhook-id': id,
          'webhook-timestamp': String(timestamp),
          'webhook-signature': signAs(secret, id, timestamp, forged),
        },
        body: forged,
      });
    expect((await post('/forged-with-a', secretA)).status).toBe(401);
    expect((await post('/forged-with-b', secretB)).status).toBe(200);
    const [withA] = await receiver.waitForRequests(1, 10_000, (request) => request.path === '/forged-with-a');
    expect(libraryVerdict(secretB, withA!)).toBe('No matching signature found');
  });

  it('source-fetch webhook-secret prints the secret of the key it is given', async () => {
    const run = promisify(execFile);
    const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', SOURCE_FETCH_URL: svc.baseUrl };
    const cli = path.join(ROOT, 'dist/cli/main.js');
    const b = await run(process.execPath, [cli, 'webhook-secret'], { env: { ...env, SOURCE_FETCH_API_KEY: KEY_B } });
    expect(b.stdout).toBe(`${secretB}\n`);
    const a = await run(process.execPath, [cli, 'webhook-secret'], { env: { ...env, SOURCE_FETCH_API_KEY: KEY_A } });
    expect(a.stdout).toBe(`${secretA}\n`);
  });

  it('is counted and logged by its route template', async () => {
    const lines = svc.logs.filter((line) => line.msg === 'request' && line.route === '/webhook-secret');
    expect(lines.map((line) => line.status)).toEqual(expect.arrayContaining([200, 401]));
    const metrics = await (await svc.request('/metrics')).text();
    expect(metrics).toMatch(
      /^source_fetch_http_requests_total\{method="GET",route="\/webhook-secret",status="200"\} \d+$/m,
    );
  });

  it('never writes a key secret or the service secret to the log', async () => {
    // A delivery's log line follows its record: wait until the output holds it.
    await until('the delivery logged', () => (svc.output().includes('callback delivered') ? true : undefined));
    const master = (await readFile(path.join(svc.dataDir, 'webhook-secret'), 'utf8')).trim();
    const output = svc.output();
    for (const secret of [secretA, secretB, master]) expect(output.includes(secret.slice('whsec_'.length))).toBe(false);
  });
});
