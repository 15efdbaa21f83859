import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type Db } from '../../src/db/client.js';
import {
  activeLeaderFor,
  claimNextJob,
  getJobRow,
  insertJob,
  markCanceled,
  markDone,
  markFailed,
  recoverAbandonedJobs,
  requeueInterrupted,
} from '../../src/jobs/queue.js';

/** The job state machine on a real SQLite file. */
let db: Db;
let clock = 1000;

beforeEach(async () => {
  db = openDatabase(path.join(await mkdtemp(path.join(tmpdir(), 'sf-queue-')), 'db.sqlite'));
  clock = 1000;
});

function queued(id: string, urlKey = `https://m.example/${id}`, followsJobId: string | null = null) {
  return insertJob(db, { id, url: urlKey, urlKey, status: 'queued', followsJobId, createdAt: clock++ });
}

describe('job queue', () => {
  it('claims the oldest queued job once, never a follower', () => {
    queued('a');
    queued('b');
    queued('c', 'https://m.example/a', 'a');
    const first = claimNextJob(db, 'w1', clock);
    expect(first).toMatchObject({ id: 'a', status: 'running', attempts: 1, lockOwner: 'w1' });
    expect(claimNextJob(db, 'w2', clock)?.id).toBe('b');
    expect(claimNextJob(db, 'w3', clock)).toBeUndefined();
  });

  it('running → done carries every follower to done with the same content', () => {
    queued('a');
    queued('f1', 'https://m.example/a', 'a');
    queued('f2', 'https://m.example/a', 'a');
    claimNextJob(db, 'w', clock);
    expect(markDone(db, 'a', 'cid', 2000)).toBe(true);
    for (const id of ['a', 'f1', 'f2']) expect(getJobRow(db, id)).toMatchObject({ status: 'done', contentId: 'cid', finishedAt: 2000 });
    // A finished job does not change again.
    expect(markFailed(db, 'a', { code: 'x', message: 'y' }, 3000)).toBe(false);
    expect(markDone(db, 'a', 'other', 3000)).toBe(false);
  });

  it('running → failed carries followers to failed with the same error', () => {
    queued('a');
    queued('f', 'https://m.example/a', 'a');
    claimNextJob(db, 'w', clock);
    expect(markFailed(db, 'a', { code: 'http_error', message: 'HTTP Error 404' }, 2000)).toBe(true);
    expect(getJobRow(db, 'f')).toMatchObject({ status: 'failed', errorCode: 'http_error', errorMessage: 'HTTP Error 404' });
  });

  it('cancel of a leader hands its followers to the oldest of them', () => {
    queued('a');
    queued('f1', 'https://m.example/a', 'a');
    queued('f2', 'https://m.example/a', 'a');
    claimNextJob(db, 'w', clock);
    expect(markCanceled(db, 'a', 2000)).toMatchObject({ status: 'canceled', finishedAt: 2000 });
    expect(getJobRow(db, 'f1')).toMatchObject({ status: 'queued', followsJobId: null });
    expect(getJobRow(db, 'f2')).toMatchObject({ status: 'queued', followsJobId: 'f1' });
    expect(activeLeaderFor(db, 'https://m.example/a')?.id).toBe('f1');
    expect(claimNextJob(db, 'w', clock)?.id).toBe('f1');
    // A canceled job whose worker still reports done changes nothing.
    expect(markDone(db, 'a', 'cid', 3000)).toBe(false);
    expect(getJobRow(db, 'a')?.status).toBe('canceled');
  });

  it('a done job cannot be canceled', () => {
    queued('a');
    claimNextJob(db, 'w', clock);
    markDone(db, 'a', 'cid', 2000);
    expect(markCanceled(db, 'a', 3000)?.status).toBe('done');
  });

  it('an interrupted job goes back to the queue without spending an attempt', () => {
    queued('a');
    claimNextJob(db, 'w', clock);
    requeueInterrupted(db, 'a');
    expect(getJobRow(db, 'a')).toMatchObject({ status: 'queued', attempts: 0, lockOwner: null, startedAt: null });
  });

  it('at start-up, re-queues jobs a crash left running, and fails those out of attempts', () => {
    queued('a');
    queued('b');
    queued('fb', 'https://m.example/b', 'b');
    claimNextJob(db, 'w', clock);
    claimNextJob(db, 'w', clock);
    // b has been interrupted twice before.
    db.$client.prepare("update jobs set attempts = 3 where id = 'b'").run();
    expect(recoverAbandonedJobs(db, 3, 5000)).toEqual({ requeued: 1, failed: 1 });
    expect(getJobRow(db, 'a')).toMatchObject({ status: 'queued', attempts: 1, lockOwner: null });
    expect(getJobRow(db, 'b')).toMatchObject({ status: 'failed', errorCode: 'attempts_exhausted' });
    expect(getJobRow(db, 'fb')).toMatchObject({ status: 'failed', errorCode: 'attempts_exhausted' });
  });
});
