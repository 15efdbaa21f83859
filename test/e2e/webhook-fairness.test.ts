import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import { startWebhookReceiver, type ReceivedCallback, type WebhookReceiver } from '../support/webhook-receiver.js';

/**
 * Fair callbacks with the real service and database (each kind), to receivers on 127.0.0.1
 * (allowed by FETCH_ALLOW_HOSTS=127.0.0.1): four that accept and never answer, one that answers.
 * Key A ends a batch of 100 jobs with callbacks to one silent receiver and 30 more to three
 * others; key B's callback to the answering receiver is timed before (the control) and while A's
 * wait. The service is API-only (no workers): jobs end by being canceled, so no tool runs and
 * every job ends the moment the test says. The same attack against a node whose per-key and
 * per-receiver limits are as large as the node's (the limits off) shows the delay it would cause.
 */
const KEY_A = `key-a-${randomBytes(12).toString('base64url')}`;
const KEY_B = `key-b-${randomBytes(12).toString('base64url')}`;
const TOTAL = 6;
const PER_KEY = 3;
const PER_RECEIVER = 2;
const ATTEMPT_TIMEOUT_S = 4;
/**
 * What tells a callback that waited behind another key's attempts from one that did not: such a
 * wait lasts an attempt's time-out (the control), an undelayed callback is sent as its job ends.
 */
const UNDELAYED_MS = (ATTEMPT_TIMEOUT_S - 1) * 1000;

let media: MediaServer;
let honest: WebhookReceiver;
let silent: WebhookReceiver[];

beforeAll(async () => {
  media = await startMediaServer();
  // Never asked for: no worker runs a job here.
  media.route('/never', () => {});
  honest = await startWebhookReceiver();
  silent = await Promise.all(Array.from({ length: 4 }, () => startWebhookReceiver()));
  for (const receiver of silent) receiver.fallback('hang');
});
afterAll(async () => {
  for (const receiver of silent ?? []) await receiver.close();
  await honest?.close();
  await media?.close();
});

const silentRequests = () => silent.reduce((sum, receiver) => sum + receiver.requests.length, 0);

/** The most of these callbacks that were open at once (an open one counts as open now). */
function mostAtOnce(requests: ReceivedCallback[]): number {
  const edges = requests.flatMap((r) => [
    { at: r.at, by: 1 },
    { at: r.closedAt ?? Infinity, by: -1 },
  ]);
  // At the same instant an end comes before a start: a slot given back and taken again is one.
  edges.sort((a, b) => a.at - b.at || a.by - b.by);
  let open = 0;
  let most = 0;
  for (const edge of edges) most = Math.max(most, (open += edge.by));
  return most;
}

/** Resolves once the silent receivers together have received `count` callbacks (they answer none). */
async function silentReceived(count: number): Promise<void> {
  while (silentRequests() < count)
    await Promise.race(silent.map((receiver) => receiver.waitForRequests(receiver.requests.length + 1, 60_000)));
}

describe.each(BACKENDS)('callbacks under a flood of silent receivers on %s', (kind) => {
  async function startNode(limits: { perKey: number; perReceiver: number }): Promise<ServiceHandle> {
    return startService({
      apiKey: KEY_A,
      env: {
        ...(await serviceEnv(kind)),
        API_KEYS: `${KEY_A},${KEY_B}`,
        FETCH_ALLOW_HOSTS: '127.0.0.1',
        WORKER_CONCURRENCY: '0',
        WEBHOOK_TIMEOUT_S: String(ATTEMPT_TIMEOUT_S),
        WEBHOOK_RETRY_BASE_S: '1',
        WEBHOOK_RETRY_FOR_S: '300',
        WEBHOOK_CONCURRENCY: String(TOTAL),
        WEBHOOK_CONCURRENCY_PER_KEY: String(limits.perKey),
        WEBHOOK_CONCURRENCY_PER_RECEIVER: String(limits.perReceiver),
      },
    });
  }

  async function call<B = JobBody>(
    svc: ServiceHandle,
    key: string,
    route: string,
    body?: object,
  ): Promise<{ status: number; body: B }> {
    const res = await fetch(`${svc.baseUrl}${route}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, body: (await res.json()) as B };
  }

  let jobs = 0;
  const source = () => media.url(`/never?n=${kind}-${++jobs}`);

  /** Key B's job with a callback to the answering receiver, canceled: ms from its end to its callback's arrival. */
  async function honestCallbackDelay(svc: ServiceHandle, path: string): Promise<number> {
    const submitted = await call(svc, KEY_B, '/sources', { url: source(), callback_url: honest.url(path) });
    expect(submitted.status, JSON.stringify(submitted.body)).toBe(202);
    const ended = await call(svc, KEY_B, `/jobs/${submitted.body.job_id}/cancel`);
    expect(ended.status).toBe(200);
    const endedAt = Date.now();
    const [request] = await honest.waitForRequests(1, 60_000, (r) => r.path === path);
    expect(JSON.parse(request!.body)).toMatchObject({ job_id: submitted.body.job_id, status: 'canceled' });
    return request!.at - endedAt;
  }

  /** Key A: a batch of 100 jobs calling back the first silent receiver, 10 more for each of the others, all ended. */
  async function attack(svc: ServiceHandle): Promise<void> {
    const batch = await call<{ results: Array<{ job: JobBody }> }>(svc, KEY_A, '/sources/batch', {
      urls: Array.from({ length: 100 }, source),
      callback_url: silent[0]!.url('/batch'),
    });
    expect(batch.status).toBe(200);
    const ids = batch.body.results.map((item) => item.job.job_id);
    for (const receiver of silent.slice(1)) {
      for (let i = 0; i < 10; i++) {
        const single = await call(svc, KEY_A, '/sources', { url: source(), callback_url: receiver.url('/single') });
        expect(single.status).toBe(202);
        ids.push(single.body.job_id);
      }
    }
    for (const id of ids) expect((await call(svc, KEY_A, `/jobs/${id}/cancel`)).status).toBe(200);
  }

  it("attempts another key's callback to an answering receiver at once, however many wait on silent ones", async () => {
    const svc = await startNode({ perKey: PER_KEY, perReceiver: PER_RECEIVER });
    try {
      const before = await honestCallbackDelay(svc, `/${kind}/fair-before`);
      const attackedAt = Date.now();
      const silentBefore = silentRequests();
      await attack(svc);
      // Key A's share of the node is taken: its attempts wait on receivers that never answer.
      await silentReceived(silentBefore + PER_KEY);
      const during = await honestCallbackDelay(svc, `/${kind}/fair-during`);
      // After A's first attempts timed out and their receivers were backed off.
      await silentReceived(silentBefore + PER_KEY + 1);
      const after = await honestCallbackDelay(svc, `/${kind}/fair-after`);
      // A never had more than its share under way, nor a silent receiver more than its own.
      const attackRequests = (receiver: WebhookReceiver) => receiver.requests.filter((r) => r.at >= attackedAt);
      expect(mostAtOnce(silent.flatMap(attackRequests))).toBe(PER_KEY);
      for (const receiver of silent) expect(mostAtOnce(attackRequests(receiver))).toBeLessThanOrEqual(PER_RECEIVER);

      console.log(
        `${kind}, limits on: key B's callback ${before} ms after its job ended before the attack, ${during} ms during it, ${after} ms later`,
      );
      // Never behind an attempt that times out: the control's delay is at least that.
      expect(before).toBeLessThan(UNDELAYED_MS);
      expect(during).toBeLessThan(UNDELAYED_MS);
      expect(after).toBeLessThan(UNDELAYED_MS);
    } finally {
      await svc.stop();
    }
  });

  it('control: with the limits as large as the node, the same attack delays that callback by a whole attempt time-out', async () => {
    const svc = await startNode({ perKey: TOTAL, perReceiver: TOTAL });
    try {
      const before = await honestCallbackDelay(svc, `/${kind}/unfair-before`);
      const attackedAt = Date.now();
      const silentBefore = silentRequests();
      await attack(svc);
      await silentReceived(silentBefore + TOTAL);
      const during = await honestCallbackDelay(svc, `/${kind}/unfair-during`);
      // The count above can see more than a key's share: here A held every slot of the node.
      expect(mostAtOnce(silent.flatMap((receiver) => receiver.requests.filter((r) => r.at >= attackedAt)))).toBe(TOTAL);

      console.log(
        `${kind}, limits off: key B's callback ${before} ms after its job ended before the attack, ${during} ms during it`,
      );
      expect(before).toBeLessThan(UNDELAYED_MS);
      expect(during).toBeGreaterThanOrEqual(UNDELAYED_MS);
    } finally {
      await svc.stop();
    }
  });
});
