import { inArray } from 'drizzle-orm';
import type { Database, JobRow, Queryable } from '../db/database.js';
import type { Ended, Progress } from './queue.js';

/**
 * Watches jobs for changes on behalf of this node's event streams, whichever node runs them:
 * everything is read from the database. One timer and one query per tick (per thousand jobs)
 * serve every watched job on the node (plus one query for the leaders that queued followers show), so an open stream
 * costs a row in that query, not a query of its own. A job's new state is rendered once per
 * change, however many streams watch it.
 *
 * Polling rather than LISTEN/NOTIFY: a job changes in many places (claim, progress, end, cancel,
 * a lease taken back, a follower handed on), on any node; a poll of the row sees every one of
 * them, including those no notification was sent for, and costs the same on SQLite. A job's
 * progress reaches the database only now and then (./worker-pool.ts): the node that runs the job
 * shows its latest progress at every tick (withLocalProgress), other nodes show it as written (at
 * the download's start, past each quarter of it, and with every renewal of the node's leases). A job's end, the change its watchers wait for, is not left to the next poll: told of it
 * (`nudge`, from a notification every node hears), the watcher ticks at once.
 */
export interface JobWatcher<T> {
  /**
   * Calls `onChange` with the job rendered after each tick that finds it changed since this
   * subscription last heard of it (the first tick always does). Returns the unsubscribe function.
   */
  watch(jobId: string, onChange: (rendered: T, job: JobRow) => void): () => void;
  /**
   * Some of these jobs have changed (ended): a tick now, not at the next interval, when one of
   * them is watched; an empty list, any job. Ticks do not overlap: one asked for during a tick
   * follows it.
   */
  nudge(jobIds: string[]): void;
  /** Subscriptions open now. */
  size(): number;
  stop(): void;
}

/** Told of each job's end by the node it ends on; every node's watcher listens (announceJobEnded, hearJobEnds). */
const JOB_ENDED_CHANNEL = 'source_fetch_job_ended';
/** Under Postgres' NOTIFY payload limit (8000 bytes). */
const MAX_PAYLOAD_CHARS = 7_000;

/**
 * The notification's payload for a job that ended with its followers: their ids, and their
 * collections' (whose counts changed with them, ./collection/parent.ts), or '' (any job) when too many.
 */
function endedJobIds(ended: Ended): string {
  const jobs = [ended.job, ...ended.followers];
  const parents = jobs.flatMap((job) => (job.parentId === null ? [] : [job.parentId]));
  const ids = [...new Set([...jobs.map((job) => job.id), ...parents])].join(',');
  return ids.length <= MAX_PAYLOAD_CHARS ? ids : '';
}

/** Tells every node's watcher of a job's end (and its followers'), at once rather than at their next poll. */
export function announceJobEnded(database: Pick<Database, 'notify'>, ended: Ended): Promise<void> {
  return database.notify(JOB_ENDED_CHANNEL, endedJobIds(ended));
}

/** Nudges the watcher with each job end any node announces (an empty list: any job); resolves to the stop. */
export function hearJobEnds(
  database: Pick<Database, 'listen'>,
  watcher: Pick<JobWatcher<unknown>, 'nudge'>,
): Promise<() => Promise<void>> {
  return database.listen(JOB_ENDED_CHANNEL, (payload) => watcher.nudge(payload === '' ? [] : payload.split(',')));
}

export interface JobWatcherDeps<T> {
  readJobs: (ids: string[]) => Promise<JobRow[]>;
  render: (job: JobRow) => Promise<T>;
  intervalMs: number;
  onError: (err: unknown) => void;
}

interface Subscription<T> {
  onChange: (rendered: T, job: JobRow) => void;
  /** The state this subscriber last heard of. */
  seen: string | undefined;
}

export function createJobWatcher<T>(deps: JobWatcherDeps<T>): JobWatcher<T> {
  const watched = new Map<string, Set<Subscription<T>>>();
  let timer: NodeJS.Timeout | undefined;
  let ticking = false;
  /** A nudge came during a tick: another follows it. */
  let tickAgain = false;
  let subscriptions = 0;

  async function tick(): Promise<void> {
    const ids = [...watched.keys()];
    if (ids.length === 0) return;
    const rows = await deps.readJobs(ids);
    // A queued follower shows its leader's state, so the leader's changes are its changes.
    const leaderIds = [
      ...new Set(rows.filter((row) => row.status === 'queued' && row.followsJobId).map((row) => row.followsJobId!)),
    ];
    const leaders = new Map((leaderIds.length > 0 ? await deps.readJobs(leaderIds) : []).map((row) => [row.id, row]));
    for (const job of rows) {
      const subs = watched.get(job.id);
      if (!subs) continue;
      const state = stateOf(
        job,
        job.status === 'queued' && job.followsJobId ? leaders.get(job.followsJobId) : undefined,
      );
      const behind = [...subs].filter((sub) => sub.seen !== state);
      if (behind.length === 0) continue;
      let rendered: T;
      try {
        rendered = await deps.render(job);
      } catch (err) {
        // Tried again next tick: these subscribers have not seen this state yet.
        deps.onError(err);
        continue;
      }
      for (const sub of behind) {
        // Unsubscribed while rendering: nobody to tell.
        if (!subs.has(sub)) continue;
        sub.seen = state;
        sub.onChange(rendered, job);
      }
    }
  }

  function startTick(): void {
    ticking = true;
    tick()
      .catch(deps.onError)
      .finally(() => {
        ticking = false;
        if (tickAgain) {
          tickAgain = false;
          startTick();
        }
      });
  }

  function schedule(): void {
    if (timer || watched.size === 0) return;
    timer = setInterval(() => {
      if (!ticking) startTick();
    }, deps.intervalMs);
    timer.unref();
  }

  function unschedule(): void {
    if (timer && watched.size === 0) {
      clearInterval(timer);
      timer = undefined;
    }
  }

  return {
    watch(jobId, onChange) {
      const sub: Subscription<T> = { onChange, seen: undefined };
      let subs = watched.get(jobId);
      if (!subs) watched.set(jobId, (subs = new Set()));
      subs.add(sub);
      subscriptions++;
      schedule();
      let active = true;
      return () => {
        if (!active) return;
        active = false;
        subscriptions--;
        subs.delete(sub);
        if (subs.size === 0) watched.delete(jobId);
        unschedule();
      };
    },
    nudge(jobIds) {
      if (jobIds.length > 0 ? !jobIds.some((id) => watched.has(id)) : watched.size === 0) return;
      if (ticking) tickAgain = true;
      else startTick();
    },
    size: () => subscriptions,
    stop() {
      watched.clear();
      subscriptions = 0;
      unschedule();
    },
  };
}

/**
 * What the job record is made of, without what changes while nothing happens: the lease is
 * renewed now and then, and its owner is not shown.
 */
function stateOf(job: JobRow, leader: JobRow | undefined): string {
  const shown = (row: JobRow) => {
    const { leaseExpiresAt: _lease, lockOwner: _owner, ...rest } = row;
    return rest;
  };
  return JSON.stringify([shown(job), leader ? shown(leader) : null]);
}

/**
 * The rows, with the latest progress of the jobs running on this node (`nodeId`) in place of the
 * progress written so far (WorkerPool.progressOf).
 */
export function withLocalProgress(
  rows: JobRow[],
  nodeId: string,
  progressOf: (jobId: string) => Progress | undefined,
): JobRow[] {
  return rows.map((row) => {
    const progress = row.status === 'running' && row.lockOwner === nodeId ? progressOf(row.id) : undefined;
    return progress ? { ...row, progressBytes: progress.bytes, progressTotalBytes: progress.totalBytes } : row;
  });
}

/**
 * Ids per query: a node's streams may follow tens of thousands of jobs (EVENT_STREAMS_PER_NODE
 * streams of up to 200 each), more than a statement may bind (PostgreSQL 65,535 parameters).
 */
const IDS_PER_READ = 1000;

/** The rows of the jobs `ids` that exist: one query per thousand ids. */
export async function readJobRows(q: Queryable, ids: string[]): Promise<JobRow[]> {
  const rows: JobRow[] = [];
  for (let at = 0; at < ids.length; at += IDS_PER_READ) {
    rows.push(
      ...(await q.db
        .select()
        .from(q.t.jobs)
        .where(inArray(q.t.jobs.id, ids.slice(at, at + IDS_PER_READ)))),
    );
  }
  return rows;
}
