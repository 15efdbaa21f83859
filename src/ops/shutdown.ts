import type { Logger } from '../logger.js';

/**
 * Graceful shutdown on SIGTERM or SIGINT: stop taking requests (requests still arriving on open
 * keep-alive connections get 503), let running jobs finish within the grace period (then they go
 * back to the queue for any node), then stop the rest in order and exit.
 */
export interface Shutdown {
  /** True once a signal arrived: the HTTP front answers 503. */
  readonly stopping: boolean;
  run(signal: string): Promise<void>;
}

export function createShutdown(deps: {
  log: Logger;
  graceMs: number;
  closeServer: () => void;
  stopWorkers: (graceMs: number) => Promise<void>;
  /** Run in order after the workers are done. */
  then: Array<() => Promise<void>>;
  exit: (code: number) => void;
}): Shutdown {
  let stopping = false;
  return {
    get stopping() {
      return stopping;
    },
    async run(signal) {
      if (stopping) return;
      stopping = true;
      deps.log.info({ signal, grace_ms: deps.graceMs }, 'shutting down: no new work, draining running jobs');
      deps.closeServer();
      await deps.stopWorkers(deps.graceMs);
      for (const step of deps.then) await step().catch((err: unknown) => deps.log.error({ err }, 'shutdown step failed'));
      deps.log.info('stopped');
      deps.exit(0);
    },
  };
}
