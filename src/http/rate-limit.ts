import { createHash } from 'node:crypto';

/**
 * A per-identity request rate limit: one token bucket per API key. A bucket holds at most
 * `burst` tokens and refills at `perMinute` tokens a minute; each request takes one, and a
 * request that finds less than one token is answered 429 `rate_limited` with Retry-After (the
 * whole seconds until a token is back). Work a request started that submits on its own later (a
 * collection's children, src/jobs/collection/run.ts) takes tokens too, but never the last tenth
 * of the bucket, which stays for the key's own requests (takeForWork), and it waits for them
 * (waitForWorkToken) rather than being refused at once.
 *
 * Buckets are keyed by the key's job identity (src/jobs/key-identity.ts: a digest recorded on its
 * jobs, so that a worker can find the bucket of a job's key), never by the key itself, so no key
 * sits in memory twice or ever reaches a log or a heap dump of this map. Only requests whose key
 * is valid get a bucket (the caller decides), so the number of buckets is bounded by the number of
 * configured keys; an attacker with made-up keys cannot grow it.
 */
export interface RateLimitDecision {
  allowed: boolean;
  /** Tokens left after this request (rounded down). */
  remaining: number;
  /** When refused: whole seconds until a request would be allowed again (at least 1). */
  retryAfterSeconds: number;
  /** When refused: milliseconds until a token is back (0 when allowed). */
  waitMs: number;
}

export interface RateLimiter {
  /** A request's token. */
  take(identity: string): RateLimitDecision;
  /** A token for work done for the key without a request of its own: refused while it would leave less than the reserve. */
  takeForWork(identity: string): RateLimitDecision;
}

export interface TokenBucketOptions {
  perMinute: number;
  /** Bucket size; default: a minute's worth (perMinute). */
  burst?: number;
  /** Milliseconds; injected in tests. */
  now: () => number;
  /** Bound on buckets kept; full (idle) buckets are dropped first. Default 10 000. */
  maxIdentities?: number;
}

interface Bucket {
  tokens: number;
  updatedAt: number;
}

export function createTokenBucketLimiter(opts: TokenBucketOptions): RateLimiter {
  if (!(opts.perMinute > 0)) throw new Error('perMinute must be positive');
  const capacity = opts.burst ?? opts.perMinute;
  if (!(capacity >= 1)) throw new Error('burst must be at least 1');
  const perMs = opts.perMinute / 60_000;
  const maxIdentities = opts.maxIdentities ?? 10_000;
  const buckets = new Map<string, Bucket>();

  const refill = (bucket: Bucket, now: number): void => {
    // A clock that steps back gives no tokens (and takes none).
    const elapsed = Math.max(0, now - bucket.updatedAt);
    bucket.tokens = Math.min(capacity, bucket.tokens + elapsed * perMs);
    bucket.updatedAt = now;
  };

  const prune = (now: number): void => {
    for (const [identity, bucket] of buckets) {
      refill(bucket, now);
      if (bucket.tokens >= capacity) buckets.delete(identity);
    }
    // Still too many: drop the oldest (Map order is insertion order).
    for (const identity of buckets.keys()) {
      if (buckets.size < maxIdentities) break;
      buckets.delete(identity);
    }
  };

  // What work (takeForWork) leaves in the bucket for the key's own requests.
  const reserve = Math.floor(capacity / 10);

  /** Takes a token when `floor` tokens would be left after it. */
  const takeAbove = (identity: string, floor: number): RateLimitDecision => {
    const now = opts.now();
    let bucket = buckets.get(identity);
    if (!bucket) {
      if (buckets.size >= maxIdentities) prune(now);
      bucket = { tokens: capacity, updatedAt: now };
      buckets.set(identity, bucket);
    }
    refill(bucket, now);
    if (bucket.tokens >= 1 + floor) {
      bucket.tokens -= 1;
      return { allowed: true, remaining: Math.floor(bucket.tokens), retryAfterSeconds: 0, waitMs: 0 };
    }
    const waitMs = Math.ceil((1 + floor - bucket.tokens) / perMs);
    return { allowed: false, remaining: 0, retryAfterSeconds: Math.max(1, Math.ceil(waitMs / 1000)), waitMs };
  };

  return {
    take: (identity) => takeAbove(identity, 0),
    takeForWork: (identity) => takeAbove(identity, reserve),
  };
}

/**
 * A work token for `identity` (takeForWork), waiting for it while `until` (the clock's ms) has not
 * passed: resolves with the decision that took one, or with the last refusal once waiting longer
 * would pass `until`. Rejects with the signal's reason when it is aborted meanwhile.
 */
export async function waitForWorkToken(
  limiter: RateLimiter,
  identity: string,
  opts: {
    now: () => number;
    until: number;
    signal: AbortSignal;
    sleep: (ms: number, signal: AbortSignal) => Promise<void>;
  },
): Promise<RateLimitDecision> {
  for (;;) {
    opts.signal.throwIfAborted();
    const decision = limiter.takeForWork(identity);
    if (decision.allowed || opts.now() + decision.waitMs > opts.until) return decision;
    await opts.sleep(decision.waitMs, opts.signal);
  }
}

/** A digest of an API key under which per-key counts are held in memory (the event streams'), so the key itself is never held or logged there. */
export function keyIdentity(apiKey: string): string {
  return createHash('sha256').update('rate-limit\0').update(apiKey).digest('base64url');
}

/** RATE_LIMIT_PER_MINUTE's limiter; undefined (no limit) when it is 0. */
export function rateLimiterOf(opts: TokenBucketOptions): RateLimiter | undefined {
  return opts.perMinute > 0 ? createTokenBucketLimiter(opts) : undefined;
}
