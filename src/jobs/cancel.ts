import type { Database, JobRow } from '../db/database.js';
import { ServiceError } from '../errors.js';
import { cancelActiveChildren, getJobRow, markCanceled } from './queue.js';

/**
 * cancelJob: queued → canceled at once; running → canceled, and the node running it (whichever
 * it is) is told to kill its tools and drop its work; canceled → the same record again; done or
 * failed → 409. A collection (./collection/parent.ts) takes its queued and running children with it,
 * canceled a batch to a transaction (cancelActiveChildren); its children already ended stay as they are.
 */
export interface CancelDeps {
  database: Database;
  now: () => number;
  /** Tells the node running the job, wherever it is, to stop it. */
  stopRunningJob: (jobId: string) => Promise<void>;
}

export interface Canceled {
  job: JobRow;
  /** False when it was canceled before: nothing changed now. */
  changed: boolean;
  /** A collection's children this cancel ended. */
  children: JobRow[];
}

export async function cancelJob({ deps, input }: { deps: CancelDeps; input: { jobId: string } }): Promise<Canceled> {
  const change = await markCanceled(deps.database, input.jobId, deps.now());
  if (!change) throw new ServiceError('not_found', 'job_not_found', 'No job has this id.');
  const { before, after } = change;
  if (after.status !== 'canceled') {
    throw new ServiceError(
      'conflict',
      'job_already_finished',
      `The job is already ${after.status} and cannot be canceled.`,
      {
        fields: { status: after.status },
      },
    );
  }
  if (before.status === 'running') await deps.stopRunningJob(input.jobId);
  const children: JobRow[] = [];
  // Also when it was canceled before: a child its listing made meanwhile is canceled by the listing itself.
  if (after.kind === 'collection') {
    for (const { wasRunning, job } of await cancelActiveChildren(deps.database, after.id, deps.now())) {
      if (wasRunning) await deps.stopRunningJob(job.id);
      children.push(job);
    }
  }
  // Read again: its children's ends changed its counts.
  const job = children.length > 0 ? ((await getJobRow(deps.database, after.id)) ?? after) : after;
  return { job, changed: before.status !== 'canceled', children };
}
