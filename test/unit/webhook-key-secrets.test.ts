import { createHmac, randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { jobKeyIdentity, NO_KEY_IDENTITY } from '../../src/jobs/key-identity.js';
import { keyWebhookSecret, keyWebhookSecrets } from '../../src/webhooks/key-secrets.js';
import { signedHeaders, webhookKey, webhookSecretProblem, whsecOf } from '../../src/webhooks/signature.js';

/**
 * Each API key's callback signing secrets (src/webhooks/key-secrets.ts), derived from the
 * WEBHOOK_SECRET entries: the same every time and on every node, another for every key and every
 * entry, each a secret Standard Webhooks libraries take, and none of them the entry itself.
 */
const MASTER = whsecOf(Buffer.alloc(32, 7));
const KEY_A = jobKeyIdentity('key-a-0123456789abcdef');
const KEY_B = jobKeyIdentity('key-b-0123456789abcdef');
const BODY = '{"job_id":"j1","status":"done"}';

function verifies(secret: string, headers: Record<string, string>): boolean {
  try {
    new Webhook(secret).verify(BODY, headers);
    return true;
  } catch {
    return false;
  }
}

describe("a key's signing secret", () => {
  it('is whsec_ and the base64 of HMAC-SHA256(the master key, label NUL key identity): 32 bytes, a valid secret', () => {
    const expected = createHmac('sha256', Buffer.alloc(32, 7))
      .update(`source-fetch webhook key secret\0${KEY_A}`)
      .digest();
    const secret = keyWebhookSecret(MASTER, KEY_A);
    expect(secret).toBe(`whsec_${expected.toString('base64')}`);
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(webhookKey(secret)).toHaveLength(32);
    expect(webhookSecretProblem(secret)).toBeNull();
    // Stable: the same master and key give it again (every node, every restart).
    expect(keyWebhookSecret(MASTER, KEY_A)).toBe(secret);
  });

  it('differs per key, per master, and for jobs without a key; none is the master', () => {
    const other = whsecOf(randomBytes(32));
    const secrets = [
      keyWebhookSecret(MASTER, KEY_A),
      keyWebhookSecret(MASTER, KEY_B),
      keyWebhookSecret(MASTER, NO_KEY_IDENTITY),
      keyWebhookSecret(other, KEY_A),
      keyWebhookSecret(other, KEY_B),
      keyWebhookSecret(other, NO_KEY_IDENTITY),
    ];
    expect(new Set(secrets).size).toBe(secrets.length);
    expect(secrets).not.toContain(MASTER);
    expect(secrets).not.toContain(other);
  });

  it('is the same for a plain master and its whsec_ form (the same key bytes)', () => {
    const plain = 'a-plain-master-secret-of-32-characters-0';
    expect(keyWebhookSecret(plain, KEY_A)).toBe(keyWebhookSecret(whsecOf(Buffer.from(plain)), KEY_A));
  });

  it('one per master, in their order, each once; each verifies its own signature and no other key does', () => {
    const previous = 'the-previous-plain-master-secret-0123456789';
    const masters = `${MASTER}, ${previous} ${whsecOf(Buffer.from(previous))}`;
    const ofA = keyWebhookSecrets(masters, KEY_A);
    expect(ofA).toEqual([keyWebhookSecret(MASTER, KEY_A), keyWebhookSecret(previous, KEY_A)]);

    const headers = signedHeaders(ofA, 'delivery-1', Math.floor(Date.now() / 1000), BODY);
    expect(headers['webhook-signature']!.split(' ')).toHaveLength(2);
    for (const secret of ofA) expect(verifies(secret, headers)).toBe(true);
    // Key B's secrets, and the masters themselves, verify none of key A's callbacks.
    for (const secret of keyWebhookSecrets(masters, KEY_B)) expect(verifies(secret, headers)).toBe(false);
    expect(verifies(MASTER, headers)).toBe(false);
    expect(verifies(whsecOf(Buffer.from(previous)), headers)).toBe(false);
  });
});
