import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../../src/db/database.js';
import { markCanceled } from '../../src/jobs/queue.js';
import { submitJob, type SubmitDeps } from '../../src/jobs/submit.js';
import { createLogger } from '../../src/logger.js';
import { callbackRecorder, deliveryForJob } from '../../src/webhooks/deliveries.js';
import {
  createDeliveryWorker,
  type DeliveryWorker,
  type DeliveryWorkerDeps,
} from '../../src/webhooks/delivery-worker.js';
import { createReceiverBackoff } from '../../src/webhooks/receiver-backoff.js';
import type { CallbackRequest, SendResult } from '../../src/webhooks/send.js';
import { BACKENDS, openTestDatabase } from '../support/test-database.js';

/**
 * The delivery worker's fairness on a real database of each kind, with a sender that stands for
 * the receivers: those under `silent` hold their attempt until the worker stops (a receiver that
 * accepts and never answers), or fail at once without an answer when told; any other answers 200.
 * Each limit is shown holding, beside the same setup without it, where the honest callback waits.
 */
describe.each(BACKENDS)('fair callbacks on %s', (kind) => {
  let database: Database;
  let clock: number;
  let ids: number;
  let sent: CallbackRequest[];
  let workers: DeliveryWorker[];
  /** Wakes whoever waits for a send. */
  let onSend: Array<() => void>;

  beforeEach(async () => {
    database = await openTestDatabase(kind);
    clock = 1_000_000;
    ids = 0;
    sent = [];
    workers = [];
    onSend = [];
  });
  afterEach(async () => {
    for (const w of workers) await w.stop();
    await database.close();
  });

  const submitDeps = (): SubmitDeps => ({
    database,
    now: () => clock,
    newJobId: () => `job-${++ids}`,
    recordCallback: callbackRecorder(() => `delivery-${ids}`),
    checkDestination: async () => {},
    contentPresent: () => false,
    admitJob: async () => {},
    onQueued: () => {},
  });

  /** A job of `apiKeyId` with a callback to `callbackUrl`, ended (canceled) a millisecond after the one before. */
  async function endedWithCallback(apiKeyId: string, callbackUrl: string): Promise<string> {
    const { job } = await submitJob({
      deps: submitDeps(),
      input: { url: `https://m.example/${ids}`, callbackUrl, apiKeyId },
    });
    await markCanceled(database, job.id, clock);
    clock += 1;
    return job.id;
  }

  const silent = (request: CallbackRequest) => new URL(request.url).hostname.startsWith('silent');
  /** How the silent receivers take an attempt: hold it (until failed() or the worker stops), or answer 200. */
  let silentMode: 'hold' | 'answer';
  let held: Array<(result: SendResult) => void>;
  beforeEach(() => {
    silentMode = 'hold';
    held = [];
  });
  /** The attempts held so far end without an answer (their time limit). */
  const failHeld = () => {
    for (const settle of held.splice(0)) settle({ status: null, error: 'timeout' });
  };

  function worker(concurrency: DeliveryWorkerDeps['concurrency']): DeliveryWorker {
    const w = createDeliveryWorker({
      database,
      nodeId: 'n1',
      now: () => clock,
      log: createLogger('silent'),
      secretsOf: () => ['a-test-secret-of-at-least-32-characters'],
      renderJob: (jobId) => Promise.resolve({ job_id: jobId }),
      send: (request, stop) => {
        sent.push(request);
        for (const wake of onSend.splice(0)) wake();
        if (!silent(request) || silentMode === 'answer') return Promise.resolve({ status: 200, error: null });
        return new Promise<SendResult>((resolve) => {
          held.push(resolve);
          stop.addEventListener('abort', () => resolve({ status: null, error: 'aborted' }), { once: true });
        });
      },
      schedule: { baseMs: 1_000, retryForMs: 3_600_000 },
      leaseMs: 60_000,
      random: () => 0,
      concurrency,
    });
    workers.push(w);
    return w;
  }

  /** Resolves once `count` sends match. */
  async function sends(
    count: number,
    where: (request: CallbackRequest) => boolean = () => true,
  ): Promise<CallbackRequest[]> {
    while (sent.filter(where).length < count) await new Promise<void>((wake) => onSend.push(wake));
    return sent.filter(where);
  }

  it('holds a receiver that never answers to its share: a callback to another receiver is sent at once', async () => {
    for (let i = 0; i < 10; i++) await endedWithCallback('key-a', 'https://silent.example/hook');
    const honest = await endedWithCallback('key-b', 'https://fast.example/hook');

    const fair = worker({ total: 4, perKey: 10, perReceiver: 2 });
    fair.wake();
    await sends(1, (r) => !silent(r));
    // Stopped: every claim and attempt of the worker is over, so the count is final.
    await fair.stop();
    expect(sent.filter(silent)).toHaveLength(2);
    expect(await deliveryForJob(database, honest)).toMatchObject({ status: 'delivered' });
  });

  it('control: without a limit per receiver, the silent receiver takes every slot and the honest callback waits', async () => {
    for (let i = 0; i < 10; i++) await endedWithCallback('key-a', 'https://silent.example/hook');
    const honest = await endedWithCallback('key-b', 'https://fast.example/hook');

    const unfair = worker({ total: 4, perKey: 10, perReceiver: 10 });
    unfair.wake();
    // Four attempts under way fill the node: no claim is made after the fourth.
    await sends(4, silent);
    await unfair.stop();
    expect(sent.filter((r) => !silent(r))).toEqual([]);
    expect(await deliveryForJob(database, honest)).toMatchObject({ status: 'pending', attemptCount: 0 });
  });

  it("holds a key to its share across any number of receivers: another key's callback is sent at once", async () => {
    for (let i = 0; i < 8; i++) await endedWithCallback('key-a', `https://silent-${i}.example/hook`);
    const honest = await endedWithCallback('key-b', 'https://fast.example/hook');

    const fair = worker({ total: 4, perKey: 2, perReceiver: 2 });
    fair.wake();
    await sends(1, (r) => !silent(r));
    await fair.stop();
    expect(sent.filter(silent)).toHaveLength(2);
    expect(sent.find((r) => !silent(r))!.client).toBe('key:key-b');
    expect(await deliveryForJob(database, honest)).toMatchObject({ status: 'delivered' });
  });

  it('control: without a limit per key, one key on many receivers takes every slot', async () => {
    for (let i = 0; i < 8; i++) await endedWithCallback('key-a', `https://silent-${i}.example/hook`);
    const honest = await endedWithCallback('key-b', 'https://fast.example/hook');

    const unfair = worker({ total: 4, perKey: 10, perReceiver: 2 });
    unfair.wake();
    await sends(4, silent);
    await unfair.stop();
    expect(sent.filter((r) => !silent(r))).toEqual([]);
    expect(await deliveryForJob(database, honest)).toMatchObject({ status: 'pending', attemptCount: 0 });
  });

  it('backs a receiver that gives no answer off for a growing time, alone, and ends it at its first answer', async () => {
    const silentJobs: string[] = [];
    for (let i = 0; i < 5; i++) silentJobs.push(await endedWithCallback('key-a', 'https://silent.example/hook'));
    const w = worker({ total: 4, perKey: 10, perReceiver: 2 });
    const pendingUntil = async () =>
      new Set(await Promise.all(silentJobs.map(async (id) => (await deliveryForJob(database, id))!.nextAttemptAt)));
    const runDue = async () => {
      w.wake();
      await w.settle();
    };

    // Round by round: two attempts (the receiver's share) fail together and count once; every
    // delivery to it is then put off to the same time, 1 s, then 2 s, then 4 s away.
    for (const delay of [1_000, 2_000, 4_000]) {
      const start = clock;
      const before = sent.filter(silent).length;
      w.wake();
      await sends(before + 2, silent);
      failHeld();
      await w.settle();
      expect(sent.filter(silent).length - before).toBe(2);
      expect(await pendingUntil()).toEqual(new Set([start + delay]));

      // Meanwhile a callback to another receiver goes at once...
      const honest = await endedWithCallback('key-b', 'https://fast.example/hook');
      await runDue();
      expect(await deliveryForJob(database, honest)).toMatchObject({ status: 'delivered', attemptCount: 1 });
      // ...and nothing goes to the silent one until its time (the next round shows that it then does).
      clock = start + delay - 1;
      await runDue();
      expect(sent.filter(silent).length - before).toBe(2);
      clock = start + delay;
    }

    // The receiver answers again: its first answer ends the backoff, and the rest go at once.
    silentMode = 'answer';
    for (let round = 0; round < 3; round++) await runDue();
    for (const id of silentJobs) expect(await deliveryForJob(database, id)).toMatchObject({ status: 'delivered' });
  });

  it('counts failures that come together once, and forgets a receiver at its answer', () => {
    const backoff = createReceiverBackoff(1_000);
    expect(backoff.until('https://r.example', 0)).toBe(0);
    expect(backoff.failed('https://r.example', 10)).toBe(1_010);
    expect(backoff.failed('https://r.example', 20)).toBe(1_010);
    expect(backoff.until('https://r.example', 500)).toBe(1_010);
    expect(backoff.until('https://other.example', 500)).toBe(0);
    expect(backoff.failed('https://r.example', 1_010)).toBe(3_010);
    expect(backoff.failed('https://r.example', 3_010)).toBe(7_010);
    backoff.answered('https://r.example');
    expect(backoff.until('https://r.example', 3_100)).toBe(0);
    expect(backoff.failed('https://r.example', 8_000)).toBe(9_000);
  });
});
