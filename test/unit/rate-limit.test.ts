import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import type { AppEnv } from '../../src/http/env.js';
import { createTokenBucketLimiter, keyIdentity, rateLimit } from '../../src/http/middleware/rate-limit.js';
import { createErrorHandler } from '../../src/http/problem.js';

/** The per-key token bucket, with an injected clock. */
function clock(start = 1_000_000) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe('token bucket limiter', () => {
  it('allows a burst, then refuses with the seconds until the next token', () => {
    const c = clock();
    const limiter = createTokenBucketLimiter({ perMinute: 60, burst: 3, now: c.now });
    expect([1, 2, 3].map(() => limiter.take('k').allowed)).toEqual([true, true, true]);
    const refused = limiter.take('k');
    expect(refused).toMatchObject({ allowed: false, retryAfterSeconds: 1 });
    c.advance(999);
    expect(limiter.take('k').allowed).toBe(false);
    c.advance(1);
    expect(limiter.take('k').allowed).toBe(true);
    expect(limiter.take('k').allowed).toBe(false);
  });

  it('refills at the configured rate and never above the burst', () => {
    const c = clock();
    const limiter = createTokenBucketLimiter({ perMinute: 6, burst: 2, now: c.now });
    limiter.take('k');
    limiter.take('k');
    const refused = limiter.take('k');
    expect(refused.allowed).toBe(false);
    expect(refused.retryAfterSeconds).toBe(10); // 6 a minute: one token every 10 s
    c.advance(60 * 60_000); // an hour idle refills to the burst, not to 360
    expect([1, 2, 3].map(() => limiter.take('k').allowed)).toEqual([true, true, false]);
  });

  it('sustains exactly the rate over time', () => {
    const c = clock();
    const limiter = createTokenBucketLimiter({ perMinute: 600, burst: 10, now: c.now });
    let allowed = 0;
    for (let i = 0; i < 60_000; i += 10) {
      c.advance(10); // 100 requests a second for a minute
      if (limiter.take('k').allowed) allowed++;
    }
    // 600 refilled in the minute plus the initial burst of 10.
    expect(allowed).toBeGreaterThanOrEqual(600);
    expect(allowed).toBeLessThanOrEqual(611);
  });

  it('keeps one bucket per identity', () => {
    const c = clock();
    const limiter = createTokenBucketLimiter({ perMinute: 60, burst: 1, now: c.now });
    expect(limiter.take('a').allowed).toBe(true);
    expect(limiter.take('a').allowed).toBe(false);
    expect(limiter.take('b').allowed).toBe(true);
  });

  it('gives no tokens when the clock steps back', () => {
    const c = clock();
    const limiter = createTokenBucketLimiter({ perMinute: 60, burst: 1, now: c.now });
    limiter.take('k');
    c.advance(-30_000);
    expect(limiter.take('k').allowed).toBe(false);
  });

  it('bounds the number of buckets, dropping idle (full) ones before busy ones', () => {
    const c = clock();
    const limiter = createTokenBucketLimiter({ perMinute: 60, burst: 2, now: c.now, maxIdentities: 3 });
    limiter.take('busy');
    limiter.take('busy'); // empty
    limiter.take('idle-a');
    limiter.take('idle-b');
    c.advance(1000); // idle-a and idle-b are full again; busy has 1
    limiter.take('new'); // at the bound: the full buckets go, busy stays
    limiter.take('busy'); // 1 → 0 (a fresh bucket would have had 2)
    expect(limiter.take('busy').allowed).toBe(false);
  });

  it('rejects a non-positive rate', () => {
    expect(() => createTokenBucketLimiter({ perMinute: 0, now: Date.now })).toThrow();
  });
});

describe('keyIdentity', () => {
  it('is a digest: stable, distinct per key, and does not contain the key', () => {
    const key = 'sk_live_0123456789abcdef';
    expect(keyIdentity(key)).toBe(keyIdentity(key));
    expect(keyIdentity(key)).not.toBe(keyIdentity(`${key}x`));
    expect(keyIdentity(key)).not.toContain(key);
    expect(keyIdentity(key)).not.toContain('0123456789');
  });
});

describe('rateLimit middleware', () => {
  function app(burst: number, c = clock()) {
    const limiter = createTokenBucketLimiter({ perMinute: 60, burst, now: c.now });
    const seen: string[] = [];
    const hono = new Hono<AppEnv>();
    hono.onError(createErrorHandler(() => ({ error: () => {} })));
    hono.use(
      '*',
      rateLimit({
        limiter: {
          take: (id) => {
            seen.push(id);
            return limiter.take(id);
          },
        },
        identify: (ctx) => (ctx.req.path === '/healthz' ? undefined : (ctx.req.header('x-api-key') ?? undefined)),
      }),
    );
    hono.get('*', (ctx) => ctx.text('ok'));
    return { hono, seen, clock: c };
  }

  it('answers 429 problem+json rate_limited with Retry-After once the bucket is empty', async () => {
    const { hono } = app(2);
    const get = () => hono.request('/jobs/x', { headers: { 'x-api-key': 'a' } });
    expect((await get()).status).toBe(200);
    expect((await get()).status).toBe(200);
    const res = await get();
    expect(res.status).toBe(429);
    expect(res.headers.get('content-type')).toBe('application/problem+json');
    expect(res.headers.get('retry-after')).toBe('1');
    const body = (await res.json()) as { code: string; status: number };
    expect(body).toMatchObject({ code: 'rate_limited', status: 429 });
    // Another key has its own bucket.
    expect((await hono.request('/jobs/x', { headers: { 'x-api-key': 'b' } })).status).toBe(200);
  });

  it('does not count requests it cannot identify, such as the health check', async () => {
    const { hono, seen } = app(1);
    for (let i = 0; i < 5; i++) expect((await hono.request('/healthz', { headers: { 'x-api-key': 'a' } })).status).toBe(200);
    expect(seen).toEqual([]);
    expect((await hono.request('/jobs/x', { headers: { 'x-api-key': 'a' } })).status).toBe(200);
  });

});
