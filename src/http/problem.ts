import { databaseOutage } from '../db/outage.js';
import type { Context, Env } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { apiErrorStatus, type ApiErrorCode } from '../api-errors.js';
import { ServiceError, type FieldError } from '../errors.js';
import { responseOf, type Answer } from './answer.js';

/**
 * RFC 9457 problem documents. Every error the service answers is made by `problemDocument`, so
 * clients meet one shape: type, title, status, detail, code (stable, machine-readable, from the
 * closed list of src/api-errors.ts, which also fixes the status), request_id, and for validation
 * errors a list of field errors.
 */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

const TITLE_BY_STATUS: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
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
  code: ApiErrorCode;
  request_id?: string;
  errors?: FieldError[];
  [extra: string]: unknown;
}

/** The problem document for `code`, its status the code's own. */
export function problemDocument(
  code: ApiErrorCode,
  detail: string,
  extra: { requestId?: string; fieldErrors?: FieldError[]; fields?: Record<string, unknown> } = {},
): ProblemDocument {
  const status = apiErrorStatus(code);
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

/**
 * The problem document of a refusal that is answered inside another answer (a batch's item, a
 * collection's item): a queue_full or confinement_unavailable one says when to try again in
 * `retry_after`, as Retry-After would.
 */
export function refusalProblem(refusal: {
  code: ApiErrorCode;
  message: string;
  extra: { fieldErrors?: FieldError[]; fields?: Record<string, unknown>; retryAfterSeconds?: number };
}): ProblemDocument {
  const retryAfter = refusal.extra.retryAfterSeconds;
  const fields = { ...refusal.extra.fields, ...(retryAfter !== undefined ? { retry_after: retryAfter } : {}) };
  return problemDocument(refusal.code, refusal.message, { fieldErrors: refusal.extra.fieldErrors, fields });
}

interface ProblemExtra {
  requestId?: string;
  fieldErrors?: FieldError[];
  fields?: Record<string, unknown>;
  headers?: Record<string, string>;
}

/** A problem document as an operation's answer (src/http/operation.ts). */
export function problemAnswer(code: ApiErrorCode, detail: string, extra: ProblemExtra = {}): Answer {
  return {
    status: apiErrorStatus(code),
    headers: { 'content-type': PROBLEM_CONTENT_TYPE, ...extra.headers },
    body: JSON.stringify(problemDocument(code, detail, extra)),
  };
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

/** The answer for a ServiceError, wherever it was thrown. */
export function serviceErrorAnswer(err: ServiceError, requestId?: string): Answer {
  const headers: Record<string, string> = {};
  if (err.extra.retryAfterSeconds !== undefined) headers['retry-after'] = String(err.extra.retryAfterSeconds);
  if (err.kind === 'unauthorized') headers['www-authenticate'] = 'Bearer';
  return problemAnswer(err.code, err.message, {
    requestId,
    fieldErrors: err.extra.fieldErrors,
    fields: err.extra.fields,
    headers,
  });
}

/**
 * The code of an HTTPException Hono throws, by its status: zod-openapi's media-type gate answers
 * 415, Hono's validators 400 for a body they cannot parse (the service's bodies are JSON). Any
 * other is answered as an unexpected error (logged, 500 internal_error).
 */
const CODE_BY_HTTP_STATUS: Partial<Record<number, ApiErrorCode>> = {
  400: 'invalid_json',
  401: 'unauthorized',
  413: 'body_too_large',
  415: 'unsupported_media_type',
};

export interface ErrorLogger {
  error(obj: object, msg: string): void;
}

/**
 * Hono's onError, in three tiers: our ServiceError (mapped by its code), Hono's HTTPException
 * (the code of its status), anything else (logged with its stack, answered as a bare 500).
 */
export function createErrorHandler<E extends Env>(getLogger: (c: Context<E>) => ErrorLogger) {
  return (err: Error, c: Context<E>): Response => {
    const requestId = (c.get('facts' as never) as { id: string } | undefined)?.id;
    const code = err instanceof HTTPException ? CODE_BY_HTTP_STATUS[err.status] : undefined;
    if (code !== undefined) {
      return responseOf(
        problemAnswer(code, err.message || TITLE_BY_STATUS[apiErrorStatus(code)] || 'Error', { requestId }),
      );
    }
    return responseOf(errorAnswer(err, requestId, getLogger(c)));
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
  return problemAnswer('internal_error', 'The server failed to handle this request.', { requestId });
}
