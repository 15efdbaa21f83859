/**
 * One HTTP/1.1 request written byte for byte over a socket, so that no client library normalises
 * the path (dot segments, encodings) or hides a body sent by mistake (after HEAD); the whole
 * answer is read until the server closes.
 */
import { connect } from 'node:net';

export interface RawResponse {
  status: number;
  /** Lower-case names. */
  headers: Map<string, string>;
  /** Everything the server sent from the final answer's head on (interim answers dropped). */
  raw: Buffer;
  /** Bytes after the head. */
  bodyBytes: number;
  /** The bytes after the head, as sent. */
  body: Buffer;
}

export function rawRequest(
  port: number,
  method: 'GET' | 'HEAD',
  target: string,
  headers: Record<string, string> = {},
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect({ host: '127.0.0.1', port }, () => {
      const lines = [
        `${method} ${target} HTTP/1.1`,
        'Host: 127.0.0.1',
        'Connection: close',
        ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
      ];
      socket.write(Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'));
    });
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      let raw = Buffer.concat(chunks);
      // Interim answers (100 Continue) come before the final one.
      while (/^HTTP\/1\.1 1\d\d /.test(raw.subarray(0, 13).toString('latin1')))
        raw = raw.subarray(raw.indexOf('\r\n\r\n') + 4);
      const split = raw.indexOf('\r\n\r\n');
      const head = raw.subarray(0, Math.max(0, split)).toString('latin1').split('\r\n');
      const parsed = new Map(
        head
          .slice(1)
          .map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]),
      );
      resolve({
        status: Number(head[0]?.split(' ')[1] ?? 0),
        headers: parsed,
        raw,
        bodyBytes: split < 0 ? 0 : raw.length - split - 4,
        body: split < 0 ? Buffer.alloc(0) : raw.subarray(split + 4),
      });
    });
  });
}

export interface RawMessage {
  status: number;
  /** Lower-case names. */
  headers: Map<string, string>;
  body: Buffer;
}

/**
 * One connection kept open across requests, for what a client library hides: whether the server
 * keeps or closes the connection, and interim responses (100 Continue). Responses are read as
 * they arrive, one message at a time; a final response needs a Content-Length (the service always
 * sends one for the answers read here).
 *
 *   const conn = await openRawConnection(port);
 *   conn.write('POST /sources HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n...\r\n\r\n');
 *   expect((await conn.readMessage()).status).toBe(100);
 *   await conn.closedByServer;
 */
export interface RawConnection {
  write(data: string | Buffer): void;
  /** The next message the server sends (interim or final), or an error if it closes first. */
  readMessage(): Promise<RawMessage>;
  /** Resolves when the server ends the connection (not when `close()` is called). */
  closedByServer: Promise<void>;
  /** Everything the server sent on this connection so far. */
  received(): Buffer;
  close(): void;
}

export function openRawConnection(port: number): Promise<RawConnection> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    let all = Buffer.alloc(0);
    let pending = Buffer.alloc(0);
    let ended = false;
    let closedByClient = false;
    let wake: (() => void) | undefined;
    let signalClosed: () => void;
    const closedByServer = new Promise<void>((done) => (signalClosed = done));
    socket.on('data', (chunk: Buffer) => {
      all = Buffer.concat([all, chunk]);
      pending = Buffer.concat([pending, chunk]);
      wake?.();
    });
    // A reset after the server's answer (it closed with our unsent body still queued) ends the
    // connection like a FIN does; what it sent before is still in `pending`.
    socket.on('error', () => undefined);
    socket.on('close', () => {
      ended = true;
      if (!closedByClient) signalClosed();
      wake?.();
    });
    const nextChange = () => new Promise<void>((done) => (wake = done));

    const tryParse = (): RawMessage | undefined => {
      const split = pending.indexOf('\r\n\r\n');
      if (split < 0) return undefined;
      const head = pending.subarray(0, split).toString('latin1').split('\r\n');
      const headers = new Map(
        head
          .slice(1)
          .map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]),
      );
      const status = Number(head[0]?.split(' ')[1] ?? 0);
      const length = status < 200 ? 0 : Number(headers.get('content-length'));
      if (!Number.isInteger(length)) throw new Error(`a response without Content-Length: ${head[0]}`);
      if (pending.length < split + 4 + length) return undefined;
      const body = pending.subarray(split + 4, split + 4 + length);
      pending = pending.subarray(split + 4 + length);
      return { status, headers, body };
    };

    socket.once('connect', () => {
      socket.off('error', reject);
      resolve({
        write: (data) => void socket.write(data),
        async readMessage() {
          for (;;) {
            const message = tryParse();
            if (message) return message;
            if (ended)
              throw new Error(
                `the connection ended before a whole response: ${JSON.stringify(pending.toString('latin1'))}`,
              );
            await nextChange();
          }
        },
        closedByServer,
        received: () => all,
        close() {
          closedByClient = true;
          socket.destroy();
        },
      });
    });
    socket.once('error', reject);
  });
}
