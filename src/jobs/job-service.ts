import type { CacheEntryRow, Database, JobRow } from '../db/database.js';
import { ServiceError } from '../errors.js';
import { cacheEntriesFor } from '../store/cache-entries.js';
import { cancelJob } from './cancel.js';
import { getJobRow, type Ended } from './queue.js';
import { submitSource, type SubmitDeps } from './submit.js';
import { JOB_CANCELED_CHANNEL, JOBS_QUEUED_CHANNEL } from './worker-pool.js';

/**
 * The job operations the API offers, on any node: submit, read, cancel. They know nothing of
 * HTTP. Whichever node a job reaches, its record reads the same: everything comes from the
 * database. Jobs that end here (born done, canceled) are reported to `onEnded` once.
 */
export interface JobServiceDeps extends Omit<SubmitDeps, 'onQueued'> {
  onEnded: (ended: Ended) => void;
}

export interface JobView {
  job: JobRow;
  /** The job it waits for, whose state it shows while it waits. */
  leader: JobRow | undefined;
  artifacts: CacheEntryRow[];
}

export interface JobService {
  submit(url: string, requestId: string): Promise<JobRow>;
  get(id: string): Promise<JobRow>;
  cancel(id: string): Promise<JobRow>;
  view(job: JobRow): Promise<JobView>;
}

export function createJobService(deps: JobServiceDeps): JobService {
  const database: Database = deps.database;
  const notifyQuietly = (channel: string, payload: string) => database.notify(channel, payload).catch(() => {});
  return {
    async submit(url, requestId) {
      const job = await submitSource({ deps: { ...deps, onQueued: () => void notifyQuietly(JOBS_QUEUED_CHANNEL, '') }, input: { url, requestId } });
      if (job.bornDone) deps.onEnded({ job, followers: [] });
      return job;
    },
    async get(id) {
      const job = await getJobRow(database, id);
      if (!job) throw new ServiceError('not_found', 'job_not_found', 'No job has this id.');
      return job;
    },
    async cancel(id) {
      const { job, changed } = await cancelJob({
        deps: { database, now: deps.now, stopRunningJob: (jobId) => database.notify(JOB_CANCELED_CHANNEL, jobId) },
        input: { jobId: id },
      });
      // Counted here, by the node that canceled it; the node running it records nothing more.
      if (changed) deps.onEnded({ job, followers: [] });
      return job;
    },
    async view(job) {
      const [leader, artifacts] = await Promise.all([
        job.followsJobId ? getJobRow(database, job.followsJobId) : undefined,
        job.contentId ? cacheEntriesFor(database, job.contentId) : [],
      ]);
      return { job, leader, artifacts };
    },
  };
}
