import { createHash } from 'node:crypto';

/**
 * The identity a job records of the API key that submitted it (jobs.api_key_id): the store's
 * allowance per key and the queue's turns across keys go by it. It is stored, so it is not the
 * key: the first 128 bits of a SHA-256 of the key under a label of its own, base64url (22
 * characters). Keys are at least 16 characters (API_KEYS) and the generated one is random, so
 * the digest does not give the key back; 128 bits keep two keys from sharing an identity; the
 * label keeps it apart from every other digest of the key (the event streams', the key check's).
 * The request rate limit's buckets go by it too (src/http/key-admission.ts), so that a worker
 * submitting a collection's children takes their tokens from their key's bucket.
 *
 * The key itself never reaches a job record, a log line, an error or a metric.
 */
export function jobKeyIdentity(apiKey: string): string {
  return createHash('sha256')
    .update('source-fetch job key\0')
    .update(apiKey)
    .digest()
    .subarray(0, 16)
    .toString('base64url');
}

/** The identity of jobs whose key is not known (made before keys were recorded). */
export const NO_KEY_IDENTITY = '';
