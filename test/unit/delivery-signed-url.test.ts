import { describe, expect, it } from 'vitest';
import { createUrlSigner } from '../../src/delivery/signed-url.js';

const CID = 'a'.repeat(64);
const OTHER_CID = 'b'.repeat(64);
const T0 = 1_800_000_000_000;

function signerAt(clock: { now: number }, secret: string | Buffer = 'secret-one') {
  return createUrlSigner(secret, { now: () => clock.now });
}

describe('signed artifact URLs', () => {
  it('signs cid, name and expiry into an expires & sig query that verifies until it expires', () => {
    const clock = { now: T0 };
    const signer = signerAt(clock);
    const signed = signer.sign(CID, 'audio.wav', 60);
    expect(signed.expires).toBe(T0 / 1000 + 60);
    expect(signed.signature).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(signed.query).toBe(`expires=${signed.expires}&sig=${signed.signature}`);
    expect(signer.verify(CID, 'audio.wav', String(signed.expires), signed.signature)).toBe('ok');
    clock.now = T0 + 59_999;
    expect(signer.verify(CID, 'audio.wav', String(signed.expires), signed.signature)).toBe('ok');
    clock.now = T0 + 60_000;
    expect(signer.verify(CID, 'audio.wav', String(signed.expires), signed.signature)).toBe('expired');
  });

  it('refuses a signature carried over to another cid, name or expiry, or altered', () => {
    const signer = signerAt({ now: T0 });
    const { expires, signature } = signer.sign(CID, 'audio.wav', 60);
    const e = String(expires);
    expect(signer.verify(OTHER_CID, 'audio.wav', e, signature)).toBe('invalid');
    expect(signer.verify(CID, 'audio.json', e, signature)).toBe('invalid');
    expect(signer.verify(CID, 'audio.wav', String(expires + 3600), signature)).toBe('invalid');
    expect(signer.verify(CID, 'audio.wav', `0${e}`, signature)).toBe('invalid');
    const flipped = (signature[0] === 'A' ? 'B' : 'A') + signature.slice(1);
    expect(signer.verify(CID, 'audio.wav', e, flipped)).toBe('invalid');
    // Same decoded bytes, other spare bits in the last character: still refused.
    const last = signature.at(-1)!;
    const sibling = signature.slice(0, -1) + String.fromCharCode(last.charCodeAt(0) ^ 1);
    expect(signer.verify(CID, 'audio.wav', e, sibling)).toBe('invalid');
    expect(signer.verify(CID, 'audio.wav', e, `${signature}=`)).toBe('invalid');
    expect(signer.verify(CID, 'audio.wav', '1e12', signature)).toBe('invalid');
  });

  it('an expired but otherwise genuine signature is expired; a forged past expiry is invalid', () => {
    const clock = { now: T0 };
    const signer = signerAt(clock);
    const { expires, signature } = signer.sign(CID, 'audio.wav', 1);
    clock.now = T0 + 10_000;
    expect(signer.verify(CID, 'audio.wav', String(expires), signature)).toBe('expired');
    expect(signer.verify(CID, 'audio.wav', String(expires - 1), signature)).toBe('invalid');
  });

  it('tells missing from incomplete', () => {
    const signer = signerAt({ now: T0 });
    const { expires, signature } = signer.sign(CID, 'audio.wav', 60);
    expect(signer.verify(CID, 'audio.wav', undefined, undefined)).toBe('missing');
    expect(signer.verify(CID, 'audio.wav', '', '')).toBe('missing');
    expect(signer.verify(CID, 'audio.wav', String(expires), undefined)).toBe('invalid');
    expect(signer.verify(CID, 'audio.wav', undefined, signature)).toBe('invalid');
  });

  it('depends on the secret, given as a string or a Buffer', () => {
    const a = signerAt({ now: T0 }, 'secret-one');
    const b = signerAt({ now: T0 }, 'secret-two');
    const c = signerAt({ now: T0 }, Buffer.from('secret-one'));
    const { expires, signature } = a.sign(CID, 'audio.wav', 60);
    expect(b.verify(CID, 'audio.wav', String(expires), signature)).toBe('invalid');
    expect(c.verify(CID, 'audio.wav', String(expires), signature)).toBe('ok');
    expect(() => createUrlSigner('', {})).toThrow();
    expect(() => a.sign(CID, 'audio.wav', 0)).toThrow();
  });
});
