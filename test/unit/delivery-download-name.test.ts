import { createHmac } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { downloadName, MAX_DOWNLOAD_NAME_BYTES, requestedDownloadName } from '../../src/delivery/download-name.js';
import { contentDisposition } from '../../src/delivery/representation.js';
import { createUrlSigner, encodeFilenameParam } from '../../src/delivery/signed-url.js';

/** Download names (src/delivery/download-name.ts), their Content-Disposition, and signed URLs that carry them. */

const bytes = (text: string) => Buffer.byteLength(text, 'utf8');
const RTL = 'שיר ערש';

/** What no name may hold: Windows' refused characters, controls, direction characters. */
const UNSAFE = /[<>:"/\\|?*\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

describe('downloadName', () => {
  it("is the title with the artifact's suffix, or the artifact's own name without a title", () => {
    expect(downloadName('My Song', 'audio.wav')).toBe('My Song.wav');
    expect(downloadName('My Song', 'peaks.json')).toBe('My Song.peaks.json');
    expect(downloadName(null, 'audio.wav')).toBe('audio.wav');
    expect(downloadName(null, 'peaks.json')).toBe('peaks.json');
    expect(downloadName(`${RTL} 🎵 👩‍👩‍👧`, 'audio.wav')).toBe(`${RTL} 🎵 👩‍👩‍👧.wav`);
  });

  it('replaces the characters Windows refuses, and removes controls and direction characters', () => {
    expect(downloadName('AC/DC: "Live" <at> \\ Wembley | 1986? *', 'audio.wav')).toBe(
      'AC_DC_ _Live_ _at_ _ Wembley _ 1986_ _.wav',
    );
    expect(downloadName('song\u202evaw.exe', 'audio.wav')).toBe('songvaw.exe.wav');
    expect(downloadName(`a\u0000b\tc\nd\u200f${RTL}\u200e`, 'audio.wav')).toBe(`ab c d${RTL}.wav`);
  });

  it('never starts with a dot or a space, nor ends with either; nothing left: the artifact name', () => {
    expect(downloadName(' ..hidden. . ', 'audio.wav')).toBe('hidden.wav');
    expect(downloadName('...', 'audio.wav')).toBe('audio.wav');
    expect(downloadName('\u202e\u0000 ', 'peaks.json')).toBe('peaks.json');
  });

  it('prefixes the device names Windows keeps, whatever their case or extension', () => {
    for (const device of ['CON', 'con', 'Nul', 'aux', 'PRN', 'COM1', 'lpt9', 'COM²', 'con.tar', 'CONIN$'])
      expect(downloadName(device, 'audio.wav')).toBe(`_${device}.wav`);
    for (const ordinary of ['Conan', 'console', 'COM10', 'null', 'auxiliary'])
      expect(downloadName(ordinary, 'audio.wav')).toBe(`${ordinary}.wav`);
  });

  it('is at most MAX_DOWNLOAD_NAME_BYTES of UTF-8, cut between graphemes', () => {
    const long = downloadName('x'.repeat(2000), 'audio.wav');
    expect(long).toBe(`${'x'.repeat(MAX_DOWNLOAD_NAME_BYTES - 4)}.wav`);
    // Three-byte Hebrew letters and an emoji of 4 code points: nothing split.
    const mixed = downloadName(`${RTL}👩‍👩‍👧`.repeat(40), 'peaks.json');
    expect(bytes(mixed)).toBeLessThanOrEqual(MAX_DOWNLOAD_NAME_BYTES);
    expect(mixed.endsWith('.peaks.json')).toBe(true);
    const stem = mixed.slice(0, -'.peaks.json'.length);
    const title = `${RTL}👩‍👩‍👧`.repeat(40);
    expect(title.startsWith(stem)).toBe(true);
    // The cut is where a grapheme of the title starts.
    const starts = [...new Intl.Segmenter('en', { granularity: 'grapheme' }).segment(title)].map((g) => g.index);
    expect(starts).toContain(stem.length);
    expect(bytes(stem)).toBeGreaterThan(MAX_DOWNLOAD_NAME_BYTES - '.peaks.json'.length - bytes('👩‍👩‍👧'));
  });

  it('property: any title gives a safe name within the bound, which a request for it gets back unchanged', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), fc.constantFrom('audio.wav', 'peaks.json'), (t, a) => {
        const name = downloadName(t, a);
        const suffix = a === 'audio.wav' ? '.wav' : '.peaks.json';
        expect(bytes(name)).toBeLessThanOrEqual(MAX_DOWNLOAD_NAME_BYTES);
        expect(UNSAFE.test(name)).toBe(false);
        // The title's part (none: the artifact's own name).
        if (name !== a) {
          expect(name.endsWith(suffix)).toBe(true);
          expect(/^[. ]|[. ]$/.test(name.slice(0, -suffix.length))).toBe(false);
        }
        expect(requestedDownloadName(name, a)).toBe(name);
      }),
      { numRuns: 1000 },
    );
  });
});

describe('requestedDownloadName', () => {
  it("makes a keyed request's name safe, keeping or adding the artifact's extension", () => {
    expect(requestedDownloadName('mine.wav', 'audio.wav')).toBe('mine.wav');
    expect(requestedDownloadName('mine.WAV', 'audio.wav')).toBe('mine.wav');
    expect(requestedDownloadName('mine', 'audio.wav')).toBe('mine.wav');
    expect(requestedDownloadName('evil.exe', 'audio.wav')).toBe('evil.exe.wav');
    expect(requestedDownloadName('../../etc/passwd', 'audio.wav')).toBe('_.._etc_passwd.wav');
    expect(requestedDownloadName('w.json', 'peaks.json')).toBe('w.json');
    expect(requestedDownloadName('', 'audio.wav')).toBe('audio.wav');
    expect(requestedDownloadName('.wav', 'audio.wav')).toBe('audio.wav');
  });
});

describe('contentDisposition', () => {
  it('gives an ASCII fallback, one _ per character outside printable ASCII, and the exact name in RFC 8187 form', () => {
    expect(contentDisposition('audio.wav')).toBe(`inline; filename="audio.wav"; filename*=UTF-8''audio.wav`);
    expect(contentDisposition(`It's (a) 100% "x"!~*.wav`)).toBe(
      `inline; filename="It's (a) 100_ _x_!~*.wav"; filename*=UTF-8''It%27s%20%28a%29%20100%25%20%22x%22!~%2A.wav`,
    );
    // An emoji is one character: one _, and its four bytes encoded.
    expect(contentDisposition(`${RTL.slice(0, 2)} 🎵.wav`)).toBe(
      `inline; filename="__ _.wav"; filename*=UTF-8''%D7%A9%D7%99%20%F0%9F%8E%B5.wav`,
    );
  });

  it('property: the header is printable ASCII, and filename* decodes back to the name', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 80 }), (title) => {
        const name = downloadName(title, 'audio.wav');
        const header = contentDisposition(name);
        expect(/^[\x20-\x7e]+$/.test(header)).toBe(true);
        const match = /^inline; filename="([^"\\]*)"; filename\*=UTF-8''([A-Za-z0-9%._!~-]+)$/.exec(header);
        expect(match).not.toBeNull();
        expect(decodeURIComponent(match![2]!)).toBe(name);
        expect([...match![1]!].length).toBe([...name].length);
      }),
      { numRuns: 500 },
    );
  });
});

describe('signed URLs that name their download', () => {
  const signer = createUrlSigner('a-signing-secret-of-at-least-32-bytes!', { now: () => 1_000_000 });
  const cid = 'c'.repeat(64);
  const name = `Ein "Lied" – ${RTL} 🎵.wav`;

  it('carry the name as `filename`, percent-encoded, after the signature; the signature covers it', () => {
    const signed = signer.sign(cid, 'audio.wav', 60, name);
    expect(signed.query).toBe(`expires=1060&sig=${signed.signature}&filename=${encodeFilenameParam(name)}`);
    expect(/^[A-Za-z0-9%._~-]+$/.test(encodeFilenameParam(name))).toBe(true);
    expect(decodeURIComponent(encodeFilenameParam(name))).toBe(name);
    expect(signer.verify(cid, 'audio.wav', '1060', signed.signature, name)).toBe('ok');
    // Another name, no name, another artifact: not this signature.
    expect(signer.verify(cid, 'audio.wav', '1060', signed.signature, `${name}x`)).toBe('invalid');
    expect(signer.verify(cid, 'audio.wav', '1060', signed.signature, '')).toBe('invalid');
    expect(signer.verify(cid, 'audio.wav', '1060', signed.signature)).toBe('invalid');
    expect(signer.verify(cid, 'peaks.json', '1060', signed.signature, name)).toBe('invalid');
  });

  it('without a name, are signed as before names existed (old URLs stay valid), and a name cannot be added to them', () => {
    const plain = signer.sign(cid, 'audio.wav', 60);
    expect(plain.query).toBe(`expires=1060&sig=${plain.signature}`);
    expect(signer.verify(cid, 'audio.wav', '1060', plain.signature)).toBe('ok');
    expect(signer.verify(cid, 'audio.wav', '1060', plain.signature, 'other.wav')).toBe('invalid');
    // The scheme of src/delivery/signed-url.ts, made by hand: v1 for no name, v2 with it.
    const mac = (message: string) =>
      createHmac('sha256', 'a-signing-secret-of-at-least-32-bytes!').update(message).digest('base64url');
    expect(plain.signature).toBe(mac(`artifact-v1\n${cid}\naudio.wav\n1060`));
    expect(signer.sign(cid, 'audio.wav', 60, name).signature).toBe(
      mac(`artifact-v2\n${cid}\naudio.wav\n1060\n${name}`),
    );
  });
});
