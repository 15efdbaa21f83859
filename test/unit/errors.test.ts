import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { describe, expect, it } from 'vitest';
import {
  API_ERROR_CODES,
  API_ERRORS,
  ApiErrorCodeSchema,
  apiErrorStatus,
  ERROR_KIND_STATUS,
  REFUSED_ADDRESS_RANGES,
} from '../../src/api-errors.js';
import { ServiceError } from '../../src/errors.js';
import { createErrorHandler, problemDocument, serviceErrorAnswer } from '../../src/http/problem.js';

describe('ServiceError', () => {
  it('carries kind, code and a client-safe message', () => {
    const err = new ServiceError('not_found', 'job_not_found', 'No job with that id.');
    expect(err.kind).toBe('not_found');
    expect(err.code).toBe('job_not_found');
    expect(err.message).toBe('No job with that id.');
  });

  it('takes only a listed code, with its own kind (checked by tsc: the lines below must not compile)', () => {
    // @ts-expect-error: a code outside src/api-errors.ts
    const unknown = new ServiceError('not_found', 'no_such_code', 'x');
    // @ts-expect-error: a listed code with another kind than its own
    const wrongKind = new ServiceError('refused', 'job_not_found', 'x');
    expect([unknown.code, wrongKind.kind]).toEqual(['no_such_code', 'refused']);
  });

  it("is answered with its code's status (control: a 422 and a 429 apart)", () => {
    const refused = serviceErrorAnswer(new ServiceError('refused', 'address_private', 'x'));
    const limited = serviceErrorAnswer(new ServiceError('rate_limited', 'queue_full', 'x', { retryAfterSeconds: 3 }));
    expect([refused.status, limited.status, limited.headers['retry-after']]).toEqual([422, 429, '3']);
  });
});

describe("the API's error codes", () => {
  it('are one enum of every listed code, address_<range> for each refused range among them', () => {
    expect(ApiErrorCodeSchema.options).toEqual(Object.keys(API_ERRORS));
    expect(new Set(API_ERROR_CODES).size).toBe(API_ERROR_CODES.length);
    for (const range of Object.keys(REFUSED_ADDRESS_RANGES)) {
      expect(API_ERRORS[`address_${range}` as keyof typeof API_ERRORS]?.kind, range).toBe('refused');
    }
  });

  it('each have a status with a title, snake_case, and a one-line meaning', () => {
    for (const code of API_ERROR_CODES) {
      const doc = problemDocument(code, 'x');
      expect(doc.status, code).toBe(ERROR_KIND_STATUS[API_ERRORS[code].kind]);
      expect(doc.title, code).not.toBe('Error');
      expect(doc.type, code).toBe(`urn:source-fetch:problem:${code}`);
      expect(code, code).toMatch(/^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$/);
      expect(API_ERRORS[code].meaning, code).toMatch(/^[^\n|]+\.$/);
    }
  });

  it('keep the statuses clients know', () => {
    const known = {
      validation_failed: 400,
      unauthorized: 401,
      signature_expired: 403,
      route_not_found: 404,
      job_already_finished: 409,
      body_too_large: 413,
      unsupported_media_type: 415,
      range_not_satisfiable: 416,
      address_loopback: 422,
      too_many_event_streams: 429,
      internal_error: 500,
      shutting_down: 503,
    } as const;
    expect(
      Object.fromEntries(Object.keys(known).map((code) => [code, apiErrorStatus(code as keyof typeof known)])),
    ).toEqual(known);
  });
});

describe("the error handler's answer to Hono's HTTPException", () => {
  const answer = async (err: Error) => {
    const app = new Hono();
    app.onError(createErrorHandler(() => ({ error: () => undefined })));
    app.get('/', () => {
      throw err;
    });
    const res = await app.request('/');
    return [res.status, ((await res.json()) as { code: string }).code];
  };

  it("carries the listed code of its status (control: a status without one is an internal error's 500)", async () => {
    expect(await answer(new HTTPException(400, { message: 'Malformed JSON in request body' }))).toEqual([
      400,
      'invalid_json',
    ]);
    expect(await answer(new HTTPException(415, { message: 'Unsupported Media Type' }))).toEqual([
      415,
      'unsupported_media_type',
    ]);
    expect(await answer(new HTTPException(500, { message: 'Cannot clone request' }))).toEqual([500, 'internal_error']);
  });
});
