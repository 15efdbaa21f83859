import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/errors.js';

describe('ServiceError', () => {
  it('carries kind, code and a client-safe message', () => {
    const err = new ServiceError('not_found', 'job_not_found', 'No job with that id.');
    expect(err.kind).toBe('not_found');
    expect(err.code).toBe('job_not_found');
    expect(err.message).toBe('No job with that id.');
  });
});
