/**
 * The body limit node's server applies to `Expect: 100-continue` (src/http/server.ts) is the one
 * the path's operation sets (src/http/node-router.ts maxBodyBytesByPath), so the two are written
 * once: a batch takes 256 KiB, every other path 8 KiB.
 */
import { describe, expect, it } from 'vitest';
import { maxBodyBytesByPath } from '../../src/http/node-router.js';
import { DEFAULT_MAX_BODY_BYTES, type OperationBinding } from '../../src/http/operation.js';
import { jobOperations } from '../../src/http/routes/jobs.js';
import { sourceOperations } from '../../src/http/routes/sources.js';

// The operations are only inspected, never answered: their dependencies go unused.
const unused = {} as never;
const served = [
  ...sourceOperations({ admission: unused, submit: unused, submitBatch: unused, render: unused, renderView: unused }),
  ...jobOperations({
    admission: unused,
    read: unused,
    cancel: unused,
    render: unused,
    items: unused,
    renderView: unused,
  }),
];

describe('the body limit by path', () => {
  const limitOf = maxBodyBytesByPath(served);

  it("is the operation's own: 256 KiB for a batch, 8 KiB for a single submission", () => {
    expect(limitOf('/sources/batch')).toBe(256 * 1024);
    expect(limitOf('/sources')).toBe(8 * 1024);
  });

  it('is the default for an operation without one, and for a path no operation has', () => {
    expect(limitOf('/jobs/some-id/cancel')).toBe(DEFAULT_MAX_BODY_BYTES);
    expect(limitOf('/nowhere')).toBe(DEFAULT_MAX_BODY_BYTES);
  });

  it('matches a path with parameters the way the router does', () => {
    const answer = () => Promise.reject(new Error('not answered'));
    const limits = maxBodyBytesByPath([
      { method: 'POST', path: '/things/:id', operation: { route: '/things/{id}', maxBodyBytes: 3, answer } },
    ] satisfies OperationBinding[]);
    expect(limits('/things/a')).toBe(3);
    expect(limits('/things/a/b')).toBe(DEFAULT_MAX_BODY_BYTES);
  });
});
