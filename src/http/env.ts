import type { Logger } from '../logger.js';

/** Per-request values set by middleware. */
export interface AppEnv {
  Variables: {
    requestId: string;
    log: Logger;
  };
}
