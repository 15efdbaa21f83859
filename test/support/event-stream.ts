/**
 * Reads a `text/event-stream` answer as it arrives (with the CLI's own reader, src/cli/sse.ts),
 * for tests of getJobEvents:
 *
 *   const stream = await openEventStream(`${svc.baseUrl}/jobs/${id}/events`, { authorization });
 *   await stream.waitFor(() => stream.records.some((r) => r.status === 'running'), 'running');
 *   await stream.ended;            // the server ended it
 *   stream.events / stream.records / stream.comments
 */
import { createEventStreamReader, type ServerSentEvent } from '../../src/cli/sse.js';

export interface StreamedRecord {
  job_id: string;
  status: string;
  progress: { bytes_done: number; bytes_total: number | null; percent: number | null } | null;
  result: { content_id: string; artifacts: Array<Record<string, unknown>> } | null;
  [key: string]: unknown;
}

export interface EventStreamHandle {
  response: Response;
  events: ServerSentEvent[];
  /** The data of the `job` events, parsed. */
  records: StreamedRecord[];
  /** Comment lines (keep-alives) received. */
  comments: number;
  /** Milliseconds since the request, for each event and comment, in order of arrival. */
  arrivals: Array<{ kind: 'event' | 'comment'; at: number }>;
  /** Resolves when the server ends the stream (rejects if the connection breaks instead). */
  ended: Promise<void>;
  /** Resolves once `predicate` holds; rejects if the stream ends first or after `timeoutMs`. */
  waitFor(predicate: () => boolean, what: string, timeoutMs?: number): Promise<void>;
  /** The reconnection delay the server asked for. */
  retryMs(): number | undefined;
  /** Hangs up. */
  close(): Promise<void>;
}

export async function openEventStream(url: string, headers: Record<string, string>): Promise<EventStreamHandle> {
  return readEventStream(await fetch(url, { headers: { accept: 'text/event-stream', ...headers } }));
}

export function readEventStream(response: Response, startedAt = Date.now()): EventStreamHandle {
  const reader = createEventStreamReader();
  const decoder = new TextDecoder();
  const body = (response.body as ReadableStream<Uint8Array> | null)?.getReader();
  const waiters = new Set<() => void>();
  let finished = false;
  const handle: EventStreamHandle = {
    response,
    events: [],
    records: [],
    comments: 0,
    arrivals: [],
    ended: Promise.resolve(),
    waitFor(predicate, what, timeoutMs = 30_000) {
      return new Promise<void>((resolve, reject) => {
        const check = () => {
          if (predicate()) {
            cleanup();
            resolve();
          } else if (finished) {
            cleanup();
            reject(
              new Error(`the stream ended before ${what}: ${JSON.stringify(handle.records.map((r) => r.status))}`),
            );
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`timed out waiting for ${what}: ${JSON.stringify(handle.records.map((r) => r.status))}`));
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
    retryMs: () => reader.retryMs,
    async close() {
      await body?.cancel().catch(() => {});
    },
  };
  handle.ended = (async () => {
    if (!body) return;
    try {
      for (;;) {
        const { done, value } = await body.read();
        if (done) return;
        const text = decoder.decode(value, { stream: true });
        const at = Date.now() - startedAt;
        for (const line of text.split('\n')) {
          if (line.startsWith(':')) {
            handle.comments++;
            handle.arrivals.push({ kind: 'comment', at });
          }
        }
        for (const event of reader.push(text)) {
          handle.events.push(event);
          handle.arrivals.push({ kind: 'event', at });
          if (event.event === 'job') handle.records.push(JSON.parse(event.data) as StreamedRecord);
        }
        for (const waiter of [...waiters]) waiter();
      }
    } finally {
      finished = true;
      for (const waiter of [...waiters]) waiter();
    }
  })();
  // Callers that never await `ended` must not see an unhandled rejection when they hang up.
  handle.ended.catch(() => {});
  return handle;
}
