import type { Logger } from '../logger.js';

/** Per-request values set by middleware. */
export interface AppEnv {
  Variables: {
    requestId: string;
    log: Logger;
    /** The job a request created or addressed, for its access-log line. */
    jobId?: string;
  };
}
