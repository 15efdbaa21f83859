import { createHash } from 'node:crypto';
import type { JobRow } from '../db/database.js';
import { ServiceError } from '../errors.js';
import type { JobWatcher } from '../jobs/job-watch.js';
import { FINAL_STATUSES } from '../jobs/queue.js';
import type { ItemState } from '../jobs/collection/parent.js';
import type { CollectionItemRecord, JobRecord } from './schemas.js';

/**
 * Job event streams: the records of one job (getJobEvents) or of many (getEvents) as Server-Sent
 * Events, one `job` event each time one of them changes, until every one of them has ended. Both
 * are this one implementation; a stream of one job is a stream of many with one in it. Every event
 * is the whole record (what GET /jobs/{id} answers), so a client that missed some states has lost
 * nothing but those states. Its `id` is a digest of the record (what changes without the job
 * changing left out: eventIdOf), the same on every node and in both kinds of stream: a client that
 * reconnects with `Last-Event-ID` is not sent that state again, and gets a 204 when there is
 * nothing left to send (its one job had ended in that state).
 *
 * At the open, each job's state now, in the order named: a job already ended sends its final
 * state and nothing more; the stream follows the others and ends once all of them have ended.
 *
 * Through nginx: `X-Accel-Buffering: no` turns its response buffering off for the stream, and a
 * comment every keep-alive interval (shorter than nginx's proxy_read_timeout) keeps an idle
 * stream open. Streams are bounded per API key and per node (429 `too_many_event_streams`), a
 * stream counting once whatever the number of its jobs. A stream queues at most 64 KiB its client
 * has not read; past that it keeps each job's newest state only (one per job: a client slower
 * than the changes misses states in between, and loses nothing else), and a client that takes
 * none of them for a whole keep-alive interval has its stream ended, and reconnects.
 *
 * A collection's stream (kind `collection`) also sends an `item` event for each of its entries
 * whose child job ends while the stream is open: the item as listJobItems shows it (its index,
 * title, URL, and its child's final record: content id or error code), one per entry (a child
 * shared by two entries of the same URL gives two, one per index; a born-done child one as soon as
 * it is listed). Children that had ended when the stream opened are told by the parent's counts,
 * not by item events (listJobItems has them all). Item events follow the parent's `job` event
 * that counts them, and carry its `id`: resuming from an item event is resuming from that state of
 * the parent, and a client that reconnects is sent no item event for children that ended before
 * (it reads them with listJobItems). Item events are never collapsed nor dropped while the stream
 * is open: past the 64 KiB unread they wait, as nothing more than a cursor on the collection's
 * items (the entries at or past the first whose child has not ended, those of them sent), and are
 * read from the database and sent as the client reads; a client that reads none of them for a
 * whole keep-alive interval has its stream ended as too slow, as above.
 *
 * A stream holds its place in those bounds only as long as the HTTP exchange that carries it: it
 * ends, and gives its place back, when the exchange does (`closed`), however it ends, even when
 * nobody reads or cancels the body. HEAD gets the head a GET would get (200, 204 or 429) and no
 * stream at all.
 */
export const JOB_EVENT = 'job';
export const ITEM_EVENT = 'item';

/** A collection's items, for its streams' item events. */
export interface CollectionItemSource {
  /** Where the collection's items stand from index `from` on, in their order. */
  states(parentId: string, from: number): Promise<ItemState[]>;
  /** The items at these indexes, as listJobItems shows them. */
  records(parentId: string, indexes: number[]): Promise<CollectionItemRecord[]>;
}

export interface JobEventStreamsDeps {
  watcher: JobWatcher<JobRecord>;
  render: (job: JobRow) => Promise<JobRecord>;
  items: CollectionItemSource;
  keepAliveMs: number;
  maxPerKey: number;
  maxPerNode: number;
  /** What EventSource waits before reconnecting; default 1000 ms. */
  retryMs?: number;
}

export interface OpenStreamInput {
  /** The jobs the stream carries, as read before it opens; a job named twice is carried once. */
  jobs: readonly JobRow[];
  lastEventId: string | undefined;
  /** Whose streams count against the per-key limit (a digest of the key, never the key). */
  keyIdentity: string;
  /**
   * Aborted when the HTTP exchange that carries the stream has ended (its answer finished or its
   * connection closed): the stream ends then, if it has not already.
   */
  closed?: AbortSignal;
  onEnd?: (reason: StreamEnd) => void;
}

export type StreamEnd = 'jobs_ended' | 'client_closed' | 'client_too_slow' | 'exchange_ended' | 'shutdown';

export interface JobEventStreams {
  open(input: OpenStreamInput): Promise<Response>;
  /** What `open` would answer, without the stream: the head for HEAD. Takes no place. */
  head(input: Omit<OpenStreamInput, 'closed' | 'onEnd'>): Promise<Response>;
  openCount(): number;
  /** Ends every stream (shutdown): clients reconnect, to another node, with Last-Event-ID. */
  closeAll(): void;
}

const RETRY_AFTER_S = 5;
/**
 * Unread bytes a stream queues for its client; past them it keeps only each job's newest state
 * until the client reads.
 */
const MAX_UNREAD_BYTES = 64 * 1024;

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store',
  // nginx: pass each event on as it comes instead of buffering the response.
  'x-accel-buffering': 'no',
} as const;

/**
 * The event id of a record: the same state always gets the same id, on every node. Left out: the
 * signed URLs (signed anew at every read) and the callback's delivery, whose attempts go on being
 * recorded after the job ended, so that a client holding the final state gets 204, not that
 * state again with another id.
 */
/** A record's status is final (a collection's `expanding` is not a row status, and not final). */
const hasEnded = (record: JobRecord) => (FINAL_STATUSES as ReadonlySet<string>).has(record.status);

export function eventIdOf(record: JobRecord): string {
  const { callback: _callback, ...job } = record;
  const stable = job.result
    ? {
        ...job,
        result: {
          ...job.result,
          artifacts: job.result.artifacts.map(({ signed_url: _u, signed_url_expires_at: _e, ...rest }) => rest),
        },
      }
    : job;
  return createHash('sha256').update(JSON.stringify(stable)).digest('base64url').slice(0, 22);
}

export function formatEvent(record: JobRecord, id: string): string {
  return `id: ${id}\nevent: ${JOB_EVENT}\ndata: ${JSON.stringify(record)}\n\n`;
}

/** An item event: the id is that of the parent's state it follows. */
export function formatItemEvent(item: CollectionItemRecord, parentStateId: string): string {
  return `id: ${parentStateId}\nevent: ${ITEM_EVENT}\ndata: ${JSON.stringify(item)}\n\n`;
}

/** Items read and sent at once by a stream that has room. */
const ITEMS_PER_READ = 20;

/** A stream's place in one collection's items: which ends it has sent. */
interface ItemCursor {
  /** Every item below this index is settled: refused, or its child's end sent (or told by the counts at the open). */
  from: number;
  /** Items at or past `from` whose child's end has been sent (or had come by the open). */
  sent: Set<number>;
  /** The id of the parent's state last passed to the stream: its item events carry it. */
  stateId: string | undefined;
  /** The parent's count of ended children when the cursor last looked: a child's end changes it (the trigger counts it in that transaction). */
  endedCount: number | undefined;
  /** A look at the items is under way; `again`: another is wanted after it. */
  looking: boolean;
  again: boolean;
  /** Items may be due that did not fit: looked at again when the client reads. */
  behind: boolean;
}

/**
 * The first index at or past `from` whose child has not ended (the end when there is none), and
 * the items due: ended, not refused, not sent.
 */
function settle(states: readonly ItemState[], cursor: ItemCursor): { firstOpen: number; due: number[] } {
  let firstOpen: number | undefined;
  const due: number[] = [];
  for (const state of states) {
    if (state.jobId === null) continue;
    if (!state.ended) firstOpen ??= state.index;
    else if (!cursor.sent.has(state.index)) due.push(state.index);
  }
  return { firstOpen: firstOpen ?? (states.at(-1)?.index ?? cursor.from - 1) + 1, due };
}

interface OpenStream {
  keyIdentity: string;
  end(reason: StreamEnd): void;
  keepAlive(): void;
}

export function createJobEventStreams(deps: JobEventStreamsDeps): JobEventStreams {
  const streams = new Set<OpenStream>();
  const perKey = new Map<string, number>();
  const encoder = new TextEncoder();
  let keepAliveTimer: NodeJS.Timeout | undefined;

  const tooMany = (limit: 'per_key' | 'per_node', detail: string) =>
    new ServiceError('rate_limited', 'too_many_event_streams', detail, {
      retryAfterSeconds: RETRY_AFTER_S,
      fields: { limit },
    });

  function admit(keyIdentity: string): void {
    if ((perKey.get(keyIdentity) ?? 0) >= deps.maxPerKey) {
      throw tooMany(
        'per_key',
        `This API key has ${deps.maxPerKey} event streams open, the most allowed; close one or poll GET /jobs/{id}.`,
      );
    }
    if (streams.size >= deps.maxPerNode) {
      throw tooMany(
        'per_node',
        'This node serves as many event streams as it allows; try again shortly or poll GET /jobs/{id}.',
      );
    }
  }

  function track(stream: OpenStream): void {
    streams.add(stream);
    perKey.set(stream.keyIdentity, (perKey.get(stream.keyIdentity) ?? 0) + 1);
    if (!keepAliveTimer) {
      // One timer for every stream on the node.
      keepAliveTimer = setInterval(() => {
        for (const open of streams) open.keepAlive();
      }, deps.keepAliveMs);
      keepAliveTimer.unref();
    }
  }

  function untrack(stream: OpenStream): void {
    if (!streams.delete(stream)) return;
    const left = (perKey.get(stream.keyIdentity) ?? 1) - 1;
    if (left > 0) perKey.set(stream.keyIdentity, left);
    else perKey.delete(stream.keyIdentity);
    if (streams.size === 0 && keepAliveTimer) {
      clearInterval(keepAliveTimer);
      keepAliveTimer = undefined;
    }
  }

  /**
   * Each job's current record, in the order given, or the 204 for a client that has been sent
   * everything already: every job has ended and the only state left to send is its Last-Event-ID.
   */
  async function current(jobs: readonly JobRow[], lastEventId: string | undefined): Promise<JobRecord[] | Response> {
    const unique = [...new Map(jobs.map((job) => [job.id, job])).values()];
    const records = await Promise.all(unique.map((job) => deps.render(job)));
    // The records, not the rows: a view reads a follower again whose leader has just ended.
    const ended = records.every((record) => hasEnded(record));
    if (ended && records.every((record) => eventIdOf(record) === lastEventId))
      return new Response(null, { status: 204, headers: { 'cache-control': 'no-store' } });
    return records;
  }

  /** A cursor for each collection carried that has not ended, its children already ended taken as told. */
  async function itemCursors(jobs: readonly JobRow[]): Promise<Map<string, ItemCursor>> {
    const open = jobs.filter((job) => job.kind === 'collection' && !FINAL_STATUSES.has(job.status));
    const cursors = new Map<string, ItemCursor>();
    for (const job of open) {
      if (cursors.has(job.id)) continue;
      const cursor: ItemCursor = {
        from: 1,
        sent: new Set(),
        stateId: undefined,
        endedCount: undefined,
        looking: false,
        again: false,
        behind: false,
      };
      const states = await deps.items.states(job.id, 1);
      const { firstOpen, due } = settle(states, cursor);
      cursor.from = firstOpen;
      for (const index of due) if (index > firstOpen) cursor.sent.add(index);
      cursors.set(job.id, cursor);
    }
    return cursors;
  }

  return {
    async head({ jobs, lastEventId, keyIdentity }) {
      admit(keyIdentity);
      const records = await current(jobs, lastEventId);
      if (records instanceof Response) return records;
      return new Response(null, { status: 200, headers: SSE_HEADERS });
    },
    async open({ jobs, lastEventId, keyIdentity, closed: exchangeClosed, onEnd }) {
      admit(keyIdentity);
      // Read before the records: a child that ends in between is counted by the parent's first
      // record and may get its item event too, but none is missed.
      const cursors = await itemCursors(jobs);
      const records = await current(jobs, lastEventId);
      if (records instanceof Response) return records;
      // Checked again: rendering awaited, and other streams may have opened meanwhile.
      admit(keyIdentity);

      let controller!: ReadableStreamDefaultController<Uint8Array>;
      /** Per job, the id of the state the client was sent last (or told of by Last-Event-ID). */
      const lastSentIds = new Map(records.map((record) => [record.job_id, lastEventId]));
      /** The jobs not ended yet, each with its unsubscribe function once watched. */
      const following = new Map<string, (() => void) | undefined>(records.map((record) => [record.job_id, undefined]));
      /**
       * Per job, its newest event that did not fit in the stream's queue (MAX_UNREAD_BYTES), in
       * the order they came: sent as the client reads, a newer state of the job replacing it.
       */
      const waiting = new Map<string, Uint8Array>();
      /** States have waited since the last keep-alive tick without the client taking any. */
      let stalled = false;
      let closed = false;

      const stream: OpenStream = {
        keyIdentity,
        end(reason) {
          if (closed) return;
          closed = true;
          for (const unwatch of following.values()) unwatch?.();
          following.clear();
          waiting.clear();
          untrack(stream);
          // The client going away cancels the body; anything else closes it from here.
          if (reason !== 'client_closed') {
            try {
              controller.close();
            } catch {
              // already closed or errored
            }
          }
          onEnd?.(reason);
        },
        keepAlive() {
          if (closed) return;
          if (waiting.size === 0 && !itemsBehind()) {
            if (room()) controller.enqueue(encoder.encode(': keep-alive\n\n'));
            return;
          }
          // Room, and items still wait: their read failed; it is tried again.
          if (room()) {
            drain();
            return;
          }
          // States wait: the stream is not idle. A client that took none of them for a whole
          // interval is too slow; it reconnects.
          if (stalled) stream.end('client_too_slow');
          else stalled = true;
        },
      };

      /** desiredSize counts down from the high-water mark as bytes wait unread. */
      const room = () => (controller.desiredSize ?? 0) > 0;

      /** Moves waiting states into the queue while it has room (the client has read), then items that wait. */
      function drain(): void {
        for (const [jobId, bytes] of waiting) {
          if (closed || !room()) return;
          waiting.delete(jobId);
          stalled = false;
          controller.enqueue(bytes);
        }
        for (const [jobId, cursor] of cursors) if (cursor.behind) void look(jobId, cursor);
      }

      const itemsBehind = () => [...cursors.values()].some((cursor) => cursor.behind);
      const itemsIdle = () => [...cursors.values()].every((cursor) => !cursor.looking && !cursor.behind);
      /** Nothing left to send: every job ended, and all they gave sent. */
      function endIfDone(): void {
        if (!closed && following.size === 0 && waiting.size === 0 && itemsIdle()) stream.end('jobs_ended');
      }

      /**
       * Sends the item events due in a collection: the items whose child has ended since the
       * cursor last looked. One look at a time per collection; past the queue's room, the rest
       * wait for the client to read (`behind`), after any job state that waits.
       */
      async function look(jobId: string, cursor: ItemCursor): Promise<void> {
        if (cursor.looking) {
          cursor.again = true;
          return;
        }
        cursor.looking = true;
        cursor.behind = false;
        try {
          do {
            cursor.again = false;
            const { firstOpen, due } = settle(await deps.items.states(jobId, cursor.from), cursor);
            let unsent = due.length;
            for (let at = 0; at < due.length && !closed; at += ITEMS_PER_READ) {
              if (waiting.size > 0 || !room()) break;
              const items = await deps.items.records(jobId, due.slice(at, at + ITEMS_PER_READ));
              if (closed) return;
              for (const item of items) {
                controller.enqueue(encoder.encode(formatItemEvent(item, cursor.stateId ?? '')));
                cursor.sent.add(item.index);
              }
              stalled = false;
              unsent = Math.max(0, due.length - at - ITEMS_PER_READ);
            }
            if (closed) return;
            if (unsent > 0) {
              cursor.behind = true;
              cursor.from = Math.min(firstOpen, due[due.length - unsent]!);
            } else cursor.from = firstOpen;
            for (const index of cursor.sent) if (index < cursor.from) cursor.sent.delete(index);
          } while (cursor.again && !cursor.behind);
        } catch {
          // The database failed: looked at again at the parent's next change or the client's next read.
          cursor.behind = true;
        } finally {
          cursor.looking = false;
          endIfDone();
        }
      }

      function send(record: JobRecord): void {
        if (closed) return;
        const id = eventIdOf(record);
        const cursor = cursors.get(record.job_id);
        if (lastSentIds.get(record.job_id) !== id) {
          lastSentIds.set(record.job_id, id);
          const bytes = encoder.encode(formatEvent(record, id));
          if (waiting.size === 0 && room()) controller.enqueue(bytes);
          else waiting.set(record.job_id, bytes);
        }
        if (cursor) {
          cursor.stateId = id;
          // Only a change of the count of ended children can bring item events (or the parent's end).
          const counts = record.collection;
          const endedCount = counts ? counts.done + counts.failed + counts.canceled : 0;
          if (endedCount !== cursor.endedCount || hasEnded(record)) {
            cursor.endedCount = endedCount;
            void look(record.job_id, cursor);
          }
        }
        if (hasEnded(record) && following.has(record.job_id)) {
          following.get(record.job_id)?.();
          following.delete(record.job_id);
          // Closed once the client has read what waits (close() keeps the queue readable).
          endIfDone();
        }
      }

      const body = new ReadableStream<Uint8Array>(
        {
          start(c) {
            controller = c;
          },
          pull() {
            drain();
            endIfDone();
          },
          cancel() {
            stream.end('client_closed');
          },
        },
        { highWaterMark: MAX_UNREAD_BYTES, size: (chunk) => chunk.byteLength },
      );
      track(stream);
      // The exchange may have ended while the records were read: then the place is given back at once.
      if (exchangeClosed) {
        if (exchangeClosed.aborted) stream.end('exchange_ended');
        else exchangeClosed.addEventListener('abort', () => stream.end('exchange_ended'), { once: true });
      }
      // The first bytes go out at once, so the client (and nginx) see the answer start even when
      // the client already has the current states.
      if (!closed) controller.enqueue(encoder.encode(`retry: ${deps.retryMs ?? 1000}\n\n`));
      for (const record of records) send(record);
      for (const jobId of following.keys()) following.set(jobId, deps.watcher.watch(jobId, send));
      return new Response(body, { status: 200, headers: SSE_HEADERS });
    },
    openCount: () => streams.size,
    closeAll() {
      for (const stream of [...streams]) stream.end('shutdown');
    },
  };
}
