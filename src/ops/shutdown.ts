import type { Logger } from '../logger.js';

/**
 * Graceful shutdown on SIGTERM or SIGINT: stop taking requests (requests still arriving on open
 * keep-alive connections get 503), let running jobs finish within the grace period (then they go
 * back to the queue for any node), then stop the rest in order and exit.
 */
export interface Shutdown {
  /** True once a signal arrived: the HTTP front answers 503. */
  readonly stopping: boolean;
  /** The first step: stop taking requests. */
  closeFrontWith(close: () => void): void;
  /** The second: let running jobs finish within the grace period. */
  drainWorkersWith(drain: (graceMs: number) => Promise<void>): void;
  /**
   * Then the rest, each part stopped by the step it registered when it was built, in the reverse
   * order of building: what was built first (the database) stops last.
   */
  onStop(step: () => Promise<void> | void): void;
  run(signal: string): Promise<void>;
}

export function createShutdown(deps: { log: Logger; graceMs: number; exit: (code: number) => void }): Shutdown {
  let stopping = false;
  let closeFront = () => {};
  let drainWorkers: (graceMs: number) => Promise<void> = () => Promise.resolve();
  const steps: Array<() => Promise<void> | void> = [];
  return {
    get stopping() {
      return stopping;
    },
    closeFrontWith: (close) => void (closeFront = close),
    drainWorkersWith: (drain) => void (drainWorkers = drain),
    onStop: (step) => void steps.push(step),
    async run(signal) {
      if (stopping) return;
      stopping = true;
      deps.log.info({ signal, grace_ms: deps.graceMs }, 'shutting down: no new work, draining running jobs');
      closeFront();
      await drainWorkers(deps.graceMs);
      for (const step of steps.toReversed()) {
        await Promise.resolve()
          .then(step)
          .catch((err: unknown) => deps.log.error({ err }, 'shutdown step failed'));
      }
      deps.log.info('stopped');
      deps.exit(0);
    },
  };
}
