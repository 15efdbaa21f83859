import { createHash } from 'node:crypto';
import type { JobRow } from '../db/database.js';
import { ServiceError } from '../errors.js';
import type { JobWatcher } from '../jobs/job-watch.js';
import { FINAL_STATUSES } from '../jobs/queue.js';
import type { JobRecord } from './schemas.js';

/**
 * getJobEvents: a job's record as Server-Sent Events, one `job` event each time it changes, until
 * the job ends. Every event is the whole record (what GET /jobs/{id} answers), so a client that
 * missed some states has lost nothing but those states. Its `id` is a digest of the record (what
 * changes without the job changing left out: eventIdOf): a client that reconnects with
 * `Last-Event-ID` gets the current state only if it differs from what it had, and a 204 when it
 * already had the final one (which tells EventSource to stop reconnecting).
 *
 * Through nginx: `X-Accel-Buffering: no` turns its response buffering off for the stream, and a
 * comment every keep-alive interval (shorter than nginx's proxy_read_timeout) keeps an idle
 * stream open. Streams are bounded per API key and per node (429 `too_many_event_streams`); a
 * client that stops reading has its stream ended once 64 KiB are waiting for it, and reconnects.
 *
 * A stream holds its place in those bounds only as long as the HTTP exchange that carries it: it
 * ends, and gives its place back, when the exchange does (`closed`), however it ends, even when
 * nobody reads or cancels the body. HEAD gets the head a GET would get (200, 204 or 429) and no
 * stream at all.
 */
export const JOB_EVENT = 'job';

export interface JobEventStreamsDeps {
  watcher: JobWatcher<JobRecord>;
  render: (job: JobRow) => Promise<JobRecord>;
  keepAliveMs: number;
  maxPerKey: number;
  maxPerNode: number;
  /** What EventSource waits before reconnecting; default 1000 ms. */
  retryMs?: number;
}

export interface OpenStreamInput {
  job: JobRow;
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

export type StreamEnd = 'job_ended' | 'client_closed' | 'client_too_slow' | 'exchange_ended' | 'shutdown';

export interface JobEventStreams {
  open(input: OpenStreamInput): Promise<Response>;
  /** What `open` would answer, without the stream: the head for HEAD. Takes no place. */
  head(input: Omit<OpenStreamInput, 'closed' | 'onEnd'>): Promise<Response>;
  openCount(): number;
  /** Ends every stream (shutdown): clients reconnect, to another node, with Last-Event-ID. */
  closeAll(): void;
}

const RETRY_AFTER_S = 5;
/** Unread bytes a client may leave waiting before its stream is ended. */
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

  /** The job's current record, or the 204 for a client that has its final state already. */
  async function current(job: JobRow, lastEventId: string | undefined): Promise<JobRecord | Response> {
    const record = await deps.render(job);
    // The record, not the row: its view reads a follower again whose leader has just ended.
    const ended = FINAL_STATUSES.has(record.status);
    // The client has the final state already: nothing more will come.
    if (ended && lastEventId === eventIdOf(record))
      return new Response(null, { status: 204, headers: { 'cache-control': 'no-store' } });
    return record;
  }

  return {
    async head({ job, lastEventId, keyIdentity }) {
      admit(keyIdentity);
      const record = await current(job, lastEventId);
      if (record instanceof Response) return record;
      return new Response(null, { status: 200, headers: SSE_HEADERS });
    },
    async open({ job, lastEventId, keyIdentity, closed: exchangeClosed, onEnd }) {
      admit(keyIdentity);
      const record = await current(job, lastEventId);
      if (record instanceof Response) return record;
      // Checked again: rendering awaited, and other streams may have opened meanwhile.
      admit(keyIdentity);

      let controller!: ReadableStreamDefaultController<Uint8Array>;
      let lastSentId = lastEventId;
      let unwatch: (() => void) | undefined;
      let closed = false;

      const stream: OpenStream = {
        keyIdentity,
        end(reason) {
          if (closed) return;
          closed = true;
          unwatch?.();
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
          if (!closed) write(': keep-alive\n\n');
        },
      };

      function write(text: string): void {
        if (closed) return;
        controller.enqueue(encoder.encode(text));
        // desiredSize counts down from the high-water mark as bytes wait unread.
        if ((controller.desiredSize ?? 0) <= 0) stream.end('client_too_slow');
      }

      function send(record: JobRecord): void {
        const id = eventIdOf(record);
        if (id !== lastSentId) {
          lastSentId = id;
          write(formatEvent(record, id));
        }
        if (FINAL_STATUSES.has(record.status)) stream.end('job_ended');
      }

      const body = new ReadableStream<Uint8Array>(
        {
          start(c) {
            controller = c;
          },
          cancel() {
            stream.end('client_closed');
          },
        },
        { highWaterMark: MAX_UNREAD_BYTES, size: (chunk) => chunk.byteLength },
      );
      track(stream);
      // The exchange may have ended while the record was read: then the place is given back at once.
      if (exchangeClosed) {
        if (exchangeClosed.aborted) stream.end('exchange_ended');
        else exchangeClosed.addEventListener('abort', () => stream.end('exchange_ended'), { once: true });
      }
      // The first bytes go out at once, so the client (and nginx) see the answer start even when
      // the client already has the current state.
      write(`retry: ${deps.retryMs ?? 1000}\n\n`);
      send(record);
      if (!closed) unwatch = deps.watcher.watch(job.id, send);
      return new Response(body, { status: 200, headers: SSE_HEADERS });
    },
    openCount: () => streams.size,
    closeAll() {
      for (const stream of [...streams]) stream.end('shutdown');
    },
  };
}
