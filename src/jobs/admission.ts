import type { Database } from '../db/database.js';
import { ServiceError } from '../errors.js';
import { countQueued } from './queue.js';

/**
 * Whether a new job may be queued now: not while the tools cannot be confined (fail closed), nor
 * past MAX_QUEUED_JOBS queued jobs (across every node: the queue is the database's).
 */
export function createAdmission(deps: {
  database: Database;
  maxQueuedJobs: number;
  confinementOk: () => boolean;
}): () => Promise<void> {
  return async () => {
    if (!deps.confinementOk()) {
      throw new ServiceError(
        'unavailable',
        'confinement_unavailable',
        'Fetching is disabled: the tools cannot be confined to the egress guard on this host (see /healthz).',
        {
          retryAfterSeconds: 60,
        },
      );
    }
    if ((await countQueued(deps.database)) >= deps.maxQueuedJobs) {
      throw new ServiceError('rate_limited', 'queue_full', 'Too many jobs are waiting; try again later.', {
        retryAfterSeconds: 30,
      });
    }
  };
}
