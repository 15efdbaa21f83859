import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../logger.js';

/**
 * What every request gets, whichever dispatcher answers it (node's router or the Hono app): a
 * request id, one access-log line and the request metrics. Done once, on node's own request and
 * response, so that no Hono middleware sets headers after `next()` (which makes @hono/node-server
 * build a Headers object for the answer).
 *
 * - The request id is the client's X-Request-Id when well-formed, else a new one; it goes out on
 *   the answer (set on the response before anyone writes its head, so error answers carry it too).
 * - The log line and the metrics come when the answer has ended (or the client went away): its
 *   latency is the whole answer's, body included, as nginx's request_time. An answer whose head
 *   was never sent is logged as 499, nginx's "client closed the request".
 * - Whoever answers names the route template (never the concrete path, which may carry a
 *   signature) and the job it addressed; unnamed, the route is 'unmatched'.
 */
export interface RequestFacts {
  readonly id: string;
  /** The route template that answered, in OpenAPI form ('/jobs/{id}'). */
  route: string;
  /** The job the request created or addressed. */
  jobId?: string;
  /** A submission's outcome, for its access line: the job's status, whether born done, whether with a callback. */
  submitted?: { status: string; bornDone: boolean; callback: boolean };
  /** A logger that stamps the request id on every line (made on first use). */
  readonly log: Logger;
}

export const UNMATCHED_ROUTE = 'unmatched';
// What nginx passes on too (nginx/templates/default.conf.template).
const WELL_FORMED_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The client's X-Request-Id when it is well-formed, else a new one. */
export function acceptedRequestId(offered: string | undefined): string {
  return offered && WELL_FORMED_ID.test(offered) ? offered : randomUUID();
}

/** nginx's status for a request whose client closed the connection before the answer. */
const CLIENT_CLOSED = 499;

export type RequestEnvelope = (req: IncomingMessage, res: ServerResponse, answer: () => void) => void;

export interface RequestEnvelopeOptions {
  log: Logger;
  observeRequest: (method: string, route: string, status: number, seconds: number) => void;
}

const factsByRequest = new WeakMap<IncomingMessage, RequestFacts>();

/** The facts of a request the envelope has taken in; undefined for one it has not (a unit test's app.request). */
export function requestFacts(req: IncomingMessage | undefined): RequestFacts | undefined {
  return req && factsByRequest.get(req);
}

export function createRequestEnvelope(options: RequestEnvelopeOptions): RequestEnvelope {
  // The access line's fields are the envelope's own, none of them secret: it skips the logger's
  // redaction, which was a third of the line's cost (every request writes one).
  const accessLog = options.log.child({}, { redact: [] });
  return (req, res, answer) => {
    const started = performance.now();
    const offered = req.headers['x-request-id'];
    const id = acceptedRequestId(Array.isArray(offered) ? offered.join(', ') : offered);
    const facts = newRequestFacts(id, options.log);
    factsByRequest.set(req, facts);
    res.setHeader('X-Request-Id', id);
    res.once('close', () => {
      const status = res.headersSent ? res.statusCode : CLIENT_CLOSED;
      const seconds = (performance.now() - started) / 1000;
      accessLog.info(
        {
          request_id: id,
          method: req.method,
          route: facts.route,
          status,
          latency_ms: Math.round(seconds * 10000) / 10,
          ...(facts.jobId ? { job_id: facts.jobId } : {}),
          ...(facts.submitted
            ? {
                job_status: facts.submitted.status,
                born_done: facts.submitted.bornDone,
                callback: facts.submitted.callback,
              }
            : {}),
        },
        'request',
      );
      options.observeRequest(req.method ?? 'GET', facts.route, status, seconds);
    });
    answer();
  };
}

/** Facts for a request id; the child logger is made only if something logs for the request. */
export function newRequestFacts(id: string, log: Logger): RequestFacts {
  let child: Logger | undefined;
  return {
    id,
    route: UNMATCHED_ROUTE,
    get log() {
      return (child ??= log.child({ request_id: id }));
    },
  };
}
