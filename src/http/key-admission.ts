import { ServiceError } from '../errors.js';
import { presentedKey, type KeyChecker } from './api-key.js';
import { jobKeyIdentity } from '../jobs/key-identity.js';
import { waitForWorkToken, type RateLimiter } from './rate-limit.js';

/**
 * Who may use an operation: a valid API key (`Authorization: Bearer <key>` or `X-API-Key`),
 * counted against the key's rate limit, whose bucket is that of the key's job identity (the one
 * its collections' children take tokens from). Requests without a valid key are not counted (they
 * are refused, and made-up keys must not grow the limiter's table).
 */
export interface KeyAdmission {
  /** The request's key when it is valid, uncounted; undefined otherwise. */
  validKey(request: KeyedRequest): string | undefined;
  /** The request's valid key, counted: else 401 `unauthorized`, or 429 `rate_limited` with Retry-After. */
  admit(request: KeyedRequest): string;
  /** Counts a valid key's request: 429 `rate_limited` when its bucket is empty. */
  count(key: string): void;
}

export interface KeyedRequest {
  header(name: string): string | undefined;
}

// Job identities of the keys counted, so that a key's every request does not pay a SHA-256
// for it; only valid keys are counted, so this holds the configured keys (bounded all the same).
const MAX_IDENTITIES = 1024;

export function createKeyAdmission(deps: { checkKey: KeyChecker; rateLimiter?: RateLimiter }): KeyAdmission {
  const identities = new Map<string, string>();
  const identityOf = (key: string): string => {
    let identity = identities.get(key);
    if (identity === undefined) {
      identity = jobKeyIdentity(key);
      if (identities.size >= MAX_IDENTITIES) identities.clear();
      identities.set(key, identity);
    }
    return identity;
  };
  const validKey = (request: KeyedRequest): string | undefined => {
    const key = presentedKey({ get: (name) => request.header(name) });
    return key !== undefined && deps.checkKey(key) ? key : undefined;
  };
  const count = (key: string): void => {
    if (!deps.rateLimiter) return;
    const decision = deps.rateLimiter.take(identityOf(key));
    if (!decision.allowed) throw rateLimited(decision.retryAfterSeconds);
  };
  return {
    validKey,
    count,
    admit(request) {
      const key = validKey(request);
      if (key === undefined) {
        throw new ServiceError(
          'unauthorized',
          'unauthorized',
          'A valid API key is required (Authorization: Bearer <key> or X-API-Key).',
        );
      }
      count(key);
      return key;
    },
  };
}

/** The refusal of a request (or of a collection's entry) whose key's rate limit is spent. */
export function rateLimited(retryAfterSeconds: number): ServiceError {
  return new ServiceError(
    'rate_limited',
    'rate_limited',
    'Too many requests with this API key; slow down and try again later.',
    {
      retryAfterSeconds,
    },
  );
}

/**
 * How a collection's entries take their tokens of the key's rate (src/jobs/collection/run.ts,
 * EntryTokens.take): each waits for a work token of the bucket of the job's key identity until
 * `until`, and is refused as a request would be (rate_limited) when none comes by then.
 */
export function entryTokenTaker(
  limiter: RateLimiter,
  deps: { now: () => number; sleep: (ms: number, signal: AbortSignal) => Promise<void> },
): (apiKeyId: string, until: number, signal: AbortSignal) => Promise<ServiceError | undefined> {
  return async (apiKeyId, until, signal) => {
    const decision = await waitForWorkToken(limiter, apiKeyId, { ...deps, until, signal });
    return decision.allowed ? undefined : rateLimited(decision.retryAfterSeconds);
  };
}
