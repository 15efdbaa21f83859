import { describe, expect, it } from 'vitest';
import { createKeyChecker } from '../../src/http/api-key.js';
import { createKeyAdmission } from '../../src/http/key-admission.js';
import { createTokenBucketLimiter, keyIdentity, waitForWorkToken } from '../../src/http/rate-limit.js';
import { jobKeyIdentity } from '../../src/jobs/key-identity.js';
import type { ServiceError } from '../../src/errors.js';

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

  it('takes work tokens from the same bucket, never its last tenth, and says how long until the next', () => {
    const c = clock();
    const limiter = createTokenBucketLimiter({ perMinute: 60, burst: 20, now: c.now });
    let work = 0;
    while (limiter.takeForWork('k').allowed) work++;
    expect(work).toBe(18);
    const refused = limiter.takeForWork('k');
    // One token a second; two are left and a third is needed above them.
    expect(refused).toMatchObject({ allowed: false, waitMs: 1000, retryAfterSeconds: 1 });
    // The reserve is the key's own requests'.
    expect([1, 2, 3].map(() => limiter.take('k').allowed)).toEqual([true, true, false]);
    expect(limiter.takeForWork('k').waitMs).toBe(3000);
    c.advance(3000);
    expect(limiter.takeForWork('k').allowed).toBe(true);
  });

  it('waits for a work token until its bound, then gives the refusal; an abort ends the wait', async () => {
    const c = clock();
    const limiter = createTokenBucketLimiter({ perMinute: 60, burst: 1, now: c.now });
    const slept: number[] = [];
    const sleep = (ms: number) => (slept.push(ms), c.advance(ms), Promise.resolve());
    const signal = new AbortController().signal;
    const wait = (until: number) => waitForWorkToken(limiter, 'k', { now: c.now, until, signal, sleep });
    expect((await wait(c.now())).allowed).toBe(true);
    // The next token is a second away: taken after waiting for it.
    expect((await wait(c.now() + 1000)).allowed).toBe(true);
    expect(slept).toEqual([1000]);
    // Past the bound: refused without waiting.
    expect(await wait(c.now() + 999)).toMatchObject({ allowed: false, retryAfterSeconds: 1 });
    expect(slept).toEqual([1000]);
    const aborted = new AbortController();
    aborted.abort('canceled');
    await expect(
      waitForWorkToken(limiter, 'k', { now: c.now, until: c.now() + 5000, signal: aborted.signal, sleep }),
    ).rejects.toBe('canceled');
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

describe('key admission', () => {
  const KEYS = ['key-a-0123456789abcdef', 'key-b-0123456789abcdef'];
  function admission(burst: number) {
    const c = clock();
    const limiter = createTokenBucketLimiter({ perMinute: 60, burst, now: c.now });
    const seen: string[] = [];
    const admit = createKeyAdmission({
      checkKey: createKeyChecker(KEYS),
      rateLimiter: {
        take: (id) => {
          seen.push(id);
          return limiter.take(id);
        },
        takeForWork: () => expect.unreachable(),
      },
    });
    return { admit, seen, clock: c };
  }
  const withKey = (key: string | undefined) => ({ header: (name: string) => (name === 'x-api-key' ? key : undefined) });
  const refusal = (run: () => unknown) => {
    try {
      run();
    } catch (err) {
      return err as ServiceError;
    }
    throw new Error('admitted');
  };

  it('refuses rate_limited with Retry-After once the bucket is empty, per key', () => {
    const { admit } = admission(2);
    expect(admit.admit(withKey(KEYS[0]))).toBe(KEYS[0]);
    expect(admit.admit(withKey(KEYS[0]))).toBe(KEYS[0]);
    const refused = refusal(() => admit.admit(withKey(KEYS[0])));
    expect(refused).toMatchObject({ kind: 'rate_limited', code: 'rate_limited', extra: { retryAfterSeconds: 1 } });
    // Another key has its own bucket.
    expect(admit.admit(withKey(KEYS[1]))).toBe(KEYS[1]);
  });

  it('refuses a missing or wrong key as unauthorized without counting it, where a valid key is counted', () => {
    const { admit, seen } = admission(1);
    for (const key of [undefined, '', 'not-a-configured-key-000'])
      expect(refusal(() => admit.admit(withKey(key)))).toMatchObject({ kind: 'unauthorized' });
    expect(seen).toEqual([]);
    admit.admit(withKey(KEYS[0]));
    expect(seen).toHaveLength(1);
    expect(seen[0]).not.toContain(KEYS[0]);
  });
});

describe('key checker', () => {
  const KEYS = ['key-a-0123456789abcdef', 'key-b-0123456789abcdef'];

  it('accepts the configured keys again and again, and never a near miss, before or after accepting them', () => {
    const check = createKeyChecker(KEYS);
    const nearMisses = [undefined, '', KEYS[0]!.slice(0, -1), `${KEYS[0]}x`, ` ${KEYS[0]}`, KEYS[0]!.toUpperCase()];
    for (const key of nearMisses) expect(check(key), String(key)).toBe(false);
    for (let round = 0; round < 3; round++) {
      for (const key of KEYS) expect(check(key)).toBe(true);
      for (const key of nearMisses) expect(check(key), String(key)).toBe(false);
    }
  });

  it('keeps each checker to its own keys', () => {
    const first = createKeyChecker([KEYS[0]!]);
    const second = createKeyChecker([KEYS[1]!]);
    expect(first(KEYS[0])).toBe(true);
    expect(second(KEYS[0])).toBe(false);
    expect(second(KEYS[1])).toBe(true);
    expect(first(KEYS[1])).toBe(false);
  });
});

describe('key admission identities', () => {
  it('counts a key under the same identity on every request, never the key itself', () => {
    const seen: string[] = [];
    const admit = createKeyAdmission({
      checkKey: createKeyChecker(['key-c-0123456789abcdef', 'key-d-0123456789abcdef']),
      rateLimiter: {
        take: (id) => (seen.push(id), { allowed: true, remaining: 1, retryAfterSeconds: 0, waitMs: 0 }),
        takeForWork: () => expect.unreachable(),
      },
    });
    const withKey = (key: string) => ({ header: (name: string) => (name === 'x-api-key' ? key : undefined) });
    for (let i = 0; i < 3; i++) admit.admit(withKey('key-c-0123456789abcdef'));
    admit.admit(withKey('key-d-0123456789abcdef'));
    expect(new Set(seen.slice(0, 3)).size).toBe(1);
    // The identity its jobs record: a collection's children take from the same bucket.
    expect(seen[0]).toBe(jobKeyIdentity('key-c-0123456789abcdef'));
    expect(seen[3]).toBe(jobKeyIdentity('key-d-0123456789abcdef'));
    expect(seen.join()).not.toContain('key-c');
  });
});
