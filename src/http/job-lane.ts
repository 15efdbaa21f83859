import type { IncomingMessage, ServerResponse } from 'node:http';
import { ServiceError } from '../errors.js';
import type { Logger } from '../logger.js';
import { nodeRequestKey, type KeyChecker } from './api-key.js';
import { ROUTE_TEMPLATE_HEADER } from './middleware/request-context.js';
import { keyIdentity, type RateLimiter } from './middleware/rate-limit.js';
import { requestFacts } from './request-envelope.js';
import { JOB_ROUTE } from './route-template.js';
import type { JobRecord } from './schemas.js';

/**
 * getJob answered straight from node's HTTP server, before the Hono app, as the fallback's signed
 * lane answers signed URLs (src/delivery/signed-lane.ts). Clients poll a job until it ends, so
 * this is the API's most frequent request, and a tenth of its CPU through the app went to Hono and
 * @hono/node-server (Request, Response and Headers objects, the middleware chain).
 *
 * It takes only `GET /jobs/<id>` with no query, an id of letters, digits and dashes, and a valid
 * API key; it counts the request against the key's rate limit as the app's middleware does and
 * reads and renders the record with the app's own function. Anything else (no key or a wrong one,
 * a refused rate limit, no such job, a failure before the head is written) goes on to the app,
 * which answers with its usual checks and problem documents: the app then counts the request
 * against the rate limit only if the lane did not (RequestFacts.rateCounted). It runs inside the
 * request envelope (request id, access log, metrics) and names its route and job there
 * (test/e2e/job-lane.test.ts compares both ways).
 */
export type JobLane = (req: IncomingMessage, res: ServerResponse, otherwise: () => void) => void;

export interface JobLaneDeps {
  checkKey: KeyChecker;
  rateLimiter?: RateLimiter;
  /** The app's getJob reader: throws not_found for no such job. */
  readJob: (id: string) => Promise<JobRecord>;
  /** For the lane's own failures; each request's line is the envelope's. */
  log: Logger;
}

const JOB_PATH = /^\/jobs\/([A-Za-z0-9-]{1,64})$/;

export function createJobLane(deps: JobLaneDeps): JobLane {
  // A record shared by the polls of one second (createJobRenderer: frozen) is serialized once.
  const bodies = new WeakMap<JobRecord, string>();
  async function answer(req: IncomingMessage, res: ServerResponse, id: string, otherwise: () => void): Promise<void> {
    let record: JobRecord;
    try {
      record = await deps.readJob(id);
    } catch (err) {
      if (!(err instanceof ServiceError)) deps.log.warn({ err }, 'the job lane could not read a job: the app answers');
      return otherwise();
    }
    let body = bodies.get(record);
    if (body === undefined) {
      body = JSON.stringify(record);
      if (Object.isFrozen(record)) bodies.set(record, body);
    }
    const facts = requestFacts(req)!;
    facts.route = JOB_ROUTE;
    facts.jobId = record.job_id;
    res.writeHead(200, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      [ROUTE_TEMPLATE_HEADER]: JOB_ROUTE,
    });
    res.end(body);
  }

  return (req, res, otherwise) => {
    if (req.method !== 'GET') return otherwise();
    const match = JOB_PATH.exec(req.url ?? '');
    const facts = requestFacts(req);
    if (!match || !facts) return otherwise();
    const key = nodeRequestKey(req);
    if (key === undefined || !deps.checkKey(key)) return otherwise();
    if (deps.rateLimiter) {
      // Refused: the app asks the limiter again and answers 429 (or serves it, if a token came back since).
      if (!deps.rateLimiter.take(keyIdentity(key)).allowed) return otherwise();
      facts.rateCounted = true;
    }
    answer(req, res, match[1]!, otherwise).catch((err: unknown) => {
      deps.log.error({ err }, 'job lane failed');
      res.destroy();
    });
  };
}
