import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { whsecOf } from '../../src/webhooks/signature.js';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import {
  documentedVerifiedJob,
  documentedVerifyWebhook,
  type VerifiedJob,
  type VerifyWebhook,
} from '../support/webhook-snippets.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import { startWebhookReceiver, type ReceivedCallback, type WebhookReceiver } from '../support/webhook-receiver.js';

/**
 * Callbacks with the real service, tools and database (each kind), to a receiver on loopback
 * (allowed by FETCH_ALLOW_HOSTS=127.0.0.1, which opens every port of that address and nothing
 * else): Standard Webhooks, as docs/webhooks.md says (every callback is checked with the page's two
 * snippets: the `standardwebhooks` package, as a receiver would, and the hand-written check)
 * under the secret getWebhookSecret gives the submitting key (never WEBHOOK_SECRET itself), one
 * signature per secret for rotation, retried after failures and a dead receiver, kept across a restart and across a node killed
 * mid-attempt, and refused at submission when the policy refuses their destination. Refused
 * destinations off this machine are submitted with a source that never answers, so that even a
 * regression accepting them would leave no job that ends, and so no callback that leaves.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const RETRY_ENV = { WEBHOOK_TIMEOUT_S: '2', WEBHOOK_RETRY_BASE_S: '0.2', WEBHOOK_RETRY_FOR_S: '300' };

interface CallbackBody {
  url: string;
  delivery_id: string;
  status: 'pending' | 'delivered' | 'failed';
  attempt_count: number;
  next_attempt_at: string | null;
  attempts: Array<{ at: string; status: number | null; error: string | null }>;
}

let media: MediaServer;
let tone: MediaFixture;
let long: MediaFixture;
let verifyWebhook: VerifyWebhook;
let verifiedJob: VerifiedJob;

beforeAll(async () => {
  tone = await makeTone(FIXTURE_DIR, { seconds: 1, channels: 1, sampleRate: 44100, format: 'flac' });
  long = await makeTone(FIXTURE_DIR, { seconds: 30, channels: 2, sampleRate: 44100, format: 'wav' });
  media = await startMediaServer();
  verifyWebhook = await documentedVerifyWebhook();
  verifiedJob = await documentedVerifiedJob();
});
afterAll(async () => {
  await media?.close();
});

/** What the page's `standardwebhooks` snippet makes of a callback: the job record, or the message it throws. */
function libraryVerdict(secret: string, request: Pick<ReceivedCallback, 'headers' | 'body'>): unknown {
  try {
    return verifiedJob(secret, request.headers, request.body);
  } catch (err) {
    return (err as Error).message;
  }
}

/**
 * Every request verifies under `secret` with both of the page's snippets; each refuses another secret, a
 * changed body, another id and an old timestamp (the hand-written one: a tolerance it is past).
 */
function expectSigned(requests: ReceivedCallback[], secret: string) {
  const other = whsecOf(randomBytes(32));
  for (const request of requests) {
    expect(libraryVerdict(secret, request), JSON.stringify(request.headers)).toEqual(JSON.parse(request.body));
    expect(verifyWebhook(secret, request.headers, request.body), JSON.stringify(request.headers)).toBe(true);

    const changed = request.body.replace('"status"', '"status" ');
    const otherId = { ...request.headers, 'webhook-id': 'another-id' };
    const old = { ...request.headers, 'webhook-timestamp': String(Number(request.headers['webhook-timestamp']) - 600) };
    expect(libraryVerdict(other, request)).toBe('No matching signature found');
    expect(libraryVerdict(secret, { ...request, body: changed })).toBe('No matching signature found');
    expect(libraryVerdict(secret, { ...request, headers: otherId })).toBe('No matching signature found');
    expect(libraryVerdict(secret, { ...request, headers: old })).toBe('Message timestamp too old');
    expect(verifyWebhook(other, request.headers, request.body)).toBe(false);
    expect(verifyWebhook(secret, request.headers, changed)).toBe(false);
    expect(verifyWebhook(secret, otherId, request.body)).toBe(false);
    expect(verifyWebhook(secret, request.headers, request.body, -1)).toBe(false);
  }
}

/** getWebhookSecret's answer for the service's key: the secrets that sign its jobs' callbacks. */
async function keySecrets(svc: ServiceHandle): Promise<string[]> {
  const res = await svc.request('/webhook-secret');
  expect(res.status).toBe(200);
  return ((await res.json()) as { secrets: string[] }).secrets;
}

function callbackOf(job: JobBody): CallbackBody {
  return job.callback as CallbackBody;
}

async function waitForCallback(
  svc: ServiceHandle,
  jobId: string,
  until: (callback: CallbackBody) => boolean,
  timeoutMs = 60_000,
): Promise<JobBody> {
  const deadline = Date.now() + timeoutMs;
  let job = await svc.getJob(jobId);
  while (!until(callbackOf(job)) && Date.now() < deadline) {
    await sleep(100);
    job = await svc.getJob(jobId);
  }
  expect(until(callbackOf(job)), JSON.stringify(job.callback)).toBe(true);
  return job;
}

async function submitWithCallback(
  svc: ServiceHandle,
  url: string,
  callbackUrl: string,
): Promise<{ status: number; body: JobBody & { code?: string; errors?: Array<{ path: string }> } }> {
  const res = await svc.request('/sources', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ url, callback_url: callbackUrl }),
  });
  return { status: res.status, body: (await res.json()) as JobBody & { code?: string } };
}

describe.each(BACKENDS)('webhooks on %s', (kind) => {
  let receiver: WebhookReceiver;
  let svc: ServiceHandle;
  let dataDir: string;
  let env: Record<string, string>;
  /** The key every start of the service is given, so that its jobs' callbacks keep one secret across restarts. */
  const apiKey = randomBytes(24).toString('base64url');
  /** WEBHOOK_SECRET, generated: it signs nothing itself. */
  let master: string;
  /** The key's signing secret, from getWebhookSecret. */
  let secret: string;
  /** The output of every service stopped or killed so far. */
  const outputs: string[] = [];
  const paths = (where: string) => (request: ReceivedCallback) => request.path === where;

  beforeAll(async () => {
    receiver = await startWebhookReceiver();
    dataDir = await mkdtemp(path.join(tmpdir(), 'sf-webhooks-'));
    env = { ...(await serviceEnv(kind)), FETCH_ALLOW_HOSTS: '127.0.0.1', ...RETRY_ENV };
    svc = await startService({ dataDir, env, apiKey });
    // WEBHOOK_SECRET is unset: the service generated one in the Standard Webhooks form (on
    // PostgreSQL into the database, and copied here for operators).
    master = (await readFile(path.join(dataDir, 'webhook-secret'), 'utf8')).trim();
    expect(master).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const secrets = await keySecrets(svc);
    expect(secrets).toHaveLength(1);
    secret = secrets[0]!;
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(secret).not.toBe(master);
  });
  afterAll(async () => {
    await svc?.stop();
    await receiver?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  const expectSignedHere = (requests: ReceivedCallback[]) => expectSigned(requests, secret);

  it('POSTs the signed job record when the job is done, after two 500s, with the same id on every attempt', async () => {
    media.serveFile(`/${kind}/done.flac`, tone.path, { contentType: tone.contentType });
    const hook = `/${kind}/done`;
    receiver.script(500, 500);
    const { status, body: submitted } = await submitWithCallback(
      svc,
      media.url(`/${kind}/done.flac`),
      receiver.url(hook),
    );
    expect(status).toBe(202);
    expect(callbackOf(submitted)).toMatchObject({
      url: receiver.url(hook),
      status: 'pending',
      attempt_count: 0,
      next_attempt_at: null,
      attempts: [],
    });

    const requests = await receiver.waitForRequests(3, 60_000, paths(hook));
    expect(requests.map((request) => request.answer)).toEqual([500, 500, 200]);
    expectSignedHere(requests);
    // WEBHOOK_SECRET itself signs nothing: a receiver that held it verifies no callback.
    for (const request of requests) {
      expect(libraryVerdict(master, request)).toBe('No matching signature found');
      expect(verifyWebhook(master, request.headers, request.body)).toBe(false);
    }
    const ids = new Set(requests.map((request) => request.headers['webhook-id']));
    expect(ids.size).toBe(1);
    for (const request of requests) {
      expect(request.method).toBe('POST');
      expect(request.headers['content-type']).toBe('application/json');
      const job = JSON.parse(request.body) as JobBody;
      expect(job).toMatchObject({ job_id: submitted.job_id, status: 'done' });
      expect(job.result!.content_id).toMatch(/^[0-9a-f]{64}$/);
    }
    // Each attempt is signed anew, with its own timestamp, and never before the one before.
    const stamps = requests.map((request) => Number(request.headers['webhook-timestamp']));
    expect([...stamps].sort((a, b) => a - b)).toEqual(stamps);

    const job = await waitForCallback(svc, submitted.job_id, (callback) => callback.status === 'delivered');
    const callback = callbackOf(job);
    expect(callback.delivery_id).toBe([...ids][0]);
    expect(callback.attempt_count).toBe(3);
    expect(callback.next_attempt_at).toBeNull();
    expect(callback.attempts.map((attempt) => attempt.status)).toEqual([500, 500, 200]);
    expect(callback.attempts.every((attempt) => attempt.error === null)).toBe(true);
  });

  it('tells a failed job and a canceled one', async () => {
    const failedHook = `/${kind}/failed`;
    const canceledHook = `/${kind}/canceled`;
    // Nothing is served there: the downloader gets a 404.
    const failed = await submitWithCallback(svc, media.url(`/${kind}/missing.flac`), receiver.url(failedHook));
    media.serveFile(`/${kind}/slow.wav`, long.path, { contentType: 'audio/wav', throttleBytesPerSec: 64 * 1024 });
    const canceled = await submitWithCallback(svc, media.url(`/${kind}/slow.wav`), receiver.url(canceledHook));
    expect([failed.status, canceled.status]).toEqual([202, 202]);
    const res = await svc.request(`/jobs/${canceled.body.job_id}/cancel`, { method: 'POST' });
    expect(res.status).toBe(200);

    const [failedCallback] = await receiver.waitForRequests(1, 60_000, paths(failedHook));
    const [canceledCallback] = await receiver.waitForRequests(1, 60_000, paths(canceledHook));
    expectSignedHere([failedCallback!, canceledCallback!]);
    expect(JSON.parse(failedCallback!.body)).toMatchObject({
      job_id: failed.body.job_id,
      status: 'failed',
      error: { code: expect.any(String) },
    });
    expect(JSON.parse(canceledCallback!.body)).toMatchObject({ job_id: canceled.body.job_id, status: 'canceled' });
  });

  it('keeps trying a receiver that is down, and delivers once it is back', async () => {
    const down = await startWebhookReceiver();
    try {
      await down.stop();
      const hook = `/${kind}/down`;
      const { body: submitted } = await submitWithCallback(svc, media.url(`/${kind}/missing-too.flac`), down.url(hook));
      const failing = await waitForCallback(svc, submitted.job_id, (callback) => callback.attempt_count >= 2);
      expect(callbackOf(failing).status).toBe('pending');
      expect(callbackOf(failing).next_attempt_at).not.toBeNull();
      expect(
        callbackOf(failing).attempts.every((attempt) => attempt.status === null && attempt.error === 'connect_failed'),
      ).toBe(true);

      await down.listenAgain();
      const [request] = await down.waitForRequests(1, 60_000, paths(hook));
      expectSignedHere([request!]);
      const job = await waitForCallback(svc, submitted.job_id, (callback) => callback.status === 'delivered');
      const attempts = callbackOf(job).attempts;
      expect(attempts.at(-1)).toMatchObject({ status: 200, error: null });
      expect(attempts.slice(0, -1).map((attempt) => attempt.error)).toEqual(
        attempts.slice(0, -1).map(() => 'connect_failed'),
      );
      expect(request!.headers['webhook-id']).toBe(callbackOf(job).delivery_id);
    } finally {
      await down.close();
    }
  });

  it('delivers a callback left pending by a stop after the restart, with the same id', async () => {
    const hook = `/${kind}/restart`;
    receiver.fallback(503);
    try {
      const { body: submitted } = await submitWithCallback(
        svc,
        media.url(`/${kind}/missing-again.flac`),
        receiver.url(hook),
      );
      await waitForCallback(svc, submitted.job_id, (callback) => callback.attempt_count >= 1);
      await svc.stop();
      outputs.push(svc.output());
      const before = receiver.requests.filter(paths(hook));
      expect(before.length).toBeGreaterThanOrEqual(1);
      expect(before.every((request) => request.answer === 503)).toBe(true);

      receiver.fallback(200);
      svc = await startService({ dataDir, env, apiKey });
      const job = await waitForCallback(svc, submitted.job_id, (callback) => callback.status === 'delivered');
      const all = receiver.requests.filter(paths(hook));
      expect(all.at(-1)!.answer).toBe(200);
      expectSignedHere(all);
      expect(new Set(all.map((request) => request.headers['webhook-id']))).toEqual(
        new Set([callbackOf(job).delivery_id]),
      );
      expect(callbackOf(job).attempt_count).toBe(all.length);
    } finally {
      receiver.fallback(200);
    }
  });

  it('makes an attempt again when its node was killed mid-attempt: at least once, with the same id', async () => {
    const hook = `/${kind}/killed`;
    receiver.script('hang');
    const { body: submitted } = await submitWithCallback(
      svc,
      media.url(`/${kind}/missing-once-more.flac`),
      receiver.url(hook),
    );
    const [first] = await receiver.waitForRequests(1, 60_000, paths(hook));
    await svc.kill();
    outputs.push(svc.output());

    svc = await startService({ dataDir, env, apiKey });
    // The dead node's lease (WEBHOOK_TIMEOUT_S + 5 s) runs out, then the new node makes the attempt.
    const [, second] = await receiver.waitForRequests(2, 60_000, paths(hook));
    expectSignedHere([first!, second!]);
    expect(second!.headers['webhook-id']).toBe(first!.headers['webhook-id']);
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(5_000);
    const job = await waitForCallback(svc, submitted.job_id, (callback) => callback.status === 'delivered');
    // The interrupted attempt left no record: only the one that was answered.
    expect(callbackOf(job).attempts.map((attempt) => attempt.status)).toEqual([200]);
  });

  it('refuses a callback_url the address policy refuses, at submission, with its codes', async () => {
    // A source that never answers: a job made by mistake would never end, so no callback would leave.
    media.route(`/${kind}/hang`, () => {});
    const source = media.url(`/${kind}/hang`);
    const refusals: Array<[string, number, string]> = [
      [`http://[::1]:${receiver.port}/hook`, 422, 'address_loopback'],
      [`http://localhost:${receiver.port}/hook`, 422, 'host_localhost'],
      ['http://10.0.0.1/hook', 422, 'address_private'],
      ['http://169.254.169.254/latest/meta-data/', 422, 'address_link_local'],
      ['ftp://127.0.0.1/hook', 400, 'url_scheme_not_allowed'],
      [`http://user:pw@127.0.0.1:${receiver.port}/hook`, 400, 'url_credentials_not_allowed'],
    ];
    for (const [callbackUrl, status, code] of refusals) {
      const res = await submitWithCallback(svc, source, callbackUrl);
      expect({ callbackUrl, status: res.status, code: res.body.code }).toEqual({ callbackUrl, status, code });
      expect(res.body.errors).toEqual([expect.objectContaining({ path: 'callback_url' })]);
    }
    // No job ran: the source was never asked for...
    expect(media.requestsFor(`/${kind}/hang`)).toEqual([]);
    // ...which it would have been with an allowed callback (then the job is canceled).
    const accepted = await submitWithCallback(svc, source, receiver.url(`/${kind}/allowed`));
    expect(accepted.status).toBe(202);
    const deadline = Date.now() + 30_000;
    while (media.requestsFor(`/${kind}/hang`).length === 0 && Date.now() < deadline) await sleep(100);
    expect(media.requestsFor(`/${kind}/hang`).length).toBeGreaterThan(0);
    await svc.request(`/jobs/${accepted.body.job_id}/cancel`, { method: 'POST' });
    const [canceled] = await receiver.waitForRequests(1, 30_000, paths(`/${kind}/allowed`));
    expect(JSON.parse(canceled!.body)).toMatchObject({ job_id: accepted.body.job_id, status: 'canceled' });
  });

  it("never writes the webhook secret, the key's secret or a signature to the log", () => {
    const signatures = receiver.requests.map((request) => String(request.headers['webhook-signature']).slice(3));
    expect(signatures.length).toBeGreaterThan(0);
    const output = [...outputs, svc.output()].join('\n');
    expect(output).toContain('callback delivered');
    for (const kept of [master, secret]) expect(output.includes(kept.slice('whsec_'.length))).toBe(false);
    for (const signature of signatures) expect(output.includes(signature)).toBe(false);
  });
});

describe('webhooks under several secrets (rotation)', () => {
  const current = whsecOf(randomBytes(32));
  const previous = 'the-previous-plain-webhook-secret-0123456789';
  let receiver: WebhookReceiver;
  let svc: ServiceHandle;

  beforeAll(async () => {
    receiver = await startWebhookReceiver();
    svc = await startService({
      env: { FETCH_ALLOW_HOSTS: '127.0.0.1', ...RETRY_ENV, WEBHOOK_SECRET: `${current}, ${previous}` },
    });
  });
  afterAll(async () => {
    await svc?.stop();
    await receiver?.close();
  });

  it("signs each callback once per secret with the key's secret derived from it; getWebhookSecret lists both, and either verifies (control: a third secret, and the masters, do not)", async () => {
    const secrets = await keySecrets(svc);
    expect(secrets).toHaveLength(2);
    for (const secret of secrets) expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(secrets).not.toContain(current);
    expect(secrets).not.toContain(whsecOf(Buffer.from(previous)));

    const hook = '/rotation';
    const { status, body: submitted } = await submitWithCallback(
      svc,
      media.url('/rotation/missing.flac'),
      receiver.url(hook),
    );
    expect(status).toBe(202);
    const [request] = await receiver.waitForRequests(1, 60_000, (r) => r.path === hook);
    await waitForCallback(svc, submitted.job_id, (callback) => callback.status === 'delivered');
    const signatures = String(request!.headers['webhook-signature']).split(' ');
    expect(signatures).toHaveLength(2);
    for (const signature of signatures) expect(signature).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    expectSigned([request!], secrets[0]!);
    expectSigned([request!], secrets[1]!);
    // Each signature is the one of its secret, in the order getWebhookSecret lists them (the current first).
    signatures.forEach((signature, i) => {
      const alone = { ...request!, headers: { ...request!.headers, 'webhook-signature': signature } };
      expect(secrets.map((secret) => verifyWebhook(secret, alone.headers, alone.body))).toEqual(
        secrets.map((_, j) => i === j),
      );
    });
    const third = whsecOf(randomBytes(32));
    for (const refused of [third, current, whsecOf(Buffer.from(previous))]) {
      expect(libraryVerdict(refused, request!)).toBe('No matching signature found');
      expect(verifyWebhook(refused, request!.headers, request!.body)).toBe(false);
    }
    expect(verifyWebhook(previous, request!.headers, request!.body)).toBe(false);
  });

  it('never writes a secret to the log', async () => {
    // The delivery's log line follows its record: the output holds it once it is read in.
    await expect.poll(() => svc.output(), { timeout: 10_000 }).toContain('callback delivered');
    const output = svc.output();
    const derived = (await keySecrets(svc)).map((secret) => secret.slice('whsec_'.length));
    for (const secret of [current.slice('whsec_'.length), previous, ...derived])
      expect(output.includes(secret)).toBe(false);
  });
});
