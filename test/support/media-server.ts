/**
 * A tiny HTTP origin on 127.0.0.1 for end-to-end tests: serves files (with Range and optional
 * throttling), redirects and custom handlers, and logs every request.
 *
 *   const server = await startMediaServer();
 *   server.serveFile('/a.m4a', fixtures.aac_m4a.path, { contentType: 'audio/mp4' });
 *   server.serveFile('/slow.wav', long.path, { contentType: 'audio/wav', throttleBytesPerSec: 64 * 1024 });
 *   server.redirect('/r', '/a.m4a');
 *   server.route('/live.m3u8', (req, res) => res.end('#EXTM3U...'));
 *   server.url('/a.m4a')              // 'http://127.0.0.1:<port>/a.m4a' (the URL to submit)
 *   server.hostPort                   // '127.0.0.1:<port>' (for FETCH_ALLOW_HOSTS)
 *   server.requestsFor('/a.m4a')      // [{ method, path, headers, at, completed }, ...]
 *   server.downloadsOf('/a.m4a')      // GETs of a served file answered with every byte of its body
 *   await server.close()              // also cuts in-flight (throttled) responses
 *
 * Routes match the path without its query string; a later registration replaces an earlier
 * one. Unknown paths get 404. Served files answer GET and HEAD; a single `bytes=` range gets
 * 206 (an unsatisfiable one 416), several ranges get the whole file (allowed by RFC 9110).
 * Throttled files are sent in chunks of a tenth of the rate, one every 100 ms, the first at once.
 */
import { once } from 'node:events';
import { open, stat } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface RecordedRequest {
  method: string;
  /** Path and query string as received. */
  path: string;
  headers: IncomingHttpHeaders;
  /** Date.now() when the request arrived. */
  at: number;
  /**
   * For served files: the whole body was sent and the response finished (a client that read a few
   * bytes and hung up, as a downloader's metadata step does, leaves it false).
   */
  completed: boolean;
}

export interface ServeFileOptions {
  contentType: string;
  /** Send at most this many bytes per second. */
  throttleBytesPerSec?: number;
  /** Answer with this status (and the file as body) instead of 200/206; Range is then ignored. */
  status?: number;
  /** Omit Content-Length (chunked transfer): the client cannot know the size up front. Range is then ignored. */
  unknownLength?: boolean;
}

export type RouteHandler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

export interface MediaServer {
  /** '127.0.0.1:<port>' (or the loopback address it was started on) */
  readonly hostPort: string;
  /** Every request so far, oldest first. */
  readonly requests: RecordedRequest[];
  url(path: string): string;
  serveFile(urlPath: string, filePath: string, opts: ServeFileOptions): void;
  redirect(urlPath: string, location: string, status?: number): void;
  route(urlPath: string, handler: RouteHandler): void;
  /** Requests whose path (query string ignored) is `path`. */
  requestsFor(path: string): RecordedRequest[];
  /** Complete GETs of the whole served file at `path`: how many times it was really downloaded. */
  downloadsOf(path: string): number;
  /** Stops listening and destroys open sockets; safe to call twice. */
  close(): Promise<void>;
}

const THROTTLE_TICK_MS = 100;
const CHUNK_BYTES = 64 * 1024;

/** host: another loopback address (127.0.0.2, ...) is another host to a client: its cookies are not 127.0.0.1's. */
export async function startMediaServer(
  opts: { host?: `127.${number}.${number}.${number}` } = {},
): Promise<MediaServer> {
  const host = opts.host ?? '127.0.0.1';
  const routes = new Map<string, RouteHandler>();
  const requests: RecordedRequest[] = [];
  // Cancels pending throttle timers when the server closes.
  const closing = new AbortController();
  let closed: Promise<void> | undefined;

  /** Each request's record, for the file sender to mark complete. */
  const recordOf = new WeakMap<IncomingMessage, RecordedRequest>();
  const server = createServer((req, res) => {
    const path = req.url ?? '/';
    const record: RecordedRequest = {
      method: req.method ?? 'GET',
      path,
      headers: req.headers,
      at: Date.now(),
      completed: false,
    };
    requests.push(record);
    recordOf.set(req, record);
    const handler = routes.get(pathOnly(path));
    if (!handler) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    Promise.resolve()
      .then(() => handler(req, res))
      .catch(() => {
        // A client that went away, or the server closing; a handler bug shows up as a 500.
        if (!res.headersSent) res.writeHead(500).end();
        else res.destroy();
      });
  });
  server.listen(0, host);
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const hostPort = `${host}:${port}`;

  const sendFile = async (req: IncomingMessage, res: ServerResponse, filePath: string, o: ServeFileOptions) => {
    const size = (await stat(filePath)).size;
    const headers: Record<string, string | number> = { 'content-type': o.contentType };
    let status = o.status ?? 200;
    let start = 0;
    let end = size - 1;
    const plain = o.status === undefined && !o.unknownLength;
    if (plain) {
      headers['accept-ranges'] = 'bytes';
      const range = parseRange(req.headers.range, size);
      if (range === 'unsatisfiable') {
        res.writeHead(416, { 'content-range': `bytes */${size}` }).end();
        return;
      }
      if (range) {
        [start, end] = range;
        status = 206;
        headers['content-range'] = `bytes ${start}-${end}/${size}`;
      }
    }
    if (!o.unknownLength) headers['content-length'] = end - start + 1;
    res.writeHead(status, headers);
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    const progress = { allWritten: false };
    // 'finish': the last byte went to the socket, and the client had not hung up before that.
    res.once('finish', () => {
      const record = recordOf.get(req);
      if (record && progress.allWritten && start === 0 && end === size - 1) record.completed = true;
    });
    await sendBytes(res, filePath, start, end, o.throttleBytesPerSec, closing.signal, progress);
  };

  return {
    hostPort,
    requests,
    url: (path) => `http://${hostPort}${path}`,
    serveFile(urlPath, filePath, o) {
      routes.set(urlPath, (req, res) => sendFile(req, res, filePath, o));
    },
    redirect(urlPath, location, status = 302) {
      routes.set(urlPath, (_req, res) => {
        res.writeHead(status, { location }).end();
      });
    },
    route(urlPath, handler) {
      routes.set(urlPath, handler);
    },
    requestsFor: (path) => requests.filter((r) => pathOnly(r.path) === path),
    downloadsOf: (path) => requests.filter((r) => pathOnly(r.path) === path && r.completed).length,
    close() {
      if (!closed) {
        closing.abort();
        closed = once(server, 'close').then(() => undefined);
        server.close();
        server.closeAllConnections();
      }
      return closed;
    },
  };
}

function pathOnly(path: string): string {
  const q = path.indexOf('?');
  return q === -1 ? path : path.slice(0, q);
}

/** One `bytes=a-b`, `bytes=a-` or `bytes=-n` range; null when absent or multiple (whole file). */
function parseRange(header: string | undefined, size: number): [number, number] | 'unsatisfiable' | null {
  const m = header ? /^bytes=(\d*)-(\d*)$/.exec(header.trim()) : null;
  if (!m) return null;
  const [, first = '', last = ''] = m;
  if (first === '' && last === '') return null;
  let start: number;
  let end: number;
  if (first === '') {
    const suffix = Number(last);
    if (suffix === 0) return 'unsatisfiable';
    start = Math.max(0, size - suffix);
    end = size - 1;
  } else {
    start = Number(first);
    end = last === '' ? size - 1 : Math.min(Number(last), size - 1);
  }
  if (start >= size || start > end) return 'unsatisfiable';
  return [start, end];
}

/**
 * Waits for 'drain' or 'close', removing both listeners after (events.once would leave one behind
 * per wait). A response already destroyed will emit neither again: waiting would hang the sender
 * and leave its file for the garbage collector to close.
 */
export function drainedOrClosed(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    if (res.destroyed) return resolve();
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/** Writes bytes start..end (inclusive) of a file, honouring backpressure and the throttle; says when all were written. */
async function sendBytes(
  res: ServerResponse,
  filePath: string,
  start: number,
  end: number,
  bytesPerSec: number | undefined,
  signal: AbortSignal,
  progress: { allWritten: boolean },
): Promise<void> {
  const chunkSize = bytesPerSec ? Math.max(1, Math.floor((bytesPerSec * THROTTLE_TICK_MS) / 1000)) : CHUNK_BYTES;
  const file = await open(filePath);
  try {
    let pos = start;
    while (pos <= end) {
      if (res.destroyed || signal.aborted) return;
      const n = Math.min(chunkSize, end - pos + 1);
      const { buffer, bytesRead } = await file.read(Buffer.alloc(n), 0, n, pos);
      if (bytesRead === 0) break;
      pos += bytesRead;
      if (!res.write(buffer.subarray(0, bytesRead))) await drainedOrClosed(res);
      if (bytesPerSec && pos <= end) await sleep((bytesRead / bytesPerSec) * 1000, undefined, { signal });
    }
    if (res.destroyed) return;
    progress.allWritten = pos > end;
    res.end();
  } finally {
    await file.close();
  }
}

/** An HLS media playlist of a whole recording (VOD, ended): `lines` are its segments' tags and URLs. */
export function hlsPlaylist(lines: string[]): string {
  return [
    '#EXTM3U',
    '#EXT-X-VERSION:3',
    '#EXT-X-TARGETDURATION:2',
    '#EXT-X-MEDIA-SEQUENCE:0',
    ...lines,
    '#EXT-X-ENDLIST',
    '',
  ].join('\n');
}
