import type { RequestFacts } from './request-envelope.js';

/** Per-request values set by middleware. */
export interface AppEnv {
  Variables: {
    /** The request id, its logger, and the route and job for its access-log line. */
    facts: RequestFacts;
  };
}
