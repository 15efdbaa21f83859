import { createHmac } from 'node:crypto';

/**
 * How a callback is signed: Standard Webhooks (https://www.standardwebhooks.com), byte for byte,
 * so that a receiver can check it with any of that specification's libraries. Each attempt
 * carries `webhook-id` (the delivery's id, the same on every attempt: the receiver's idempotency
 * key), `webhook-timestamp` (the attempt's, Unix seconds) and `webhook-signature`: `v1,` and the
 * base64 of HMAC-SHA256 over `<id>.<timestamp>.<body>`, one such signature per signing secret,
 * separated by spaces, so that a receiver holding any one of them can check it (rotation). The
 * signing secrets are the job's key's, one per secret of WEBHOOK_SECRET (./key-secrets.ts). The id is signed too, so a replayed body cannot pass a receiver's de-duplication
 * under a fresh id. docs/webhooks.md shows the checks a receiver makes.
 *
 * A WEBHOOK_SECRET entry is written either in the specification's form, `whsec_` and the base64 of 24 to 64
 * bytes, which are the HMAC key; or plain, 32 or more visible ASCII characters (no space, no
 * comma), whose bytes are the key: the same key as `whsec_` + base64 of those characters.
 */
export const WEBHOOK_ID_HEADER = 'webhook-id';
export const WEBHOOK_TIMESTAMP_HEADER = 'webhook-timestamp';
export const WEBHOOK_SIGNATURE_HEADER = 'webhook-signature';

export const WEBHOOK_SECRET_PREFIX = 'whsec_';
/** The key sizes the specification allows a `whsec_` secret. */
const KEY_BYTES = { min: 24, max: 64 };
const PLAIN_SECRET = /^[\x21-\x2b\x2d-\x7e]{32,}$/;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/** Why `secret` is no secret WEBHOOK_SECRET takes; null when it is one. */
export function webhookSecretProblem(secret: string): string | null {
  if (secret.startsWith(WEBHOOK_SECRET_PREFIX)) {
    const encoded = secret.slice(WEBHOOK_SECRET_PREFIX.length);
    const key = Buffer.from(encoded, 'base64');
    // Canonical, padded base64 only: what every Standard Webhooks library decodes the same way.
    if (!BASE64.test(encoded) || key.toString('base64') !== encoded)
      return 'a whsec_ secret must be followed by standard base64 (with its = padding)';
    if (key.length < KEY_BYTES.min || key.length > KEY_BYTES.max)
      return `a whsec_ secret must hold ${KEY_BYTES.min} to ${KEY_BYTES.max} bytes, not ${key.length}`;
    return null;
  }
  if (!PLAIN_SECRET.test(secret))
    return 'a secret must be whsec_ followed by base64, or at least 32 visible ASCII characters with no comma';
  return null;
}

/** The secrets of a WEBHOOK_SECRET value: separated by spaces or commas. */
export function splitWebhookSecrets(value: string): string[] {
  return value.split(/[\s,]+/).filter((secret) => secret !== '');
}

/** The HMAC key of one secret (see above); throws for anything webhookSecretProblem refuses. */
export function webhookKey(secret: string): Buffer {
  const problem = webhookSecretProblem(secret);
  if (problem !== null) throw new Error(`invalid webhook secret: ${problem}`);
  return secret.startsWith(WEBHOOK_SECRET_PREFIX)
    ? Buffer.from(secret.slice(WEBHOOK_SECRET_PREFIX.length), 'base64')
    : Buffer.from(secret, 'ascii');
}

/** A key written in the specification's form: `whsec_` and its base64 (how a generated secret is kept). */
export function whsecOf(key: Buffer): string {
  return `${WEBHOOK_SECRET_PREFIX}${key.toString('base64')}`;
}

/** One signature, `v1,<base64>`, under one secret. */
export function webhookSignature(secret: string, id: string, timestampS: number, body: string): string {
  return `v1,${createHmac('sha256', webhookKey(secret)).update(`${id}.${timestampS}.`).update(body).digest('base64')}`;
}

/**
 * The headers of one attempt. `secrets`: the secrets that sign it (a job's key's, one per
 * WEBHOOK_SECRET entry: ./key-secrets.ts); each signs, once however often its key is given.
 */
export function signedHeaders(
  secrets: readonly string[],
  id: string,
  timestampS: number,
  body: string,
): Record<string, string> {
  const signatures = new Set(secrets.map((secret) => webhookSignature(secret, id, timestampS, body)));
  if (signatures.size === 0) throw new Error('no webhook secret to sign with');
  return {
    [WEBHOOK_ID_HEADER]: id,
    [WEBHOOK_TIMESTAMP_HEADER]: String(timestampS),
    [WEBHOOK_SIGNATURE_HEADER]: [...signatures].join(' '),
  };
}
