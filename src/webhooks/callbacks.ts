import type { Database } from '../db/database.js';
import { createTcpDialer } from '../egress/guard.js';
import type { Logger } from '../logger.js';
import { createDeliveryWorker, type DeliveryWorker } from './delivery-worker.js';
import { createCallbackSender, type CallbackSenderDeps, type SendResult } from './send.js';

/** A callback attempt's lease outlives its time limit by this much (writing its outcome). */
const CALLBACK_LEASE_MARGIN_MS = 5_000;

/** The part of the configuration (src/config.ts) callbacks use. */
export interface CallbacksConfig {
  allowHosts: CallbackSenderDeps['allowHosts'];
  webhooks: {
    timeoutMs: number;
    connectTimeoutMs: number;
    retryBaseMs: number;
    retryForMs: number;
    concurrency: { total: number; perKey: number; perReceiver: number };
  };
}

export interface CallbacksDeps {
  database: Database;
  resolve: CallbackSenderDeps['resolve'];
  /** The secrets that sign the callbacks of a key's jobs, by the job's key identity. */
  secretsOf: (keyIdentity: string) => readonly string[];
  /** The body: the job record, as getJob answers it at the time of the attempt. */
  renderJob: (jobId: string) => Promise<unknown>;
  /** Each attempt's result, but one cut short by this node's stop: it is given back unmade. */
  onAttempt: (result: SendResult) => void;
  /** Each job's end, on this node: one known to have no callback (most born-done ones) wakes nobody, each wake being a claim query. */
  jobEnds: { on(listener: (end: { mayHaveCallback: boolean }) => void): void };
  nodeId: string;
  now: () => number;
  log: Logger;
  onStop: (stop: () => void | Promise<void>) => void;
}

/**
 * Job callbacks: sent at once for jobs that end on this node, found by polling for other nodes'.
 */
export function createCallbacks(config: CallbacksConfig, deps: CallbacksDeps): DeliveryWorker {
  const sendCallback = createCallbackSender({
    resolve: deps.resolve,
    dial: createTcpDialer(),
    allowHosts: config.allowHosts,
    timeoutMs: config.webhooks.timeoutMs,
    connectTimeoutMs: config.webhooks.connectTimeoutMs,
  });
  const callbacks = createDeliveryWorker({
    database: deps.database,
    nodeId: deps.nodeId,
    now: deps.now,
    log: deps.log,
    secretsOf: deps.secretsOf,
    renderJob: deps.renderJob,
    send: async (request, signal) => {
      const result = await sendCallback(request, signal);
      if (result.error !== 'aborted') deps.onAttempt(result);
      return result;
    },
    schedule: { baseMs: config.webhooks.retryBaseMs, retryForMs: config.webhooks.retryForMs },
    leaseMs: config.webhooks.timeoutMs + CALLBACK_LEASE_MARGIN_MS,
    concurrency: config.webhooks.concurrency,
  });
  deps.jobEnds.on(({ mayHaveCallback }) => {
    if (mayHaveCallback) callbacks.wake();
  });
  deps.onStop(() => callbacks.stop());
  return callbacks;
}
