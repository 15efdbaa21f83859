import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import {
  signedHeaders,
  webhookKey,
  webhookSecretProblem,
  webhookSignature,
  whsecOf,
} from '../../src/webhooks/signature.js';

/**
 * Callback signatures as Standard Webhooks has them, checked with the specification's own npm
 * library (`standardwebhooks`, a test-only dependency) the way a receiver uses it, and against a
 * known vector of the Standard Webhooks libraries' tests.
 */
const BODY = '{"job_id":"j1","status":"done"}';
const now = () => Math.floor(Date.now() / 1000);

/** What `standardwebhooks` makes of a callback: the parsed body, or the error it throws. */
function verify(
  secret: string | Uint8Array,
  headers: Record<string, string>,
  body = BODY,
  options?: { format: 'raw' },
): unknown {
  try {
    return new Webhook(secret, options).verify(body, headers);
  } catch (err) {
    return err;
  }
}

describe('callback signatures', () => {
  it('match the Standard Webhooks known vector, byte for byte', () => {
    expect(
      webhookSignature(
        'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
        'msg_p5jXN8AQM9LWM0D4loKWxJek',
        1614265330,
        '{"test": 2432232314}',
      ),
    ).toBe('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
  });

  it('verify with standardwebhooks under a whsec_ secret (control: another secret, body, id or an old timestamp do not)', () => {
    const secret = whsecOf(randomBytes(32));
    const headers = signedHeaders([secret], 'delivery-1', now(), BODY);
    expect(Object.keys(headers)).toEqual(['webhook-id', 'webhook-timestamp', 'webhook-signature']);
    expect(headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    expect(verify(secret, headers)).toEqual(JSON.parse(BODY));

    expect(verify(whsecOf(randomBytes(32)), headers)).toMatchObject({ message: 'No matching signature found' });
    expect(verify(secret, headers, BODY.replace('done', 'failed'))).toMatchObject({
      message: 'No matching signature found',
    });
    expect(verify(secret, { ...headers, 'webhook-id': 'delivery-2' })).toMatchObject({
      message: 'No matching signature found',
    });
    const old = signedHeaders([secret], 'delivery-1', now() - 600, BODY);
    expect(verify(secret, old)).toMatchObject({ message: 'Message timestamp too old' });
  });

  it('take a plain secret as its bytes: a receiver gives it raw, or in its whsec_ form', () => {
    const plain = 'a-plain-secret-of-more-than-32-characters';
    const headers = signedHeaders([plain], 'delivery-1', now(), BODY);
    expect(webhookKey(plain)).toEqual(Buffer.from(plain, 'ascii'));
    expect(verify(plain, headers, BODY, { format: 'raw' })).toEqual(JSON.parse(BODY));
    expect(verify(whsecOf(Buffer.from(plain)), headers)).toEqual(JSON.parse(BODY));
    // Without `raw` the library reads a secret as base64: another key, or none at all.
    expect(verify(plain, headers)).toMatchObject({ message: 'Base64Coder: incorrect characters for decoding' });
    const base64Chars = 'APlainSecretOfBase64Characters0123456789';
    expect(verify(base64Chars, signedHeaders([base64Chars], 'delivery-1', now(), BODY))).toMatchObject({
      message: 'No matching signature found',
    });
  });

  it('sign once per secret for rotation, each verifying alone (control: a third secret does not)', () => {
    const [current, previous] = [whsecOf(randomBytes(32)), 'the-previous-plain-secret-0123456789'];
    const headers = signedHeaders([current, previous], 'delivery-1', now(), BODY);
    const signatures = headers['webhook-signature']!.split(' ');
    expect(signatures).toEqual([
      webhookSignature(current, 'delivery-1', Number(headers['webhook-timestamp']), BODY),
      webhookSignature(previous, 'delivery-1', Number(headers['webhook-timestamp']), BODY),
    ]);
    expect(verify(current, headers)).toEqual(JSON.parse(BODY));
    expect(verify(previous, headers, BODY, { format: 'raw' })).toEqual(JSON.parse(BODY));
    expect(verify(whsecOf(randomBytes(32)), headers)).toMatchObject({ message: 'No matching signature found' });
    // A key given twice (in both forms) signs once.
    expect(
      signedHeaders([previous, whsecOf(Buffer.from(previous))], 'd', 1, BODY)['webhook-signature']!.split(' '),
    ).toHaveLength(1);
  });

  it.each([
    ['whsec_ with 24 bytes', whsecOf(randomBytes(24)), null],
    ['whsec_ with 64 bytes', whsecOf(randomBytes(64)), null],
    ['plain, 32 characters', 'p'.repeat(32), null],
    ['whsec_ with 23 bytes', whsecOf(randomBytes(23)), /24 to 64 bytes, not 23/],
    ['whsec_ with 65 bytes', whsecOf(randomBytes(65)), /24 to 64 bytes, not 65/],
    [
      'whsec_ with base64url',
      `whsec_${Buffer.from('\xfb\xff'.repeat(16), 'latin1').toString('base64url')}`,
      /standard base64/,
    ],
    ['whsec_ without its padding', whsecOf(randomBytes(32)).replace(/=$/, ''), /standard base64/],
    ['plain, 31 characters', 'p'.repeat(31), /at least 32 visible ASCII/],
    ['plain, not ASCII', `${'p'.repeat(32)}é`, /at least 32 visible ASCII/],
  ])('a secret %s: %s', (_what, secret, problem) => {
    if (problem === null) expect(webhookSecretProblem(secret)).toBeNull();
    else expect(webhookSecretProblem(secret)).toMatch(problem);
  });
});

describe('WEBHOOK_SECRET', () => {
  it('takes one secret, or several separated by spaces or commas, each of which signs', () => {
    const [a, b] = [whsecOf(randomBytes(32)), 'a-plain-secret-of-more-than-32-characters'];
    expect(loadConfig({ WEBHOOK_SECRET: ` ${a} ` }).webhooks.secret).toBe(a);
    expect(loadConfig({ WEBHOOK_SECRET: `${a}, ${b}` }).webhooks.secret).toBe(`${a} ${b}`);
    expect(loadConfig({ WEBHOOK_SECRET: `${a}\n${b}` }).webhooks.secret).toBe(`${a} ${b}`);
    expect(loadConfig({}).webhooks.secret).toBeUndefined();
  });

  it('refuses a list with a bad secret, naming its place and never its value (control: the list without it passes)', () => {
    const good = whsecOf(randomBytes(32));
    const bad = whsecOf(randomBytes(16));
    const load = () => loadConfig({ WEBHOOK_SECRET: `${good} ${bad}` });
    expect(load).toThrow(ConfigError);
    expect(load).toThrow(
      /^Invalid configuration:\n {2}WEBHOOK_SECRET: secret 2: a whsec_ secret must hold 24 to 64 bytes, not 16$/,
    );
    try {
      load();
    } catch (err) {
      expect((err as Error).message).not.toContain(bad.slice(6));
      expect((err as Error).message).not.toContain(good.slice(6));
    }
    expect(loadConfig({ WEBHOOK_SECRET: good }).webhooks.secret).toBe(good);
    expect(() => loadConfig({ WEBHOOK_SECRET: ' , ' })).toThrow(/WEBHOOK_SECRET: names no secret/);
  });
});
