import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../../src/db/database.js';
import { httpStatusError } from '../../src/job-errors.js';
import {
  claimNextJob,
  getJobRow,
  markCanceled,
  markDone,
  markFailed,
  reclaimExpiredLeases,
  releaseJob,
} from '../../src/jobs/queue.js';
import { submitJob, type SubmitDeps } from '../../src/jobs/submit.js';
import { createLogger } from '../../src/logger.js';
import { setAlias } from '../../src/store/aliases.js';
import { recordCacheEntry } from '../../src/store/cache-entries.js';
import {
  ATTEMPT_LOG_SIZE,
  attemptsOf,
  callbackRecorder,
  claimDueDelivery,
  deliveryForJob,
  recordAttempt,
  releaseDelivery,
} from '../../src/webhooks/deliveries.js';
import { createDeliveryWorker, type DeliveryWorkerDeps } from '../../src/webhooks/delivery-worker.js';
import type { CallbackRequest, SendResult } from '../../src/webhooks/send.js';
import { keyWebhookSecret, keyWebhookSecrets } from '../../src/webhooks/key-secrets.js';
import { webhookSignature } from '../../src/webhooks/signature.js';
import { BACKENDS, openTestDatabase, wavEntry } from '../support/test-database.js';

/** Callback deliveries on a real database of each kind: when they become due, their leases, and the worker's retries. */
const LEASE_MS = 10_000;
const CALLBACK = 'https://hooks.example/done';
const SECRET = 'a-test-secret-of-at-least-32-characters';

describe.each(BACKENDS)('callback deliveries on %s', (kind) => {
  let database: Database;
  let clock: number;
  let ids: number;

  beforeEach(async () => {
    database = await openTestDatabase(kind);
    clock = 1_000_000;
    ids = 0;
  });
  afterEach(async () => {
    await database.close();
  });

  const submitDeps = (contentPresent = false): SubmitDeps => ({
    database,
    now: () => clock,
    newJobId: () => `job-${++ids}`,
    recordCallback: callbackRecorder(() => `delivery-${ids}`),
    checkDestination: async () => {},
    contentPresent: () => contentPresent,
    admitJob: async () => {},
    onQueued: () => {},
  });
  /** Each submission a millisecond after the one before, so the claim order is the submission order. */
  const submit = async (url: string, callbackUrl: string | null = CALLBACK, contentPresent = false) => {
    const { job } = await submitJob({
      deps: submitDeps(contentPresent),
      input: { url, callbackUrl: callbackUrl ?? undefined },
    });
    clock += 1;
    return job;
  };
  const lease = (owner: string) => ({ owner, now: clock, leaseMs: LEASE_MS });

  /** The job ids whose deliveries are due now (each claimed, then given back). */
  async function dueJobs(): Promise<string[]> {
    const found: string[] = [];
    for (;;) {
      const claimed = await claimDueDelivery(database, lease('probe'));
      if (!claimed) break;
      found.push(claimed.jobId);
    }
    for (const jobId of found) await releaseDelivery(database, (await deliveryForJob(database, jobId))!.id, 'probe');
    return found.sort();
  }

  it('writes the delivery with its job, and makes it due exactly when the job ends, however it ends', async () => {
    // In claim order: the first six are claimed below.
    const done = await submit('https://m.example/done');
    const failed = await submit('https://m.example/failed');
    const canceledRunning = await submit('https://m.example/canceled-running');
    const exhausted = await submit('https://m.example/exhausted');
    const thrown = await submit('https://m.example/thrown');
    const leader = await submit('https://m.example/shared', null);
    const follower = await submit('https://m.example/shared');
    const canceledQueued = await submit('https://m.example/canceled-queued');
    const withoutCallback = await submit('https://m.example/none', null);
    expect(follower.followsJobId).toBe(leader.id);
    expect(await deliveryForJob(database, withoutCallback.id)).toBeUndefined();
    expect(await deliveryForJob(database, done.id)).toMatchObject({
      jobId: done.id,
      url: CALLBACK,
      status: 'pending',
      attemptCount: 0,
    });
    // Queued jobs: nothing is due.
    expect(await dueJobs()).toEqual([]);

    const running: string[] = [];
    for (let i = 0; i < 6; i++) running.push((await claimNextJob(database, lease('n1')))!.id);
    expect(running).toEqual([done.id, failed.id, canceledRunning.id, exhausted.id, thrown.id, leader.id]);
    // Running jobs: nothing is due either.
    expect(await dueJobs()).toEqual([]);

    clock += 1;
    await markDone(database, done.id, 'n1', 'cid-1', clock);
    await markFailed(database, failed.id, 'n1', httpStatusError(404, null), clock);
    await markCanceled(database, canceledQueued.id, clock);
    await markCanceled(database, canceledRunning.id, clock);
    await releaseJob(database, thrown.id, 'n1', 1, clock);
    // The leader ends, its follower (which has the callback) with it.
    await markDone(database, leader.id, 'n1', 'cid-2', clock);
    expect((await getJobRow(database, follower.id))?.status).toBe('done');
    // A dead node's job, its attempts spent, failed by the lease sweep.
    clock += LEASE_MS + 1;
    const swept = await reclaimExpiredLeases(database, 1, clock);
    expect(swept.failed.map((ended) => ended.job.id)).toEqual([exhausted.id]);

    expect(await dueJobs()).toEqual(
      [done.id, failed.id, canceledQueued.id, canceledRunning.id, exhausted.id, thrown.id, follower.id].sort(),
    );
  });

  it('makes a born-done job’s delivery due at once', async () => {
    await recordCacheEntry(database, wavEntry('cid-stored'), clock);
    await setAlias(database, 'url', 'https://m.example/stored', 'cid-stored', clock);
    const job = await submit('https://m.example/stored', CALLBACK, true);
    expect(job).toMatchObject({ status: 'done', bornDone: true });
    expect(await dueJobs()).toEqual([job.id]);
  });

  it('leases a delivery to one node at a time; a dead node’s goes to another once its lease runs out', async () => {
    const job = await submit('https://m.example/a');
    await markCanceled(database, job.id, clock);
    const first = await claimDueDelivery(database, lease('n1'));
    expect(first).toMatchObject({ jobId: job.id, lockOwner: 'n1', leaseExpiresAt: clock + LEASE_MS });
    expect(await claimDueDelivery(database, lease('n2'))).toBeUndefined();

    clock += LEASE_MS + 1;
    const second = await claimDueDelivery(database, lease('n2'));
    expect(second).toMatchObject({ id: first!.id, lockOwner: 'n2' });
    // n1 comes back from the dead with its outcome: it no longer holds the lease, nothing is written.
    expect(
      await recordAttempt(
        database,
        first!,
        'n1',
        { at: clock, status: 200, error: null },
        { status: 'delivered', now: clock },
      ),
    ).toBe(false);
    expect(
      await recordAttempt(
        database,
        second!,
        'n2',
        { at: clock, status: 200, error: null },
        { status: 'delivered', now: clock },
      ),
    ).toBe(true);
    const row = (await deliveryForJob(database, job.id))!;
    expect(row).toMatchObject({ status: 'delivered', attemptCount: 1, lockOwner: null, finishedAt: clock });
    expect(attemptsOf(row)).toEqual([{ at: clock, status: 200, error: null }]);
    // Delivered: never due again.
    clock += 10 * LEASE_MS;
    expect(await claimDueDelivery(database, lease('n3'))).toBeUndefined();
  });

  describe('the delivery worker', () => {
    let sent: CallbackRequest[];
    let answers: SendResult[];
    let send: DeliveryWorkerDeps['send'];

    beforeEach(() => {
      sent = [];
      answers = [];
      send = (request) => {
        sent.push(request);
        return Promise.resolve(answers.shift() ?? { status: 200, error: null });
      };
    });

    const worker = (overrides: Partial<DeliveryWorkerDeps> = {}) =>
      createDeliveryWorker({
        database,
        nodeId: 'n1',
        now: () => clock,
        log: createLogger('silent'),
        secretsOf: (key) => keyWebhookSecrets(SECRET, key),
        renderJob: async (jobId) => ({ job_id: jobId, status: (await getJobRow(database, jobId))?.status }),
        send,
        schedule: { baseMs: 1_000, retryForMs: 60_000 },
        leaseMs: LEASE_MS,
        random: () => 0,
        ...overrides,
      });
    const runDue = async (w: ReturnType<typeof worker>) => {
      w.wake();
      await w.settle();
    };

    it('retries on the schedule with the same id, each attempt signed, until a 2xx', async () => {
      const job = await submit('https://m.example/a');
      await markCanceled(database, job.id, clock);
      answers.push({ status: 500, error: null }, { status: null, error: 'connect_failed' });
      const w = worker();
      await runDue(w);
      expect(sent).toHaveLength(1);
      let row = (await deliveryForJob(database, job.id))!;
      expect(row).toMatchObject({ status: 'pending', attemptCount: 1, nextAttemptAt: clock + 1_000 });

      // Not yet due: nothing is sent...
      clock += 999;
      await runDue(w);
      expect(sent).toHaveLength(1);
      // ...and at the retry time it is (the same worker, so the check above could have seen it).
      clock += 1;
      await runDue(w);
      expect(sent).toHaveLength(2);
      row = (await deliveryForJob(database, job.id))!;
      // The second failure doubles the delay.
      expect(row).toMatchObject({ status: 'pending', attemptCount: 2, nextAttemptAt: clock + 2_000 });
      clock += 2_000;
      await runDue(w);
      row = (await deliveryForJob(database, job.id))!;
      expect(row).toMatchObject({ status: 'delivered', attemptCount: 3, finishedAt: clock });
      expect(attemptsOf(row).map(({ status, error }) => status ?? error)).toEqual([500, 'connect_failed', 200]);

      expect(new Set(sent.map((request) => request.headers['webhook-id']))).toEqual(new Set([row.id]));
      // Signed with the secret of the job's key (a job submitted without one: the identity ''), never with WEBHOOK_SECRET itself.
      const secret = keyWebhookSecret(SECRET, job.apiKeyId);
      for (const request of sent) {
        expect(JSON.parse(request.body)).toEqual({ job_id: job.id, status: 'canceled' });
        const timestamp = Number(request.headers['webhook-timestamp']);
        expect(request.headers['webhook-signature']).toBe(webhookSignature(secret, row.id, timestamp, request.body));
        // Another secret, id or body would not match.
        expect(request.headers['webhook-signature']).not.toBe(
          webhookSignature(SECRET, row.id, timestamp, request.body),
        );
        expect(request.headers['webhook-signature']).not.toBe(
          webhookSignature(secret, 'another-id', timestamp, request.body),
        );
      }
      await w.stop();
    });

    it("signs each job's callback with its own key's secret: one per WEBHOOK_SECRET entry, and not another key's", async () => {
      const masters = `${SECRET} another-test-secret-of-32-characters-0`;
      const ofKey = async (apiKeyId: string) => {
        const { job } = await submitJob({
          deps: submitDeps(),
          input: { url: `https://m.example/${apiKeyId}`, callbackUrl: CALLBACK, apiKeyId },
        });
        clock += 1;
        await markCanceled(database, job.id, clock);
        return job.id;
      };
      const jobA = await ofKey('key-a');
      const jobB = await ofKey('key-b');
      const w = worker({ secretsOf: (key) => keyWebhookSecrets(masters, key) });
      await runDue(w);
      await w.stop();
      expect(sent).toHaveLength(2);
      const signed = (jobId: string) => {
        const request = sent.find((r) => (JSON.parse(r.body) as { job_id: string }).job_id === jobId)!;
        const timestamp = Number(request.headers['webhook-timestamp']);
        const under = (secret: string) =>
          webhookSignature(secret, request.headers['webhook-id']!, timestamp, request.body);
        return { signatures: request.headers['webhook-signature']!.split(' '), under };
      };
      const a = signed(jobA);
      const b = signed(jobB);
      expect(a.signatures).toEqual(keyWebhookSecrets(masters, 'key-a').map(a.under));
      expect(b.signatures).toEqual(keyWebhookSecrets(masters, 'key-b').map(b.under));
      for (const secret of keyWebhookSecrets(masters, 'key-b')) expect(a.signatures).not.toContain(a.under(secret));
      for (const secret of keyWebhookSecrets(masters, 'key-a')) expect(b.signatures).not.toContain(b.under(secret));
    });

    it('gives up once the next attempt would start past WEBHOOK_RETRY_FOR_S after the job ended, keeping the latest attempts', async () => {
      const job = await submit('https://m.example/a');
      await markCanceled(database, job.id, clock);
      const endedAt = clock;
      for (let i = 0; i < 20; i++) answers.push({ status: 503, error: null });
      // 1 s doubling, capped at an hour: attempts at 0, 1, 3, 7, 15, 31, 63, 127, 255, 511, 1023, 2047 s; the next (4095 s) is past 4000 s.
      const w = worker({ schedule: { baseMs: 1_000, retryForMs: 4_000_000 } });
      for (let round = 0; round < 30; round++) {
        await runDue(w);
        const row = (await deliveryForJob(database, job.id))!;
        if (row.status !== 'pending') break;
        clock = row.nextAttemptAt;
      }
      const row = (await deliveryForJob(database, job.id))!;
      expect(row).toMatchObject({ status: 'failed', attemptCount: 12 });
      expect(clock - endedAt).toBe(2_047_000);
      const log = attemptsOf(row);
      expect(log).toHaveLength(ATTEMPT_LOG_SIZE);
      expect(log.at(-1)).toEqual({ at: clock, status: 503, error: null });
      expect(log[0]!.at).toBe(endedAt + 3_000);
      // Failed for good: never due again.
      clock += 10_000_000;
      await runDue(w);
      expect(sent).toHaveLength(12);
      await w.stop();
    });

    it('on stop, gives an attempt in flight back unrecorded, and another node delivers it', async () => {
      const job = await submit('https://m.example/a');
      await markCanceled(database, job.id, clock);
      let started!: () => void;
      const inFlight = new Promise<void>((resolve) => (started = resolve));
      const hanging = worker({
        send: (request, signal) => {
          sent.push(request);
          started();
          return new Promise((resolve) => {
            const aborted = () => resolve({ status: null, error: 'aborted' });
            if (signal.aborted) aborted();
            else signal.addEventListener('abort', aborted);
          });
        },
      });
      hanging.wake();
      await inFlight;
      expect(await deliveryForJob(database, job.id)).toMatchObject({ lockOwner: 'n1' });
      await hanging.stop();
      expect(await deliveryForJob(database, job.id)).toMatchObject({
        status: 'pending',
        attemptCount: 0,
        lockOwner: null,
        leaseExpiresAt: null,
      });

      // At once, not after a lease: the next node takes it.
      const next = worker({ nodeId: 'n2' });
      await runDue(next);
      const row = (await deliveryForJob(database, job.id))!;
      expect(row).toMatchObject({ status: 'delivered', attemptCount: 1 });
      expect(sent.map((request) => request.headers['webhook-id'])).toEqual([row.id, row.id]);
      await next.stop();
    });
  });
});
