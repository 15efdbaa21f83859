import { createHmac } from 'node:crypto';

/**
 * How a callback is signed, so its receiver can tell it came from this service and was not
 * replayed: HMAC-SHA256 under WEBHOOK_SECRET over `<id>.<timestamp>.<body>`, where the id is the
 * delivery's (the same on every attempt: the receiver's idempotency key) and the timestamp is the
 * attempt's, in Unix seconds. The id is signed too, so a replayed body cannot pass a receiver's
 * de-duplication under a fresh id. The README's Webhooks section shows the check a receiver makes.
 */
export const WEBHOOK_ID_HEADER = 'webhook-id';
export const WEBHOOK_TIMESTAMP_HEADER = 'webhook-timestamp';
export const WEBHOOK_SIGNATURE_HEADER = 'webhook-signature';

export function webhookSignature(secret: string, id: string, timestampS: number, body: string): string {
  return `v1=${createHmac('sha256', secret).update(`${id}.${timestampS}.`).update(body).digest('hex')}`;
}

/** The headers of one attempt. */
export function signedHeaders(secret: string, id: string, timestampS: number, body: string): Record<string, string> {
  return {
    [WEBHOOK_ID_HEADER]: id,
    [WEBHOOK_TIMESTAMP_HEADER]: String(timestampS),
    [WEBHOOK_SIGNATURE_HEADER]: webhookSignature(secret, id, timestampS, body),
  };
}
