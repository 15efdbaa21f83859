/**
 * A reader of `text/event-stream` (the WHATWG HTML "event stream interpretation"), for the events
 * the CLI follows: fields `event`, `data` (lines joined with \n), `id` and `retry`; lines starting
 * with ':' are comments; an event is dispatched at a blank line, and one cut off by the end of
 * the stream is dropped.
 */
export interface ServerSentEvent {
  event: string;
  data: string;
  /** The last event id seen so far on the stream (it carries over to later events). */
  id: string | undefined;
}

export interface EventStreamReader {
  /** Feeds decoded text; returns the events it completed. */
  push(text: string): ServerSentEvent[];
  /** The reconnection delay the server asked for, if any. */
  readonly retryMs: number | undefined;
}

export function createEventStreamReader(): EventStreamReader {
  let buffer = '';
  let event = '';
  let data: string[] = [];
  let lastId: string | undefined;
  let retryMs: number | undefined;
  let skipLineFeed = false;

  function line(text: string, out: ServerSentEvent[]): void {
    if (text === '') {
      if (data.length > 0) out.push({ event: event || 'message', data: data.join('\n'), id: lastId });
      event = '';
      data = [];
      return;
    }
    if (text.startsWith(':')) return;
    const colon = text.indexOf(':');
    const field = colon === -1 ? text : text.slice(0, colon);
    let value = colon === -1 ? '' : text.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id' && !value.includes('\0')) lastId = value;
    else if (field === 'retry' && /^\d+$/.test(value)) retryMs = Number(value);
  }

  return {
    push(text) {
      const out: ServerSentEvent[] = [];
      for (const char of text) {
        // \r\n is one line end: the \n after a \r that ended a line is skipped.
        if (skipLineFeed) {
          skipLineFeed = false;
          if (char === '\n') continue;
        }
        if (char === '\r' || char === '\n') {
          line(buffer, out);
          buffer = '';
          skipLineFeed = char === '\r';
        } else {
          buffer += char;
        }
      }
      return out;
    },
    get retryMs() {
      return retryMs;
    },
  };
}
