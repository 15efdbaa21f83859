import type { IncomingMessage, ServerResponse } from 'node:http';
import type { JobView, Submission } from '../jobs/job-service.js';
import { jobKeyIdentity } from '../jobs/key-identity.js';
import type { Logger } from '../logger.js';
import { nodeRequestKey, type KeyChecker } from './api-key.js';
import { isJsonMediaType } from './media-type.js';
import { handBodyToApp, readBodyText } from './middleware/json-body.js';
import { keyIdentity, type RateLimiter } from './middleware/rate-limit.js';
import { ROUTE_TEMPLATE_HEADER } from './middleware/request-context.js';
import { errorResponse } from './problem.js';
import { requestFacts, type RequestFacts } from './request-envelope.js';
import { SOURCES_ROUTE } from './route-template.js';
import { MAX_BODY_BYTES } from './routes/sources.js';
import { SubmitSourceBody, type JobRecord } from './schemas.js';

/**
 * submitSource answered straight from node's HTTP server, before the Hono app, as getJob is by the
 * job lane (./job-lane.ts): through the app, Hono and @hono/node-server (a Request, a Response,
 * the middleware chain, the validator) were about a sixth of a born-done submission's CPU.
 *
 * It takes only `POST /sources` with no query, a JSON Content-Type (isJsonMediaType, the app's own
 * rule) and a Content-Length within the app's limit, a valid API key, and a token of the key's
 * rate limit (counted as the app's middleware counts it); any other request goes on to the app
 * untouched. It then reads the body:
 * one that is not JSON, or not a valid submission, goes on to the app with the text read
 * (handBodyToApp), which answers its usual 400. From there on the lane answers everything itself,
 * with the app's functions: the submission (JobService.submit), its record, its access-line facts,
 * and its refusals and failures as the app's error handler answers them (errorResponse).
 * test/e2e/submit-lane.test.ts compares its answers and traces with the app's.
 */
export type SubmitLane = (req: IncomingMessage, res: ServerResponse, otherwise: () => void) => void;

export interface SubmitLaneDeps {
  checkKey: KeyChecker;
  rateLimiter?: RateLimiter;
  submit: (input: Submission, requestId: string) => Promise<JobView>;
  render: (view: JobView) => JobRecord;
  /** For failures the app's error handler would log. */
  log: Logger;
}

const tooLarge = () => new Error('over the limit');

export function createSubmitLane(deps: SubmitLaneDeps): SubmitLane {
  /** `apiKeyId`: the identity of the request's key (src/jobs/key-identity.ts), which its job records. */
  async function answer(req: IncomingMessage, res: ServerResponse, facts: RequestFacts, apiKeyId: string, otherwise: () => void): Promise<void> {
    const text = readBodyText(req, MAX_BODY_BYTES, tooLarge);
    let body: { url: string; callback_url?: string };
    try {
      const parsed = SubmitSourceBody.safeParse(JSON.parse(await text));
      if (!parsed.success) throw parsed.error;
      body = parsed.data;
    } catch {
      // Not JSON, not a submission, or the client went away: the app says which, as always.
      handBodyToApp(req, text);
      return otherwise();
    }
    facts.route = SOURCES_ROUTE;
    let status: number;
    let headers: Record<string, string | number>;
    let payload: string;
    try {
      const view = await deps.submit({ url: body.url, callbackUrl: body.callback_url, apiKeyId }, facts.id);
      const { job } = view;
      facts.jobId = job.id;
      facts.submitted = { status: job.status, bornDone: job.bornDone, callback: body.callback_url !== undefined };
      payload = JSON.stringify(deps.render(view));
      status = 202;
      headers = { 'content-type': 'application/json', location: `/jobs/${job.id}` };
    } catch (err) {
      const response = errorResponse(err, facts.id, facts.log);
      status = response.status;
      headers = Object.fromEntries(response.headers);
      payload = await response.text();
    }
    res.writeHead(status, { ...headers, 'content-length': Buffer.byteLength(payload), [ROUTE_TEMPLATE_HEADER]: SOURCES_ROUTE });
    res.end(payload);
  }

  return (req, res, otherwise) => {
    if (req.method !== 'POST' || req.url !== SOURCES_ROUTE) return otherwise();
    const facts = requestFacts(req);
    const length = Number(req.headers['content-length']);
    if (!facts || !(length > 0 && length <= MAX_BODY_BYTES) || req.headers['transfer-encoding'] !== undefined) return otherwise();
    if (!isJsonMediaType(req.headers['content-type'])) return otherwise();
    const key = nodeRequestKey(req);
    if (key === undefined || !deps.checkKey(key)) return otherwise();
    if (deps.rateLimiter) {
      // Refused: the app asks the limiter again and answers 429 (or serves it, if a token came back since).
      if (!deps.rateLimiter.take(keyIdentity(key)).allowed) return otherwise();
      facts.rateCounted = true;
    }
    answer(req, res, facts, jobKeyIdentity(key), otherwise).catch((err: unknown) => {
      deps.log.error({ err }, 'submit lane failed');
      res.destroy();
    });
  };
}
