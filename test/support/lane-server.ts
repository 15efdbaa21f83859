import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { expect } from 'vitest';
import { createRequestEnvelope } from '../../src/http/request-envelope.js';
import { createLogger, type Logger } from '../../src/logger.js';
import { openRawConnection, type RawMessage } from './raw-http.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
type Lane = (req: IncomingMessage, res: ServerResponse, otherwise: () => void) => void;

/**
 * A lane in front of the app (src/http/job-lane.ts, src/http/submit-lane.ts) before a stand-in
 * app, in a real node HTTP server with the request envelope and a logger whose lines the test
 * reads.
 */
export interface LaneServer {
  /** Every line logged, parsed, in order. */
  logLines: Array<Record<string, unknown>>;
  /** One request with the header lines as written (repeats allowed) and a body; its answer and its access-log line. */
  send(method: string, target: string, headerLines: string[], body?: string): Promise<RawMessage & { text: string; line: Record<string, unknown> }>;
  close(): void;
}

export async function startLaneServer(createLane: (log: Logger) => Lane, app: Handler): Promise<LaneServer> {
  const logLines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) logLines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  const log = createLogger('info', sink);
  const envelope = createRequestEnvelope({ log, observeRequest: () => {} });
  const lane = createLane(log);
  const server = createServer((req, res) => envelope(req, res, () => lane(req, res, () => app(req, res))));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return {
    logLines,
    async send(method, target, headerLines, body = '') {
      const connection = await openRawConnection(port);
      const logged = logLines.length;
      connection.write(`${method} ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${headerLines.map((line) => `${line}\r\n`).join('')}\r\n${body}`);
      const message = await connection.readMessage();
      connection.close();
      await expect.poll(() => logLines.length).toBeGreaterThan(logged);
      return { ...message, text: message.body.toString('utf8'), line: logLines[logged]! };
    },
    close: () => void server.close(),
  };
}
