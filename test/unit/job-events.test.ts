import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database, JobRow } from '../../src/db/database.js';
import { ServiceError } from '../../src/errors.js';
import { createApp } from '../../src/app.js';
import {
  createJobEventStreams,
  eventIdOf,
  type CollectionItemSource,
  type StreamEnd,
} from '../../src/http/job-events.js';
import { createKeyAdmission } from '../../src/http/key-admission.js';
import { jobIdsOf, MAX_JOBS_PER_EVENT_STREAM } from '../../src/http/routes/events.js';
import { createLogger } from '../../src/logger.js';
import { toJobRecord } from '../../src/http/job-record.js';
import type { CollectionItemRecord, JobRecord } from '../../src/http/schemas.js';
import { createJobWatcher, readJobRows, type JobWatcher } from '../../src/jobs/job-watch.js';
import { claimNextJob, enqueueJob, getJobRow, markCanceled, renewLeases } from '../../src/jobs/queue.js';
import { readFileSync } from 'node:fs';
import { loadConfig } from '../../src/config.js';
import { readEventStream as readEvents } from '../support/event-stream.js';
import { TEMPLATE_PATH } from '../support/nginx.js';
import { BACKENDS, openTestDatabase } from '../support/test-database.js';

/**
 * The job watcher on a real database of each kind (one query a tick for every watched job, one
 * render per change), the event streams' own logic (ids, resume, limits, slow clients,
 * shutdown) over a watcher the test drives, for one job and for many in one stream, and getEvents'
 * request rules (ids, their bound, unknown ids) through the app.
 */

const render = (job: JobRow, leader?: JobRow): JobRecord =>
  toJobRecord(job, { leader, artifacts: [], sign: () => ({ query: 'sig', expiresAt: 0 }) });

/** Resolves once `predicate` holds, checked at each call of `poke`; fails after 10 s. */
function until(predicate: () => boolean, what: string): { poke: () => void; done: Promise<void> } {
  let resolve!: () => void;
  let reject!: (err: Error) => void;
  const done = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), 10_000);
  const poke = () => {
    if (predicate()) {
      clearTimeout(timer);
      resolve();
    }
  };
  return { poke, done };
}

describe.each(BACKENDS)('job watcher on %s', (kind) => {
  let database: Database;
  let watcher: JobWatcher<JobRecord> | undefined;
  let reads: string[][];
  let renders: string[];
  let ticks: (() => void)[];

  beforeEach(async () => {
    database = await openTestDatabase(kind);
    reads = [];
    renders = [];
    ticks = [];
  });
  afterEach(async () => {
    watcher?.stop();
    await database.close();
  });

  function startWatcher(intervalMs = 20): JobWatcher<JobRecord> {
    watcher = createJobWatcher<JobRecord>({
      readJobs: async (ids) => {
        reads.push([...ids].sort());
        const rows = await readJobRows(database, ids);
        queueMicrotask(() => ticks.forEach((fn) => fn()));
        return rows;
      },
      render: async (job) => {
        renders.push(job.id);
        const leader =
          job.status === 'queued' && job.followsJobId ? await getJobRow(database, job.followsJobId) : undefined;
        return render(job, leader);
      },
      intervalMs,
      onError: (err) => {
        throw err;
      },
    });
    return watcher;
  }

  const queued = async (id: string, url = `https://m.example/${id}`) =>
    (await enqueueJob(database, { id, url, urlKey: url, createdAt: Date.now() }))!;
  const lease = { owner: 'node-1', now: Date.now(), leaseMs: 60_000 };

  it('reads every watched job in one query a tick, and renders a change once however many watch it', async () => {
    await queued('a');
    await queued('b');
    const w = startWatcher();
    const seen: Record<string, string[]> = { a1: [], a2: [], a3: [], b: [] };
    const allHeard = until(() => Object.values(seen).every((list) => list.length >= 1), 'the first state');
    for (const [name, job] of [
      ['a1', 'a'],
      ['a2', 'a'],
      ['a3', 'a'],
      ['b', 'b'],
    ] as const) {
      w.watch(job, (record) => {
        seen[name]!.push(record.status);
        allHeard.poke();
      });
    }
    await allHeard.done;
    expect(seen).toEqual({ a1: ['queued'], a2: ['queued'], a3: ['queued'], b: ['queued'] });
    expect(renders.sort()).toEqual(['a', 'b']);
    // One query for both jobs, every tick.
    expect(reads.every((ids) => ids.join() === 'a,b')).toBe(true);

    renders = [];
    await claimNextJob(database, lease); // a: running
    const running = until(() => seen.a1!.length === 2 && seen.a2!.length === 2 && seen.a3!.length === 2, 'running');
    ticks.push(running.poke);
    await running.done;
    expect(seen.a1).toEqual(['queued', 'running']);
    expect(renders).toEqual(['a']);
    expect(seen.b).toEqual(['queued']);
    expect(w.size()).toBe(4);
  });

  it('a lease renewed is no change; progress recorded is (the control)', async () => {
    await queued('a');
    await claimNextJob(database, lease);
    const w = startWatcher();
    const heard: JobRecord[] = [];
    const first = until(() => heard.length === 1, 'the first state');
    w.watch('a', (record) => {
      heard.push(record);
      first.poke();
    });
    await first.done;

    // Five ticks after each of three lease renewals: nothing to tell.
    for (let i = 0; i < 3; i++) {
      await renewLeases(database, ['a'], { ...lease, now: Date.now() + i * 1000 });
      const readsBefore = reads.length;
      const fiveTicks = until(() => reads.length >= readsBefore + 5, 'five ticks');
      ticks.push(fiveTicks.poke);
      await fiveTicks.done;
    }
    expect(heard).toHaveLength(1);

    await renewLeases(database, ['a'], lease, new Map([['a', { bytes: 1000, totalBytes: 4000 }]]));
    const progressed = until(() => heard.length === 2, 'the progress');
    ticks.push(progressed.poke);
    await progressed.done;
    expect(heard[1]!.progress).toEqual({ bytes_done: 1000, bytes_total: 4000, percent: 25 });
  });

  it("a queued follower's subscribers hear its leader's progress", async () => {
    const url = 'https://m.example/same';
    await queued('leader', url);
    const follower = await queued('follower', url);
    expect(follower.followsJobId).toBe('leader');
    await claimNextJob(database, lease);
    const w = startWatcher();
    const heard: JobRecord[] = [];
    const progressed = until(
      () => heard.some((record) => record.progress?.bytes_done === 500),
      "the leader's progress",
    );
    w.watch('follower', (record) => {
      heard.push(record);
      progressed.poke();
    });
    await renewLeases(database, ['leader'], lease, new Map([['leader', { bytes: 500, totalBytes: null }]]));
    ticks.push(progressed.poke);
    await progressed.done;
    expect(heard.at(-1)).toMatchObject({
      job_id: 'follower',
      status: 'running',
      progress: { bytes_done: 500, bytes_total: null, percent: null },
    });
  });

  it('stops polling when the last subscriber leaves, while a watcher with one goes on (the control)', async () => {
    await queued('a');
    const w = startWatcher();
    const ticked = until(() => reads.length >= 1, 'a tick');
    ticks.push(ticked.poke);
    const unwatch = w.watch('a', () => {});
    await ticked.done;
    unwatch();
    expect(w.size()).toBe(0);
    const readsAfter = reads.length;

    let otherReads = 0;
    const fiveTicks = until(() => otherReads >= 5, "the other watcher's ticks");
    const other = createJobWatcher({
      readJobs: async (ids) => {
        otherReads++;
        queueMicrotask(fiveTicks.poke);
        return readJobRows(database, ids);
      },
      render: () => Promise.resolve(0),
      intervalMs: 20,
      onError: () => {},
    });
    other.watch('a', () => {});
    await fiveTicks.done;
    other.stop();
    // At most the one tick that was under way when the subscriber left.
    expect(reads.length - readsAfter).toBeLessThanOrEqual(1);
  });

  it("a job's end told to the watcher (nudge) reaches its subscribers at once, without waiting for the poll; a nudge for a job nobody watches reads nothing (the control: one for a watched job does)", async () => {
    await queued('a');
    await claimNextJob(database, lease);
    // Its poll would come in a minute: every read below is a nudge's.
    const w = startWatcher(60_000);
    const heard: string[] = [];
    const heardRunning = until(() => heard.length === 1, 'the running state');
    const heardEnd = until(() => heard.length === 2, 'the end');
    w.watch('a', (record) => {
      heard.push(record.status);
      heardRunning.poke();
      heardEnd.poke();
    });
    w.nudge(['b']);
    expect(reads).toEqual([]);
    w.nudge(['b', 'a']);
    expect(reads).toEqual([['a']]);
    await heardRunning.done;

    await markCanceled(database, 'a', Date.now());
    w.nudge([]);
    await heardEnd.done;
    expect(heard).toEqual(['running', 'canceled']);
    expect(reads).toEqual([['a'], ['a']]);
  });

  it('marks a canceled job final for its subscribers', async () => {
    await queued('a');
    const w = startWatcher();
    const heard: JobRecord[] = [];
    const canceled = until(() => heard.at(-1)?.status === 'canceled', 'canceled');
    w.watch('a', (record) => {
      heard.push(record);
      canceled.poke();
    });
    await markCanceled(database, 'a', Date.now());
    ticks.push(canceled.poke);
    await canceled.done;
    expect(heard.map((record) => record.status)).toEqual(heard.length === 1 ? ['canceled'] : ['queued', 'canceled']);
  });
});

describe('job watcher nudges', () => {
  it('a nudge during a tick is followed by one tick more, however many came; none after that', async () => {
    const pending: Array<() => void> = [];
    let reads = 0;
    const w = createJobWatcher({
      readJobs: () => {
        reads++;
        return new Promise<JobRow[]>((resolve) => pending.push(() => resolve([])));
      },
      render: () => Promise.resolve(0),
      intervalMs: 60_000,
      onError: (err) => {
        throw err;
      },
    });
    w.watch('a', () => {});
    w.nudge(['a']);
    expect(reads).toBe(1);
    w.nudge(['a']);
    w.nudge([]);
    w.nudge(['a']);
    expect(reads).toBe(1);
    pending.shift()!();
    await new Promise(setImmediate);
    expect(reads).toBe(2);
    pending.shift()!();
    await new Promise(setImmediate);
    expect(reads).toBe(2);
    // The control: a nudge now ticks again.
    w.nudge(['a']);
    expect(reads).toBe(3);
    pending.shift()!();
    w.stop();
  });
});

/** A watcher the test drives: `push` delivers a row (rendered) to the job's subscribers. */
function manualWatcher() {
  const subs = new Map<string, Set<(record: JobRecord, job: JobRow) => void>>();
  const watcher: JobWatcher<JobRecord> = {
    watch(jobId, onChange) {
      if (!subs.has(jobId)) subs.set(jobId, new Set());
      subs.get(jobId)!.add(onChange);
      return () => subs.get(jobId)?.delete(onChange);
    },
    nudge: () => {},
    size: () => [...subs.values()].reduce((n, set) => n + set.size, 0),
    stop: () => subs.clear(),
  };
  return { watcher, push: (job: JobRow) => subs.get(job.id)?.forEach((fn) => fn(render(job), job)) };
}

const row = (overrides: Partial<JobRow> = {}): JobRow =>
  ({
    id: 'job-1',
    url: 'https://m.example/a',
    urlKey: 'https://m.example/a',
    status: 'queued',
    bornDone: false,
    createdAt: 1_700_000_000_000,
    startedAt: null,
    finishedAt: null,
    attempts: 0,
    progressBytes: null,
    progressTotalBytes: null,
    followsJobId: null,
    lockOwner: null,
    leaseExpiresAt: null,
    contentId: null,
    errorCode: null,
    errorMessage: null,
    errorDetail: null,
    errorHttpStatus: null,
    extractor: null,
    mediaId: null,
    mediaKey: null,
    requestId: null,
    ...overrides,
  }) as JobRow;

describe('job event streams', () => {
  const ends: StreamEnd[] = [];
  const make = (limits: { maxPerKey?: number; maxPerNode?: number; keepAliveMs?: number } = {}) => {
    const { watcher, push } = manualWatcher();
    const streams = createJobEventStreams({
      watcher,
      render: (job) => Promise.resolve(render(job)),
      items: noItems,
      keepAliveMs: limits.keepAliveMs ?? 60_000,
      maxPerKey: limits.maxPerKey ?? 10,
      maxPerNode: limits.maxPerNode ?? 100,
    });
    const open = (job: JobRow, opts: { lastEventId?: string; key?: string } = {}) =>
      streams.open({
        jobs: [job],
        lastEventId: opts.lastEventId,
        keyIdentity: opts.key ?? 'key-a',
        onEnd: (reason) => ends.push(reason),
      });
    return { streams, push, open, watcher };
  };
  beforeEach(() => {
    ends.length = 0;
  });

  it('sends the current state, each change, and the final state, then ends', async () => {
    const { open, push, streams } = make();
    const res = await open(row());
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(res.headers.get('x-accel-buffering')).toBe('no');
    const stream = readEvents(res);
    await stream.waitFor(() => stream.events.length === 1, 'the first event');
    push(row({ status: 'running', attempts: 1, startedAt: 1_700_000_001_000 }));
    push(row({ status: 'running', attempts: 1, startedAt: 1_700_000_001_000 })); // the same state: no event
    push(
      row({ status: 'running', attempts: 1, startedAt: 1_700_000_001_000, progressBytes: 50, progressTotalBytes: 100 }),
    );
    push(
      row({
        status: 'failed',
        attempts: 1,
        startedAt: 1_700_000_001_000,
        finishedAt: 1_700_000_002_000,
        errorCode: 'http_not_found',
        errorMessage: 'Nothing was found at the source (HTTP 404).',
        errorHttpStatus: 404,
      }),
    );
    await stream.ended;
    const records = stream.records as unknown as JobRecord[];
    expect(stream.events.every((event) => event.event === 'job')).toBe(true);
    expect(records.map((record) => [record.status, record.progress?.percent ?? null])).toEqual([
      ['queued', null],
      ['running', null],
      ['running', 50],
      ['failed', null],
    ]);
    expect(new Set(stream.events.map((event) => event.id)).size).toBe(4);
    expect(stream.events.map((event) => event.id)).toEqual(records.map(eventIdOf));
    expect(stream.retryMs()).toBe(1000);
    expect(ends).toEqual(['jobs_ended']);
    expect(streams.openCount()).toBe(0);
  });

  it('resumes: the state the client has is not sent again; a final state it has gets 204', async () => {
    const { open, push } = make();
    const queuedRecord = render(row());
    const resumed = readEvents(await open(row(), { lastEventId: eventIdOf(queuedRecord) }));
    push(row({ status: 'canceled', finishedAt: 1_700_000_003_000 }));
    await resumed.ended;
    expect(resumed.events.map((event) => (JSON.parse(event.data) as JobRecord).status)).toEqual(['canceled']);

    // A client that missed the end: it gets the final state, and the stream ends.
    const late = readEvents(
      await open(row({ status: 'canceled', finishedAt: 1_700_000_003_000 }), { lastEventId: eventIdOf(queuedRecord) }),
    );
    await late.ended;
    expect(late.events.map((event) => event.id)).toEqual([resumed.events[0]!.id]);

    const again = await open(row({ status: 'canceled', finishedAt: 1_700_000_003_000 }), {
      lastEventId: resumed.events[0]!.id,
    });
    expect(again.status).toBe(204);
    expect(again.body).toBeNull();
  });

  it('event ids ignore the signed URLs, which change with every read', () => {
    const done = row({ status: 'done', contentId: 'c'.repeat(64), finishedAt: 1_700_000_004_000 });
    const artifact = {
      contentId: 'c'.repeat(64),
      name: 'audio.wav',
      bytes: 10,
      contentType: 'audio/wav',
      sampleRate: 44100,
      channels: 2,
      durationS: 1,
    };
    const signedAt = (at: number) =>
      toJobRecord(done, {
        artifacts: [artifact as never],
        sign: () => ({ query: `expires=${at}&sig=${at}`, expiresAt: at * 1000 }),
      });
    expect(signedAt(1).result?.artifacts[0]?.signed_url).not.toBe(signedAt(2).result?.artifacts[0]?.signed_url);
    expect(eventIdOf(signedAt(1))).toBe(eventIdOf(signedAt(2)));
    expect(eventIdOf(signedAt(1))).not.toBe(
      eventIdOf(render(row({ status: 'done', contentId: 'd'.repeat(64), finishedAt: 1_700_000_004_000 }))),
    );
  });

  it("event ids ignore the callback's delivery, recorded on after the job ended: the final state known still gets 204", async () => {
    const failed = row({
      status: 'failed',
      finishedAt: 1_700_000_004_000,
      errorCode: 'http_not_found',
      errorMessage: 'Nothing was found at the source (HTTP 404).',
      errorHttpStatus: 404,
    });
    const delivery = (attempts: number): JobRecord['callback'] => ({
      url: 'https://hooks.example/done',
      delivery_id: 'delivery-1',
      status: attempts < 2 ? 'pending' : 'delivered',
      attempt_count: attempts,
      next_attempt_at: null,
      attempts: Array.from({ length: attempts }, (_, i) => ({
        at: new Date(1_700_000_005_000 + i).toISOString(),
        status: i === 1 ? 200 : 503,
        error: null,
      })),
    });
    const streamed = { ...render(failed), callback: delivery(0) };
    const later = { ...render(failed), callback: delivery(2) };
    expect(eventIdOf(later)).toBe(eventIdOf(streamed));
    // The control: a change of the job itself is a new id.
    const gone = { code: 'http_gone', message: 'The media has been removed from the source (HTTP 410).' } as const;
    expect(eventIdOf({ ...later, error: { ...gone, detail: null, http_status: 410 } })).not.toBe(eventIdOf(streamed));

    const streams = createJobEventStreams({
      watcher: manualWatcher().watcher,
      render: () => Promise.resolve(later),
      items: noItems,
      keepAliveMs: 60_000,
      maxPerKey: 10,
      maxPerNode: 10,
    });
    const again = await streams.open({ jobs: [failed], lastEventId: eventIdOf(streamed), keyIdentity: 'key-a' });
    expect(again.status).toBe(204);
  });

  it('ends on the final state its view renders, though the row read before showed the job queued', async () => {
    // A follower read queued just before its leader ended: its view reads it again, done.
    const staleRow = row();
    const doneRecord = render(row({ status: 'done', contentId: 'e'.repeat(64), finishedAt: 1_700_000_006_000 }));
    const streams = createJobEventStreams({
      watcher: manualWatcher().watcher,
      render: () => Promise.resolve(doneRecord),
      items: noItems,
      keepAliveMs: 60_000,
      maxPerKey: 10,
      maxPerNode: 10,
    });
    const stream = readEvents(
      await streams.open({
        jobs: [staleRow],
        lastEventId: undefined,
        keyIdentity: 'key-a',
        onEnd: (reason) => ends.push(reason),
      }),
    );
    await stream.ended;
    expect(stream.records.map((record) => record.status)).toEqual(['done']);
    expect(ends).toEqual(['jobs_ended']);
    // And one that already has that state gets 204, as for a row read done.
    expect(
      (await streams.open({ jobs: [staleRow], lastEventId: eventIdOf(doneRecord), keyIdentity: 'key-a' })).status,
    ).toBe(204);
  });

  it('limits streams per key and per node with 429 too_many_event_streams; a closed stream frees its place', async () => {
    const { open } = make({ maxPerKey: 2, maxPerNode: 3 });
    const a1 = readEvents(await open(row(), { key: 'a' }));
    readEvents(await open(row(), { key: 'a' }));
    const refusal = await open(row(), { key: 'a' }).catch((err: unknown) => err);
    expect(refusal).toBeInstanceOf(ServiceError);
    expect(refusal).toMatchObject({
      kind: 'rate_limited',
      code: 'too_many_event_streams',
      extra: { retryAfterSeconds: 5, fields: { limit: 'per_key' } },
    });
    readEvents(await open(row(), { key: 'b' }));
    await expect(open(row(), { key: 'b' })).rejects.toMatchObject({
      code: 'too_many_event_streams',
      extra: { fields: { limit: 'per_node' } },
    });
    await a1.close();
    await a1.ended;
    expect(ends).toContain('client_closed');
    expect((await open(row(), { key: 'b' })).status).toBe(200);
  });

  it('a stream whose exchange ends gives its place back, though nobody cancels its body (the control: unread, it holds it)', async () => {
    const { streams, watcher } = make({ maxPerKey: 1 });
    const openFor = (closed?: AbortSignal) =>
      streams.open({
        jobs: [row()],
        lastEventId: undefined,
        keyIdentity: 'key-a',
        closed,
        onEnd: (reason) => ends.push(reason),
      });
    // The control: a body nobody reads or cancels, with no exchange to end, keeps its place.
    await openFor();
    expect(streams.openCount()).toBe(1);
    await expect(openFor()).rejects.toMatchObject({ code: 'too_many_event_streams' });
    streams.closeAll();

    const exchange = new AbortController();
    const res = await openFor(exchange.signal);
    expect(res.status).toBe(200);
    expect([streams.openCount(), watcher.size()]).toEqual([1, 1]);
    exchange.abort();
    expect([streams.openCount(), watcher.size()]).toEqual([0, 0]);
    expect(ends).toEqual(['shutdown', 'exchange_ended']);
    expect((await openFor(new AbortController().signal)).status).toBe(200);

    // An exchange already over by the time the record is read takes no place at all.
    streams.closeAll();
    const gone = new AbortController();
    gone.abort();
    await openFor(gone.signal);
    expect(streams.openCount()).toBe(0);
  });

  it('HEAD: the head a GET would get (200, 204, 429) and no stream', async () => {
    const { streams, open, watcher } = make({ maxPerKey: 1 });
    const head = (job: JobRow, lastEventId?: string) =>
      streams.head({ jobs: [job], lastEventId, keyIdentity: 'key-a' });
    for (let i = 0; i < 5; i++) {
      const res = await head(row());
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
      expect(res.body).toBeNull();
    }
    expect([streams.openCount(), watcher.size()]).toEqual([0, 0]);
    const canceled = row({ status: 'canceled', finishedAt: 1_700_000_003_000 });
    expect((await head(canceled, eventIdOf(render(canceled)))).status).toBe(204);
    // With the key's one place taken, HEAD is refused as a GET would be.
    readEvents(await open(row()));
    await expect(head(row())).rejects.toMatchObject({
      code: 'too_many_event_streams',
      extra: { fields: { limit: 'per_key' } },
    });
    streams.closeAll();
  });

  it('keeps an idle stream alive with comments', async () => {
    const { open, streams } = make({ keepAliveMs: 20 });
    const stream = readEvents(await open(row()));
    await stream.waitFor(() => stream.comments >= 3, 'three keep-alives');
    expect(stream.events).toHaveLength(1);
    streams.closeAll();
    await stream.ended;
  });

  it('a client that stops reading: past 64 KiB unread only the newest state waits, and the stream ends once it has taken nothing for a keep-alive interval', async () => {
    const { open, push } = make({ keepAliveMs: 20 });
    const res = await open(row());
    // Nobody reads the body. Each state carries a 2 KiB URL: 40 of them are 80 KiB.
    const url = `https://m.example/${'x'.repeat(2048)}`;
    for (let i = 1; i <= 40; i++) push(row({ url, status: 'running', progressBytes: i, progressTotalBytes: 100 }));
    expect(ends).toEqual([]);
    await new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (ends.length === 0) return;
        clearInterval(poll);
        resolve();
      }, 5);
    });
    expect(ends).toEqual(['client_too_slow']);
    // What was queued before the end can still be read, then the stream is closed.
    const stream = readEvents(res);
    await stream.ended;
    const done = stream.records.slice(1).map((record) => record.progress!.bytes_done);
    expect(done.length).toBeGreaterThan(25);
    expect(done).toEqual(Array.from({ length: done.length }, (_, i) => i + 1));
  });

  it('the control: a client that reads as the states come keeps its stream, and gets the newest state of those that waited', async () => {
    const { open, push, streams } = make({ keepAliveMs: 20 });
    const stream = readEvents(await open(row()));
    const url = `https://m.example/${'x'.repeat(2048)}`;
    // All at once, before the reader has taken anything: most fit, the rest wait as one.
    for (let i = 1; i <= 40; i++) push(row({ url, status: 'running', progressBytes: i, progressTotalBytes: 100 }));
    await stream.waitFor(() => stream.records.at(-1)?.progress?.bytes_done === 40, 'the newest state');
    await stream.waitFor(() => stream.comments >= 3, 'three keep-alive intervals');
    expect(ends).toEqual([]);
    const done = stream.records.slice(1).map((record) => record.progress!.bytes_done);
    // Some states in between were never sent: the client missed them, and nothing else.
    expect(done.length).toBeLessThan(40);
    expect(done).toEqual([...done].sort((x, y) => x - y));
    streams.closeAll();
  });

  it('a shutdown ends every stream', async () => {
    const { open, streams, watcher } = make();
    const one = readEvents(await open(row({ id: 'j1' })));
    const two = readEvents(await open(row({ id: 'j2' })));
    expect(watcher.size()).toBe(2);
    streams.closeAll();
    await Promise.all([one.ended, two.ended]);
    expect(ends).toEqual(['shutdown', 'shutdown']);
    expect(watcher.size()).toBe(0);
  });

  it("keep-alives come more often than nginx's proxy_read_timeout could close an idle stream, whatever the configuration", () => {
    // Wherever the template sets it (server level, or a location that proxies the API), the
    // stream must outlive the shortest one.
    const timeouts = [...readFileSync(TEMPLATE_PATH, 'utf8').matchAll(/proxy_read_timeout (\d+)s;/g)].map((m) =>
      Number(m[1]),
    );
    expect(timeouts.length).toBeGreaterThan(0);
    const timeoutS = Math.min(...timeouts);
    expect(timeoutS).toBeGreaterThan(0);
    expect(loadConfig({}).events.keepAliveMs).toBeLessThan(timeoutS * 1000);
    // The largest value the configuration takes is still below it; the timeout itself is refused.
    expect(() => loadConfig({ EVENTS_KEEPALIVE_S: String(timeoutS) })).toThrow(/EVENTS_KEEPALIVE_S/);
    expect(loadConfig({ EVENTS_KEEPALIVE_S: '50' }).events.keepAliveMs).toBeLessThan(timeoutS * 1000);
  });
});

describe('a stream of many jobs (getEvents)', () => {
  const ends: StreamEnd[] = [];
  beforeEach(() => {
    ends.length = 0;
  });
  const make = (limits: { maxPerKey?: number; maxPerNode?: number; keepAliveMs?: number } = {}) => {
    const { watcher, push } = manualWatcher();
    const streams = createJobEventStreams({
      watcher,
      render: (job) => Promise.resolve(render(job)),
      items: noItems,
      keepAliveMs: limits.keepAliveMs ?? 60_000,
      maxPerKey: limits.maxPerKey ?? 10,
      maxPerNode: limits.maxPerNode ?? 100,
    });
    const open = (jobs: JobRow[], opts: { lastEventId?: string; key?: string } = {}) =>
      streams.open({
        jobs,
        lastEventId: opts.lastEventId,
        keyIdentity: opts.key ?? 'key-a',
        onEnd: (reason) => ends.push(reason),
      });
    return { streams, push, open, watcher };
  };
  const at = 1_700_000_000_000;
  const done = (id: string) =>
    row({ id, status: 'done', contentId: id.padEnd(64, '0'), startedAt: at + 1, finishedAt: at + 2 });
  const running = (id: string, bytes: number) =>
    row({ id, status: 'running', attempts: 1, startedAt: at + 1, progressBytes: bytes, progressTotalBytes: 100 });

  it("opens with each job's state in the order named, a job already ended sending its final state only; streams every change of the others, and ends when the last has ended", async () => {
    const { open, push, streams, watcher } = make();
    const res = await open([row({ id: 'a' }), done('b'), row({ id: 'c' }), row({ id: 'a' })]);
    expect(res.status).toBe(200);
    const stream = readEvents(res);
    await stream.waitFor(() => stream.records.length === 3, 'the opening states');
    expect(stream.records.map((record) => [record.job_id, record.status])).toEqual([
      ['a', 'queued'],
      ['b', 'done'],
      ['c', 'queued'],
    ]);
    // The ended job is not followed; the two others are; one stream, one place.
    expect(watcher.size()).toBe(2);
    expect(streams.openCount()).toBe(1);

    push(running('c', 10));
    push(running('c', 10)); // the same state: no event
    push(done('b')); // an ended job's state again: it is no longer followed
    push(running('a', 50));
    push(
      row({ id: 'c', status: 'failed', attempts: 1, finishedAt: at + 3, errorCode: 'http_error', errorMessage: 'x' }),
    );
    await stream.waitFor(() => stream.records.length === 5, 'two changes and an end');
    expect(ends).toEqual([]);
    expect(watcher.size()).toBe(1);
    push(row({ id: 'a', status: 'canceled', finishedAt: at + 4 }));
    await stream.ended;
    expect(
      stream.records.slice(3).map((record) => [record.job_id, record.status, record.progress?.percent ?? null]),
    ).toEqual([
      ['c', 'running', 10],
      ['a', 'running', 50],
      ['c', 'failed', null],
      ['a', 'canceled', null],
    ]);
    // Each event is the job's own stream's: the same record, the same id.
    expect(stream.events.map((event) => event.id)).toEqual((stream.records as unknown as JobRecord[]).map(eventIdOf));
    expect(stream.events.every((event) => event.event === 'job')).toBe(true);
    expect(ends).toEqual(['jobs_ended']);
    expect([streams.openCount(), watcher.size()]).toEqual([0, 0]);
  });

  it('every job ended at the open: their final states, then the end, nothing followed', async () => {
    const { open, watcher } = make();
    const stream = readEvents(await open([done('a'), done('b')]));
    await stream.ended;
    expect(stream.records.map((record) => record.job_id)).toEqual(['a', 'b']);
    expect(ends).toEqual(['jobs_ended']);
    expect(watcher.size()).toBe(0);
  });

  it('resumes: the state Last-Event-ID names is not sent again, every other job is; 204 only when nothing is left to send', async () => {
    const { open, push } = make();
    const aRunning = render(running('a', 20));
    const stream = readEvents(await open([running('a', 20), row({ id: 'b' })], { lastEventId: eventIdOf(aRunning) }));
    await stream.waitFor(() => stream.records.length === 1, "b's state");
    expect(stream.records.map((record) => record.job_id)).toEqual(['b']);
    push(running('a', 20)); // the watcher's first tick: what the client has already
    push(running('a', 30));
    await stream.waitFor(() => stream.records.length === 2, "a's change");
    expect(stream.records[1]).toMatchObject({ job_id: 'a', progress: { bytes_done: 30 } });
    await stream.close();

    // Both ended; the client has one of the final states: it gets the other, then the end.
    const finalA = render(done('a'));
    const late = readEvents(await open([done('a'), done('b')], { lastEventId: eventIdOf(finalA) }));
    await late.ended;
    expect(late.records.map((record) => record.job_id)).toEqual(['b']);
    // One job, ended, whose final state the client has: nothing to send.
    expect((await open([done('a')], { lastEventId: eventIdOf(finalA) })).status).toBe(204);
  });

  it('counts once against the limits per key and per node, whatever the number of its jobs', async () => {
    const { open, streams } = make({ maxPerKey: 1, maxPerNode: 2 });
    const many = Array.from({ length: MAX_JOBS_PER_EVENT_STREAM }, (_, i) => row({ id: `job-${i}` }));
    const first = readEvents(await open(many, { key: 'a' }));
    expect(streams.openCount()).toBe(1);
    await expect(open([row()], { key: 'a' })).rejects.toMatchObject({
      code: 'too_many_event_streams',
      extra: { fields: { limit: 'per_key' } },
    });
    readEvents(await open(many, { key: 'b' }));
    await expect(open([row()], { key: 'c' })).rejects.toMatchObject({
      code: 'too_many_event_streams',
      extra: { fields: { limit: 'per_node' } },
    });
    await first.close();
    await first.ended;
    expect((await open([row()], { key: 'a' })).status).toBe(200);
    streams.closeAll();
  });

  it("a slow reader: the opening states of 200 jobs (some 450 KiB) and their changes wait one per job; a client that takes none of them for a keep-alive interval is cut (the control: one that reads gets each job's newest state)", async () => {
    // Each state carries a 2 KiB URL.
    const url = `https://m.example/${'x'.repeat(2048)}`;
    const jobs = Array.from({ length: MAX_JOBS_PER_EVENT_STREAM }, (_, i) => row({ id: `job-${i}`, url }));
    const progress = (i: number, bytes: number) =>
      row({ id: `job-${i}`, url, status: 'running', attempts: 1, progressBytes: bytes, progressTotalBytes: 1000 });

    const { open, push } = make({ keepAliveMs: 20 });
    const unread = await open(jobs);
    for (let round = 1; round <= 3; round++)
      for (let i = 0; i < MAX_JOBS_PER_EVENT_STREAM; i++) push(progress(i, round));
    expect(ends).toEqual([]);
    await new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (ends.length === 0) return;
        clearInterval(poll);
        resolve();
      }, 5);
    });
    expect(ends).toEqual(['client_too_slow']);
    const drained = readEvents(unread);
    await drained.ended;
    // What the queue held: some 30 states of 2 KiB.
    expect(drained.records.length).toBeGreaterThan(25);
    expect(drained.records.length).toBeLessThan(40);

    // The control: a client that reads keeps its stream through the same, and ends with the newest state of every job.
    ends.length = 0;
    const { open: openRead, push: pushRead, streams } = make({ keepAliveMs: 20 });
    const read = readEvents(await openRead(jobs));
    for (let round = 1; round <= 3; round++)
      for (let i = 0; i < MAX_JOBS_PER_EVENT_STREAM; i++) pushRead(progress(i, round));
    const newest = () => {
      const byJob = new Map(read.records.map((record) => [record.job_id, record.progress?.bytes_done]));
      return [...byJob.values()].filter((bytes) => bytes === 3).length;
    };
    await read.waitFor(() => newest() === MAX_JOBS_PER_EVENT_STREAM, "every job's newest state");
    await read.waitFor(() => read.comments >= 3, 'three keep-alive intervals');
    expect(ends).toEqual([]);
    // Fewer than every state: those replaced while they waited were never sent.
    expect(read.records.length).toBeLessThan(MAX_JOBS_PER_EVENT_STREAM * 4);
    expect(read.records.length).toBeGreaterThan(MAX_JOBS_PER_EVENT_STREAM);
    streams.closeAll();
  });

  it('a shutdown ends it, and unwatches every job', async () => {
    const { open, streams, watcher } = make();
    const stream = readEvents(await open([row({ id: 'a' }), row({ id: 'b' }), row({ id: 'c' })]));
    expect(watcher.size()).toBe(3);
    streams.closeAll();
    await stream.ended;
    expect(ends).toEqual(['shutdown']);
    expect(watcher.size()).toBe(0);
  });
});

describe("getEvents' request", () => {
  const KEY = 'events-unit-key-0123456789abcdef';
  const known = new Map(['a', 'b', 'c'].map((id) => [id, row({ id })]));
  const unused = () => {
    throw new Error('not used');
  };
  function app() {
    const events = createJobEventStreams({
      watcher: manualWatcher().watcher,
      render: (job) => Promise.resolve(render(job)),
      items: noItems,
      keepAliveMs: 60_000,
      maxPerKey: 10,
      maxPerNode: 10,
    });
    return {
      events,
      app: createApp({
        log: createLogger('silent'),
        admission: createKeyAdmission({ checkKey: (key) => key === KEY }),
        operations: [],
        bodies: { body: unused, send: unused },
        getJob: unused,
        getJobs: (ids) => Promise.resolve(ids.flatMap((id) => known.get(id) ?? [])),
        jobEvents: events,
        webFiles: new Map(),
      }),
    };
  }
  const ask = (query: string, key = KEY) =>
    app().app.request(`/events${query}`, { headers: { authorization: `Bearer ${key}` } });

  it('names its jobs separated by commas, each carried once; more than the bound is 400 too_many_jobs, saying the bound', async () => {
    const ids = Array.from({ length: MAX_JOBS_PER_EVENT_STREAM }, (_, i) => `job-${i}`);
    expect(jobIdsOf(ids.join(','))).toEqual(ids);
    expect(jobIdsOf('a,b,a')).toEqual(['a', 'b']);
    expect(() => jobIdsOf([...ids, 'one-more'].join(','))).toThrow(
      expect.objectContaining({ kind: 'invalid_input', code: 'too_many_jobs', extra: { fields: { max_jobs: 200 } } }),
    );

    const res = await ask(`?jobs=${[...ids, 'one-more'].join(',')}`);
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toBe('application/problem+json');
    const problem = (await res.json()) as Record<string, unknown>;
    expect(problem).toMatchObject({ status: 400, code: 'too_many_jobs', max_jobs: MAX_JOBS_PER_EVENT_STREAM });
    expect(problem.detail).toBe(
      'One event stream carries at most 200 jobs; this request names 201. Open another stream for the rest.',
    );
  });

  it('no jobs, an empty id or one over 64 characters: 400 validation_failed naming the field', async () => {
    for (const query of ['', '?jobs=', '?jobs=a,,b', `?jobs=a,${'x'.repeat(65)}`]) {
      const res = await ask(query);
      expect([query, res.status]).toEqual([query, 400]);
      const problem = (await res.json()) as { code: string; errors: Array<{ path: string }> };
      expect(problem.code).toBe('validation_failed');
      expect(problem.errors[0]!.path).toMatch(/^jobs/);
    }
  });

  it('unknown ids: 404 job_not_found listing them, and no stream (the control: the known ones alone stream)', async () => {
    const { app: asked, events } = app();
    const headers = { authorization: `Bearer ${KEY}` };
    const res = await asked.request('/events?jobs=a,nope,b,gone', { headers });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ code: 'job_not_found', job_ids: ['nope', 'gone'] });
    expect(events.openCount()).toBe(0);
    const known = await asked.request('/events?jobs=a%2Cb', { headers });
    expect(known.status).toBe(200);
    const stream = readEvents(known);
    await stream.waitFor(() => stream.records.length === 2, 'both states');
    expect(stream.records.map((record) => record.job_id)).toEqual(['a', 'b']);
    expect(events.openCount()).toBe(1);
    events.closeAll();
  });

  it('needs the API key', async () => {
    expect((await ask('?jobs=a', 'not-the-key-0123456789abcdef')).status).toBe(401);
  });
});

/** For streams of source jobs: never asked. */
const noItems: CollectionItemSource = {
  states: () => Promise.reject(new Error('no collection here')),
  records: () => Promise.reject(new Error('no collection here')),
};

describe("a collection's item events", () => {
  const ends: StreamEnd[] = [];
  beforeEach(() => {
    ends.length = 0;
  });
  const parent = (overrides: Partial<JobRow> = {}) =>
    row({
      id: 'p',
      kind: 'collection',
      status: 'listed',
      parentId: null,
      maxItems: 500,
      collectionTitle: 'Feed',
      entriesFound: 0,
      itemsRefused: 0,
      children: 0,
      childrenDone: 0,
      childrenFailed: 0,
      childrenCanceled: 0,
      truncated: false,
      ...overrides,
    });
  /** Items held in memory: index → its child (null: refused) and whether it has ended. */
  const scripted = (title = '') => {
    const items = new Map<number, { jobId: string | null; ended: boolean }>();
    const fetches: Array<{ indexes: number[]; bytes: number }> = [];
    const record = (index: number): CollectionItemRecord => {
      const { jobId, ended } = items.get(index)!;
      return {
        index,
        title: `${title}${index}`,
        url: `https://m.example/${index}`,
        outcome: 'accepted',
        job: render(row({ id: jobId!, parentId: 'p', status: ended ? 'done' : 'queued' })),
      };
    };
    const source: CollectionItemSource = {
      states: (_id, from) =>
        Promise.resolve(
          [...items]
            .filter(([index]) => index >= from)
            .sort(([a], [b]) => a - b)
            .map(([index, state]) => ({ index, ...state })),
        ),
      records: (_id, indexes) => {
        const records = indexes.map(record);
        fetches.push({ indexes, bytes: records.reduce((n, r) => n + JSON.stringify(r).length, 0) });
        return Promise.resolve(records);
      },
    };
    return { items, source, fetches };
  };
  const make = (source: CollectionItemSource) => {
    const { watcher, push } = manualWatcher();
    const streams = createJobEventStreams({
      watcher,
      render: (job) => Promise.resolve(render(job)),
      items: source,
      keepAliveMs: 60_000,
      maxPerKey: 10,
      maxPerNode: 100,
    });
    const open = (job: JobRow, lastEventId?: string) =>
      streams.open({ jobs: [job], lastEventId, keyIdentity: 'key-a', onEnd: (reason) => ends.push(reason) });
    return { streams, push, open };
  };
  const itemsOf = (events: Array<{ event: string; data: string }>) =>
    events.filter((e) => e.event === 'item').map((e) => JSON.parse(e.data) as CollectionItemRecord);

  it("one per entry whose child ends while the stream is open, after the parent's state that counts it and with its id; shared and born-done children too; none for those ended before", async () => {
    const { items, source } = scripted();
    items.set(1, { jobId: 'c1', ended: true }); // born done before the open: told by the counts
    items.set(2, { jobId: null, ended: false }); // refused: no child, no item event
    items.set(3, { jobId: 'c3', ended: false });
    items.set(4, { jobId: 'c4', ended: false });
    items.set(5, { jobId: 'c3', ended: false }); // the same URL as 3: the same child
    const { open, push } = make(source);
    const stream = readEvents(await open(parent({ entriesFound: 5, itemsRefused: 1, children: 3, childrenDone: 1 })));
    await stream.waitFor(() => stream.records.length === 1, 'the first state');

    items.set(3, { jobId: 'c3', ended: true });
    items.set(5, { jobId: 'c3', ended: true });
    push(parent({ entriesFound: 5, itemsRefused: 1, children: 3, childrenDone: 2 }));
    await stream.waitFor(() => itemsOf(stream.events).length === 2, "the shared child's two entries");

    items.set(4, { jobId: 'c4', ended: true });
    items.set(6, { jobId: 'c6', ended: true }); // listed born done
    push(parent({ status: 'done', entriesFound: 6, itemsRefused: 1, children: 4, childrenDone: 4, finishedAt: 1 }));
    await stream.ended;
    expect(ends).toEqual(['jobs_ended']);
    expect(stream.events.map((e) => (e.event === 'job' ? 'job' : `item ${itemsOf([e])[0]!.index}`))).toEqual([
      'job',
      'job',
      'item 3',
      'item 5',
      'job',
      'item 4',
      'item 6',
    ]);
    expect(itemsOf(stream.events).map((item) => item.outcome === 'accepted' && item.job.job_id)).toEqual([
      'c3',
      'c3',
      'c4',
      'c6',
    ]);
    // Each item event carries the id of the parent's state it follows.
    const ids = stream.events.map((e) => e.id);
    expect(ids[2]).toBe(ids[1]);
    expect(ids[3]).toBe(ids[1]);
    expect(ids[5]).toBe(ids[4]);
    expect(ids[6]).toBe(ids[4]);
    // Resuming from the last item event is resuming from the parent's final state: nothing left.
    const again = await open(
      parent({ status: 'done', entriesFound: 6, itemsRefused: 1, children: 4, childrenDone: 4, finishedAt: 1 }),
      ids[6],
    );
    expect(again.status).toBe(204);
  });

  it('a slow reader: item events wait as a cursor, read from the source only as the client reads; none lost, none twice', async () => {
    const count = 300;
    const { items, source, fetches } = scripted('x'.repeat(1000));
    for (let index = 1; index <= count; index++) items.set(index, { jobId: `c${index}`, ended: false });
    const { open, push } = make(source);
    const res = await open(parent({ entriesFound: count, children: count }));
    // Every child ends at once (a cancel of the parent), before the client reads anything.
    for (const state of items.values()) state.ended = true;
    push(parent({ status: 'canceled', entriesFound: count, children: count, childrenCanceled: count, finishedAt: 1 }));

    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = '';
    let readBytes = 0;
    /** What the source had handed out, less what the client had read, at each fetch. */
    const ahead: number[] = [];
    let fetched = 0;
    for (;;) {
      while (fetched < fetches.length) {
        const before = fetches.slice(0, fetched).reduce((n, f) => n + f.bytes, 0);
        ahead.push(before - readBytes);
        fetched++;
      }
      const { done, value } = await reader.read();
      if (done) break;
      readBytes += value.byteLength;
      text += decoder.decode(value, { stream: true });
      // A slow client: it lets the server run between reads.
      await new Promise((resolve) => setImmediate(resolve));
    }
    const indexes = [...text.matchAll(/^event: item\ndata: (.*)$/gm)].map(
      (m) => (JSON.parse(m[1]!) as CollectionItemRecord).index,
    );
    expect(indexes).toEqual(Array.from({ length: count }, (_, i) => i + 1));
    expect(ends).toEqual(['jobs_ended']);
    // Far more than the queue holds was sent, yet never more than it holds and one read of the source ahead of the client.
    expect(fetches.reduce((n, f) => n + f.bytes, 0)).toBeGreaterThan(4 * 64 * 1024);
    expect(Math.max(...ahead)).toBeLessThanOrEqual(64 * 1024 + Math.max(...fetches.map((f) => f.bytes)));
  });
});
