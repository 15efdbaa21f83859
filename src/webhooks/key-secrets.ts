import { createHmac } from 'node:crypto';
import { splitWebhookSecrets, webhookKey, whsecOf } from './signature.js';

/**
 * The secrets a job's callbacks are signed with: one per API key, derived, never stored, so that
 * a receiver holding its key's secret can tell a callback about its own key's job from one about
 * another key's (every receiver holding one secret could not; and could forge, for another key's
 * receiver, a record that verifies there).
 *
 * A key's secret under one WEBHOOK_SECRET entry (the master) is `whsec_` and the base64 of
 * HMAC-SHA256(the master's key bytes, KEY_SECRET_LABEL + "\0" + the job's key identity): 32 bytes,
 * a secret every Standard Webhooks library takes. The key identity is the one a job records
 * (jobs.api_key_id, src/jobs/key-identity.ts), so nothing new is stored and every node sharing
 * WEBHOOK_SECRET derives the same secret. Jobs without a known key (NO_KEY_IDENTITY, '') get the
 * secret of '', which no key is given. The master signs nothing itself and is never given out;
 * without it, one key's secret tells nothing of another's.
 */
export const KEY_SECRET_LABEL = 'source-fetch webhook key secret';

/** The signing secret of the key `keyIdentity` under one master secret. */
export function keyWebhookSecret(master: string, keyIdentity: string): string {
  return whsecOf(createHmac('sha256', webhookKey(master)).update(`${KEY_SECRET_LABEL}\0${keyIdentity}`).digest());
}

/**
 * The signing secrets of the key `keyIdentity`: one per secret of WEBHOOK_SECRET's value
 * (`masters`, separated by spaces or commas), in its order (the current one first), each once.
 */
export function keyWebhookSecrets(masters: string, keyIdentity: string): string[] {
  return [...new Set(splitWebhookSecrets(masters).map((master) => keyWebhookSecret(master, keyIdentity)))];
}
