import { databaseOutage } from '../db/outage.js';
import type { Context, Env } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { ServiceError, type ErrorKind, type FieldError } from '../errors.js';
import type { Answer } from './operation.js';

/**
 * RFC 9457 problem documents. Every error the service answers goes through `problemResponse`,
 * so clients meet one shape: type, title, status, detail, code (stable, machine-readable),
 * request_id, and for validation errors a list of field errors.
 */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

const STATUS_BY_KIND: Record<ErrorKind, ContentfulStatusCode> = {
  invalid_input: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  refused: 422,
  rate_limited: 429,
  unavailable: 503,
  internal: 500,
};

const TITLE_BY_STATUS: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  413: 'Content Too Large',
  415: 'Unsupported Media Type',
  416: 'Range Not Satisfiable',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

export interface ProblemDocument {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  request_id?: string;
  errors?: FieldError[];
  [extra: string]: unknown;
}

export function statusOf(err: ServiceError): ContentfulStatusCode {
  return STATUS_BY_KIND[err.kind];
}

export function problemDocument(
  status: number,
  code: string,
  detail: string,
  extra: { requestId?: string; fieldErrors?: FieldError[]; fields?: Record<string, unknown> } = {},
): ProblemDocument {
  return {
    ...extra.fields,
    type: `urn:source-fetch:problem:${code}`,
    title: TITLE_BY_STATUS[status] ?? 'Error',
    status,
    detail,
    code,
    ...(extra.requestId ? { request_id: extra.requestId } : {}),
    ...(extra.fieldErrors?.length ? { errors: extra.fieldErrors } : {}),
  };
}

interface ProblemExtra {
  requestId?: string;
  fieldErrors?: FieldError[];
  fields?: Record<string, unknown>;
  headers?: Record<string, string>;
}

/** A problem document as an operation's answer (src/http/operation.ts). */
export function problemAnswer(status: number, code: string, detail: string, extra: ProblemExtra = {}): Answer {
  return {
    status,
    headers: { 'content-type': PROBLEM_CONTENT_TYPE, ...extra.headers },
    body: JSON.stringify(problemDocument(status, code, detail, extra)),
  };
}

export function problemResponse(status: number, code: string, detail: string, extra: ProblemExtra = {}): Response {
  const answer = problemAnswer(status, code, detail, extra);
  return new Response(answer.body, { status, headers: answer.headers });
}

type SchemaIssues = { issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }> };

/** A request that does not match its schema: 400 `validation_failed`, one field error per issue. */
export function validationError(error: SchemaIssues): ServiceError {
  const fieldErrors = error.issues.map((issue) => ({
    path: issue.path.map(String).join('.') || '(body)',
    message: issue.message,
  }));
  return new ServiceError('invalid_input', 'validation_failed', 'The request is not valid.', { fieldErrors });
}

export function validationProblem(error: SchemaIssues, requestId: string | undefined): Response {
  return serviceErrorResponse(validationError(error), requestId);
}

/** The answer for a ServiceError, wherever it was thrown. */
export function serviceErrorAnswer(err: ServiceError, requestId?: string): Answer {
  const headers: Record<string, string> = {};
  if (err.extra.retryAfterSeconds !== undefined) headers['retry-after'] = String(err.extra.retryAfterSeconds);
  if (err.kind === 'unauthorized') headers['www-authenticate'] = 'Bearer';
  return problemAnswer(statusOf(err), err.code, err.message, {
    requestId,
    fieldErrors: err.extra.fieldErrors,
    fields: err.extra.fields,
    headers,
  });
}

export function serviceErrorResponse(err: ServiceError, requestId?: string): Response {
  return responseOf(serviceErrorAnswer(err, requestId));
}

/** An HTTPException's code where the service documents one for its status. */
const CODE_BY_HTTP_STATUS: Record<number, string> = { 401: 'unauthorized', 415: 'unsupported_media_type' };

export interface ErrorLogger {
  error(obj: object, msg: string): void;
}

/**
 * Hono's onError, in three tiers: our ServiceError (mapped by kind), Hono's HTTPException
 * (its status, a generic code), anything else (logged with its stack, answered as a bare 500).
 */
export function createErrorHandler<E extends Env>(getLogger: (c: Context<E>) => ErrorLogger) {
  return (err: Error, c: Context<E>): Response => {
    const requestId = (c.get('facts' as never) as { id: string } | undefined)?.id;
    if (err instanceof HTTPException) {
      const status = err.status;
      return problemResponse(
        status,
        CODE_BY_HTTP_STATUS[status] ?? `http_${status}`,
        err.message || TITLE_BY_STATUS[status] || 'Error',
        { requestId },
      );
    }
    return errorResponse(err, requestId, getLogger(c));
  };
}

/** Seconds a client is told to wait when the database is out of reach or out of space. */
const OUTAGE_RETRY_AFTER_S = 5;

/**
 * A ServiceError's answer; a database that cannot serve the request now, 503 with Retry-After
 * (database_unavailable, or storage_full where a write was refused for want of space); anything
 * else logged with its stack and answered as a bare 500.
 */
export function errorAnswer(err: unknown, requestId: string | undefined, log: ErrorLogger): Answer {
  if (err instanceof ServiceError) return serviceErrorAnswer(err, requestId);
  const outage = databaseOutage(err);
  if (outage !== null) {
    log.error({ err }, outage === 'full' ? 'the database refused a write: no space' : 'the database cannot be reached');
    return serviceErrorAnswer(
      outage === 'full'
        ? new ServiceError(
            'unavailable',
            'storage_full',
            'The service has no storage space left for this request; try again later.',
            { retryAfterSeconds: OUTAGE_RETRY_AFTER_S },
          )
        : new ServiceError(
            'unavailable',
            'database_unavailable',
            'The database cannot be reached right now; try again shortly.',
            { retryAfterSeconds: OUTAGE_RETRY_AFTER_S },
          ),
      requestId,
    );
  }
  log.error({ err }, 'unhandled error');
  return problemAnswer(500, 'internal_error', 'The server failed to handle this request.', { requestId });
}

export function errorResponse(err: unknown, requestId: string | undefined, log: ErrorLogger): Response {
  return responseOf(errorAnswer(err, requestId, log));
}

/** A bodied answer as a web Response (problem documents and JSON: never a file). */
function responseOf(answer: Answer): Response {
  return new Response(answer.body ?? null, { status: answer.status, headers: answer.headers });
}
