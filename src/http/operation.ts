import type { ErrorLogger } from './problem.js';
import { errorAnswer } from './problem.js';
import type { Answer } from './answer.js';
import type { RequestFacts } from './request-envelope.js';
import { honoPath } from './route-template.js';

/**
 * The API's operations, each written once as a function from a request to an answer: its key
 * check and rate limit (./key-admission.ts), its body limit and validation (./json-request-body.ts),
 * its handler and its problem documents. Two dispatchers hand requests to the same operations:
 * node's server directly (./node-router.ts), for the requests the API answers most, and the Hono
 * app (./hono-operation.ts), for everything node's router passes on (a request under shutdown, an
 * `Expect: 100-continue`, unit tests' app.request). Neither adds a rule of its own.
 */
export interface ApiRequest {
  /** GET, HEAD, POST...; HEAD runs the GET route's operation, which must not send a body for it. */
  readonly method: string;
  /** The route's path parameters, percent-decoded. */
  readonly params: Readonly<Record<string, string>>;
  /** A request header by its lowercase name; repeated ones joined with ', ' (as fetch's Headers joins them). */
  header(name: string): string | undefined;
  /** A query parameter's first value, decoded. */
  query(name: string): string | undefined;
  /** The body as UTF-8 text; rejects with 413 body_too_large once it passes maxBytes. */
  text(maxBytes: number): Promise<string>;
  /** Request id, logger, and the route and job of its access-log line. */
  readonly facts: RequestFacts;
}

export interface Operation {
  /** The route template in OpenAPI form ('/jobs/{id}'), for logs and metrics. */
  readonly route: string;
  /** The largest request body it takes; absent: DEFAULT_MAX_BODY_BYTES. */
  readonly maxBodyBytes?: number;
  answer(request: ApiRequest): Promise<Answer>;
}

/** The largest body of a request to an operation that sets no limit of its own, or to no operation. */
export const DEFAULT_MAX_BODY_BYTES = 8 * 1024;

/** An operation bound to its method and Hono path pattern ('/jobs/:id'). */
export interface OperationBinding {
  method: 'GET' | 'POST';
  path: string;
  operation: Operation;
}

/** What an operation's contract (its createRoute in openapi.json) says of where it is answered. */
export interface OperationContract {
  method: 'get' | 'post';
  /** The OpenAPI template ('/jobs/{id}'). */
  path: string;
}

/**
 * `operation` bound where its contract says: the method and path are written once, in the
 * contract, and the route template of logs and metrics is the contract's path.
 */
export function bindOperation(contract: OperationContract, operation: Omit<Operation, 'route'>): OperationBinding {
  return {
    method: contract.method === 'get' ? 'GET' : 'POST',
    path: honoPath(contract.path),
    operation: { ...operation, route: contract.path },
  };
}

/** The operation's answer; whatever it throws becomes its problem document (errorAnswer). */
export async function answerOf(operation: Operation, request: ApiRequest, log: ErrorLogger): Promise<Answer> {
  try {
    return await operation.answer(request);
  } catch (err) {
    return errorAnswer(err, request.facts.id, log);
  }
}

export function jsonAnswer(status: number, body: string, headers: Record<string, string> = {}): Answer {
  return { status, headers: { 'content-type': 'application/json', ...headers }, body };
}
