import type { Db } from '../db/client.js';
import type { JobRow } from '../db/schema.js';
import { ServiceError } from '../errors.js';
import { getJobRow, markCanceled } from './queue.js';

/**
 * cancelJob: queued → canceled at once; running → canceled, and the worker running it is told
 * to kill its tools and drop its work; canceled → the same record again; done or failed → 409.
 */
export interface CancelDeps {
  db: Db;
  now: () => number;
  /** Aborts the job if a worker in this process is running it. */
  abortRunningJob: (jobId: string) => void;
}

export function cancelJob({ deps, input }: { deps: CancelDeps; input: { jobId: string } }): JobRow {
  const before = getJobRow(deps.db, input.jobId);
  if (!before) throw new ServiceError('not_found', 'job_not_found', 'No job has this id.');
  if (before.status === 'canceled') return before;
  if (before.status === 'done' || before.status === 'failed') {
    throw new ServiceError('conflict', 'job_already_finished', `The job is already ${before.status} and cannot be canceled.`, {
      fields: { status: before.status },
    });
  }
  const after = markCanceled(deps.db, input.jobId, deps.now());
  if (!after) throw new ServiceError('not_found', 'job_not_found', 'No job has this id.');
  if (after.status !== 'canceled') {
    // It finished between the read and the update.
    throw new ServiceError('conflict', 'job_already_finished', `The job is already ${after.status} and cannot be canceled.`, {
      fields: { status: after.status },
    });
  }
  if (before.status === 'running') deps.abortRunningJob(input.jobId);
  return after;
}
