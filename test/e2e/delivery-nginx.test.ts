/**
 * getArtifact end to end, one table run against both delivery modes: a real nginx (Debian's)
 * rendering nginx/templates in front of the app in X-Accel-Redirect mode (signed URLs checked and
 * answered by nginx alone, keyed requests through the app), and the app's
 * own streaming fallback. Malformed paths go over a raw socket so that no client library
 * normalises them first. That the template's locations never cork a connection (no range waits
 * for the client's delayed ACK) is seen in nginx's system calls: test/e2e/nginx-debian.test.ts.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, symlink, unlink } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { downloadName, requestedDownloadName } from '../../src/delivery/download-name.js';
import { contentDisposition } from '../../src/delivery/representation.js';
import { createUrlSigner } from '../../src/delivery/signed-url.js';
import { artifactRelativePath, artifactUrlPath } from '../../src/store/layout.js';
import {
  API_KEY,
  createArtifactStore,
  SECRET_MARKER,
  SIGNING_SECRET,
  startDeliveryApp,
  type ArtifactStore,
  type DeliveryApp,
} from '../../bench/delivery/stack.js';
import { startNginx, type RunningNginx } from '../support/nginx.js';
import { rawRequest } from '../support/raw-http.js';

const LINK_CID = 'e'.repeat(64);

let store: ArtifactStore;
let wav: { cid: string; bytes: Buffer };
let accelApp: DeliveryApp;
let fallbackApp: DeliveryApp;
let nginx: RunningNginx;
/** nginx serving the root statically with corking on (tcp_nopush), which stalls: the control. */

beforeAll(async () => {
  store = await createArtifactStore();
  wav = await store.addWav(5);
  // A symlink inside the root, at a valid content address, pointing at the secret outside it.
  const link = path.join(store.root, artifactRelativePath(LINK_CID, 'audio.wav'));
  await mkdir(path.dirname(link), { recursive: true });
  await symlink(store.secretPath, link);
  accelApp = await startDeliveryApp({ root: store.root, accelRedirectPrefix: '/_artifacts/' });
  fallbackApp = await startDeliveryApp({ root: store.root, accelRedirectPrefix: null });
  nginx = await startNginx({
    appPort: accelApp.port,
    artifactRoot: store.root,
    urlSigningSecret: SIGNING_SECRET,
  });
});

afterAll(async () => {
  await nginx?.stop();
  await accelApp?.close();
  await fallbackApp?.close();
  await store?.remove();
});

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

/** The expiry a signed path carries, as the HTTP date its Expires header must be. */
function expiresOf(signedPath: string): string {
  const expires = Number(new URL(signedPath, 'http://x').searchParams.get('expires'));
  return new Date(expires * 1000).toUTCString();
}

async function eventually(check: () => Promise<boolean> | boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return check();
}

describe.each(['nginx', 'fallback'] as const)('getArtifact through %s', (mode) => {
  const base = () => (mode === 'nginx' ? nginx.url('') : `http://127.0.0.1:${fallbackApp.port}`);
  const port = () => (mode === 'nginx' ? nginx.port : fallbackApp.port);
  const app = () => (mode === 'nginx' ? accelApp : fallbackApp);
  let signedPath: string;
  beforeAll(() => {
    signedPath = app().signedPath(wav.cid);
  });
  const signed = () => base() + signedPath;
  const keyed = { authorization: `Bearer ${API_KEY}` };

  /** Signed answers may be cached by anyone until the signature expires; keyed ones privately. */
  function expectRepresentationHeaders(res: Response, credential?: { signedPath: string } | 'keyed') {
    const access = credential ?? { signedPath };
    expect(res.headers.get('content-type')).toBe('audio/wav');
    expect(res.headers.get('content-disposition')).toBe(`inline; filename="audio.wav"; filename*=UTF-8''audio.wav`);
    expect(res.headers.get('etag')).toBe(`"${wav.cid}"`);
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    if (access === 'keyed') {
      expect(res.headers.get('cache-control')).toBe('private, max-age=31536000, immutable');
      expect(res.headers.get('expires')).toBeNull();
    } else {
      expect(res.headers.get('cache-control')).toBe('public, immutable');
      expect(res.headers.get('expires')).toBe(expiresOf(access.signedPath));
    }
  }

  it('GET with a signed URL answers the whole file, byte-identical, with the right headers', async () => {
    const res = await fetch(signed());
    expect(res.status).toBe(200);
    const body = new Uint8Array(await res.arrayBuffer());
    expect(sha256(body)).toBe(wav.cid);
    expectRepresentationHeaders(res);
    expect(res.headers.get('content-length')).toBe(String(wav.bytes.length));
    expect(res.headers.get('accept-ranges')).toBe('bytes');
    expect(Date.parse(res.headers.get('last-modified') ?? '')).not.toBeNaN();
    expect(res.headers.get('x-accel-redirect')).toBeNull();
    expect(res.headers.get('x-artifact-cache-control')).toBeNull();
    // The fallback counts the serve itself; behind nginx, nginx's usage log does.
    if (mode === 'fallback') expect(app().served).toContain(wav.cid);
    else
      expect(await eventually(() => readFileSync(nginx.usageLogPath, 'utf8').includes(` ${wav.cid}\n`), 3000)).toBe(
        true,
      );
  });

  it('GET with the API key, as a bearer token or X-API-Key: cached privately only', async () => {
    const url = base() + artifactUrlPath(wav.cid, 'audio.wav');
    for (const headers of [keyed, { 'x-api-key': API_KEY }]) {
      const res = await fetch(url, { headers });
      expect(res.status).toBe(200);
      expect(sha256(new Uint8Array(await res.arrayBuffer()))).toBe(wav.cid);
      expectRepresentationHeaders(res, 'keyed');
    }
  });

  it('a key and a signature together: the key decides (private)', async () => {
    const res = await fetch(signed(), { headers: keyed });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expectRepresentationHeaders(res, 'keyed');
  });

  it.each([
    ['bytes=1000-1999', 1000, 1999],
    ['bytes=-500', -500, -1],
    ['bytes=44-', 44, -1],
  ])('Range %s answers 206 with exactly those bytes', async (range, from, to) => {
    const size = wav.bytes.length;
    const start = from < 0 ? size + from : from;
    const end = to < 0 ? size + to : to;
    const res = await fetch(signed(), { headers: { range } });
    expect(res.status).toBe(206);
    expect(res.headers.get('content-range')).toBe(`bytes ${start}-${end}/${size}`);
    expect(res.headers.get('content-length')).toBe(String(end - start + 1));
    expectRepresentationHeaders(res);
    expect(Buffer.from(await res.arrayBuffer()).equals(wav.bytes.subarray(start, end + 1))).toBe(true);
  });

  it('an unsatisfiable Range answers 416 problem+json with Content-Range bytes */size', async () => {
    for (const headers of [{}, keyed]) {
      const res = await fetch(signed(), { headers: { ...headers, range: `bytes=${wav.bytes.length}-` } });
      expect(res.status).toBe(416);
      expect(res.headers.get('content-range')).toBe(`bytes */${wav.bytes.length}`);
      expect(res.headers.get('content-type')).toBe('application/problem+json');
      expect(((await res.json()) as { code: string }).code).toBe('range_not_satisfiable');
    }
  });

  it('several ranges at once answer the whole file with 200, like the fallback', async () => {
    const res = await fetch(signed(), { headers: { range: 'bytes=0-9,20-29' } });
    expect(res.status).toBe(200);
    expect(Buffer.from(await res.arrayBuffer()).equals(wav.bytes)).toBe(true);
  });

  it('If-Range with the ETag keeps the Range; with another validator the whole file comes', async () => {
    const ok = await fetch(signed(), { headers: { range: 'bytes=0-9', 'if-range': `"${wav.cid}"` } });
    expect(ok.status).toBe(206);
    expect((await ok.arrayBuffer()).byteLength).toBe(10);
    const stale = await fetch(signed(), { headers: { range: 'bytes=0-9', 'if-range': '"something-else"' } });
    expect(stale.status).toBe(200);
    expect(sha256(new Uint8Array(await stale.arrayBuffer()))).toBe(wav.cid);
  });

  it('HEAD answers the headers of a GET and no body', async () => {
    const res = await rawRequest(port(), 'HEAD', app().signedPath(wav.cid));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-length')).toBe(String(wav.bytes.length));
    expect(res.headers.get('etag')).toBe(`"${wav.cid}"`);
    expect(res.headers.get('content-type')).toBe('audio/wav');
    expect(res.bodyBytes).toBe(0);
  });

  it('If-None-Match with the ETag (or W/ or *) answers 304 without a body; another tag gets 200', async () => {
    for (const tag of [`"${wav.cid}"`, `W/"${wav.cid}"`, `"x", "${wav.cid}"`, '*']) {
      const res = await fetch(signed(), { headers: { 'if-none-match': tag } });
      expect(res.status).toBe(304);
      expectRepresentationHeaders(res);
      expect((await res.arrayBuffer()).byteLength).toBe(0);
    }
    const keyedNotModified = await fetch(signed(), { headers: { ...keyed, 'if-none-match': `"${wav.cid}"` } });
    expect(keyedNotModified.status).toBe(304);
    expectRepresentationHeaders(keyedNotModified, 'keyed');
    const changed = await fetch(signed(), { headers: { 'if-none-match': '"other"' } });
    expect(changed.status).toBe(200);
    await changed.arrayBuffer();
  });

  it('refuses missing, wrong, altered and expired credentials with problem+json', async () => {
    const plain = base() + artifactUrlPath(wav.cid, 'audio.wav');
    const none = await fetch(plain);
    expect(none.status).toBe(401);
    expect(none.headers.get('content-type')).toBe('application/problem+json');
    expect(((await none.json()) as { code: string }).code).toBe('unauthorized');
    expect((await fetch(plain, { headers: { 'x-api-key': 'wrong' } })).status).toBe(401);

    const good = app().signer.sign(wav.cid, 'audio.wav', 600);
    const tampered = `${plain}?expires=${good.expires + 1}&sig=${good.signature}`;
    const forged = await fetch(tampered);
    expect(forged.status).toBe(403);
    expect(((await forged.json()) as { code: string }).code).toBe('signature_invalid');
    const otherCid = await fetch(`${base()}${artifactUrlPath('0'.repeat(64), 'audio.wav')}?${good.query}`);
    expect(otherCid.status).toBe(403);
    await otherCid.arrayBuffer();

    const past = createUrlSigner(SIGNING_SECRET, { now: () => Date.now() - 3_600_000 }).sign(wav.cid, 'audio.wav', 60);
    const expired = await fetch(`${plain}?${past.query}`);
    expect(expired.status).toBe(403);
    expect(((await expired.json()) as { code: string }).code).toBe('signature_expired');
  });

  it('unknown content answers 404 problem+json, with a key or a valid signature', async () => {
    const unknown = 'd'.repeat(64);
    for (const [target, headers] of [
      [artifactUrlPath(unknown, 'audio.wav'), keyed],
      [app().signedPath(unknown), {}],
    ] as const) {
      const res = await fetch(base() + target, { headers });
      expect(res.status).toBe(404);
      expect(res.headers.get('content-type')).toBe('application/problem+json');
      expect(((await res.json()) as { code: string }).code).toBe('artifact_not_found');
    }
  });

  it.each(['keyed', 'signed'] as const)(
    'content removed since its last serve (evicted) answers 404 problem+json that is not cached (%s)',
    async (access) => {
      const cid = await store.add(Buffer.from(`evicted soon through ${mode}, ${access}`));
      const target = access === 'keyed' ? artifactUrlPath(cid, 'audio.wav') : app().signedPath(cid);
      const headers = access === 'keyed' ? keyed : {};
      const first = await fetch(base() + target, { headers });
      expect(first.status).toBe(200);
      await first.arrayBuffer();
      // The app still remembers where the file was, and nginx its yes to the signed URL; the open
      // (fallback) or nginx finds the file gone (nginx's open descriptor of a hot file is checked
      // again within 2 s).
      await unlink(path.join(store.root, artifactRelativePath(cid, 'audio.wav')));
      let res: Response | undefined;
      const gone = await eventually(async () => {
        res = await fetch(base() + target, { headers });
        if (res.status === 404) return true;
        await res.arrayBuffer();
        return false;
      }, 5000);
      expect(gone).toBe(true);
      expect(res!.headers.get('content-type')).toBe('application/problem+json');
      expect(res!.headers.get('cache-control')).toBeNull();
      expect(res!.headers.get('expires')).toBeNull();
      expect(((await res!.json()) as { code: string }).code).toBe('artifact_not_found');
    },
  );

  it.each([
    '/artifacts/{cid}/../../secret.txt',
    '/artifacts/{cid}/../../../secret.txt',
    '/artifacts/{cid}/audio.wav/../../../../secret.txt',
    '/artifacts/{cid}/..%2f..%2f..%2fsecret.txt',
    '/artifacts/{cid}/..%2F..%2F..%2Fsecret.txt',
    '/artifacts/{cid}/%2e%2e%2f%2e%2e%2f%2e%2e%2fsecret.txt',
    '/artifacts/{cid}/%252e%252e%252f%252e%252e%252f%252e%252e%252fsecret.txt',
    '/artifacts/{cid}/%2e%2e',
    '/artifacts/{cid}/%2e',
    '/artifacts/{cid}/..%5c..%5c..%5csecret.txt',
    '/artifacts/{cid}/..\\..\\..\\secret.txt',
    '/artifacts/{cid}/audio.wav%00.txt',
    '/artifacts/{cid}/%00',
    '/artifacts/{cid}/audio.wav\0',
    '/artifacts/{cid}/%2fetc%2fpasswd',
    '/artifacts/{cid}//etc/passwd',
    '/artifacts/{cid}/{long}',
    '/artifacts/{cid}/.hidden',
    '/artifacts/{CID}/audio.wav',
    '/artifacts/..%2f..%2fsecret.txt/audio.wav',
    '/artifacts/%2e%2e/secret.txt',
    '/artifacts/{link}/audio.wav',
    '/artifacts/{link2}/../../secret.txt',
    '/_artifacts/../secret.txt',
    '/_artifacts/%2e%2e/secret.txt',
    '/secret.txt',
  ])('refuses %j and never serves a byte outside the root, with a key or a signature', async (pattern) => {
    const target = pattern
      .replaceAll('{cid}', wav.cid)
      .replaceAll('{CID}', wav.cid.toUpperCase())
      .replaceAll('{link}', LINK_CID)
      .replaceAll('{link2}', LINK_CID.slice(0, 2))
      .replaceAll('{long}', 'a'.repeat(300));
    // The signature of the very path asked for, when it has the form of one (the symlink), else
    // that of the real WAV: either way a valid signature rides along.
    const [, cid, name] = /^\/artifacts\/([0-9a-f]{64})\/([^/]+)$/.exec(target) ?? [];
    const query = app().signer.sign(cid ?? wav.cid, cid && name ? decodeURIComponent(name) : 'audio.wav', 600).query;
    for (const [label, res] of [
      ['keyed', await rawRequest(port(), 'GET', target, keyed)],
      ['signed', await rawRequest(port(), 'GET', `${target}?${query}`)],
    ] as const) {
      expect(res.status, label).toBeGreaterThanOrEqual(400);
      expect(res.status, label).toBeLessThan(500);
      expect(res.raw.toString('latin1'), label).not.toContain(SECRET_MARKER);
    }
  });
});

describe('both modes', () => {
  // Headers that describe the answer, not the connection or the moment.
  const COMPARED = [
    'content-type',
    'content-disposition',
    'content-length',
    'content-range',
    'accept-ranges',
    'cache-control',
    'expires',
    'etag',
    'last-modified',
    'x-content-type-options',
  ];
  const described = (res: Response) => Object.fromEntries(COMPARED.map((name) => [name, res.headers.get(name)]));

  it.each([
    ['signed, whole', {}],
    ['signed, range', { range: 'bytes=100-199' }],
    ['signed, not modified', { 'if-none-match': '*' }],
    ['keyed, whole', { 'x-api-key': API_KEY }],
    ['keyed, range', { 'x-api-key': API_KEY, range: 'bytes=100-199' }],
  ] as const)('answer with the same headers: %s', async (_label, headers) => {
    // The same signed URL in both: the apps share the signing secret.
    const target = accelApp.signedPath(wav.cid);
    const viaNginx = await fetch(nginx.url(target), { headers });
    const viaApp = await fetch(`http://127.0.0.1:${fallbackApp.port}${target}`, { headers });
    expect(viaNginx.status).toBe(viaApp.status);
    expect(described(viaNginx)).toEqual(described(viaApp));
    expect(Buffer.from(await viaNginx.arrayBuffer()).equals(Buffer.from(await viaApp.arrayBuffer()))).toBe(true);
  });
});

describe('signed URLs behind nginx', () => {
  it('are checked and answered by nginx alone, never reaching the app, and logged without a trip upstream', async () => {
    const cid = await store.add(Buffer.from('answered by nginx alone'.repeat(1000)));
    const target = accelApp.signedPath(cid);
    accelApp.seen.length = 0;
    for (let i = 0; i < 10; i++) {
      const res = await fetch(nginx.url(target), {
        headers: { range: `bytes=${i * 100}-${i * 100 + 99}` },
        method: i === 9 ? 'HEAD' : 'GET',
      });
      expect(res.status).toBe(206);
      await res.arrayBuffer();
    }
    expect(accelApp.seen).toEqual([]);
    expect(accelApp.served).not.toContain(cid);
    const lines = await nginx.accessLines(
      (line) => line.cid === cid,
      (served) => served.length >= 10,
    );
    expect(lines.map((line) => [line.status, line.upstream_time, line.route])).toEqual(
      Array(10).fill(['206', '', '/artifacts/{cid}/{name}']),
    );
    // Each serve is a use of the content, written to the usage log for the app.
    expect(
      await eventually(() => readFileSync(nginx.usageLogPath, 'utf8').split(` ${cid}\n`).length - 1 === 10, 3000),
    ).toBe(true);
    expect(nginx.errorLog()).not.toMatch(/\[(error|crit|alert|emerg)\]/);
    // nginx holds the signing secret, and writes it nowhere.
    expect(
      nginx.accessLog() + nginx.errorLog() + nginx.stderr() + readFileSync(nginx.usageLogPath, 'utf8'),
    ).not.toContain(SIGNING_SECRET);
  });

  it('stop being served when the signature expires: the app then refuses them', async () => {
    const cid = await store.add(Buffer.from('expires in two seconds'));
    const target = accelApp.signedPath(cid, 'audio.wav', 2);
    const first = await fetch(nginx.url(target));
    expect(first.status).toBe(200);
    expect(first.headers.get('expires')).toBe(expiresOf(target));
    await first.arrayBuffer();
    const expiresAtMs = Date.parse(expiresOf(target));
    let last: Response | undefined;
    const refused = await eventually(async () => {
      const sentAt = Date.now();
      last = await fetch(nginx.url(target));
      if (last.status === 403) return true;
      expect(last.status).toBe(200);
      // Never served once the signature has expired.
      expect(sentAt).toBeLessThan(expiresAtMs);
      await last.arrayBuffer();
      return false;
    }, 4000);
    expect(refused).toBe(true);
    expect(((await last!.json()) as { code: string }).code).toBe('signature_expired');
    expect(Date.now()).toBeGreaterThanOrEqual(Date.parse(expiresOf(target)));
  });

  it('hand a signature that does not hold to the app, which refuses it; a key still decides', async () => {
    const cid = await store.add(Buffer.from('only for key holders'));
    const good = accelApp.signer.sign(cid, 'audio.wav', 600);
    const path = artifactUrlPath(cid, 'audio.wav');
    const flip = (text: string, at: number) => text.slice(0, at) + (text[at] === 'A' ? 'B' : 'A') + text.slice(at + 1);
    // nginx remembers the URLs whose signature held: the genuine one first, so that the forgeries
    // come after it is remembered.
    accelApp.seen.length = 0;
    const first = await fetch(nginx.url(`${path}?${good.query}`));
    expect(first.status).toBe(200);
    await first.arrayBuffer();
    expect(accelApp.seen).toEqual([]);
    const forgeries = [
      `${path}?expires=${good.expires}&sig=${flip(good.signature, 0)}`,
      `${path}?expires=${good.expires}&sig=${flip(good.signature, 42)}`,
      // Another expiry under the genuine signature.
      `${path}?expires=${good.expires + 1}&sig=${good.signature}`,
      // The genuine signature on another name.
      `${artifactUrlPath(cid, 'other.wav')}?${good.query}`,
    ];
    for (const forged of forgeries) {
      const res = await fetch(nginx.url(forged));
      expect(res.status, forged).toBe(403);
      expect(((await res.json()) as { code: string }).code, forged).toBe('signature_invalid');
    }
    expect(accelApp.seen.map((seen) => seen.path)).toEqual([path, path, path, artifactUrlPath(cid, 'other.wav')]);
    // With the key, the forged URL is served (the key decides), through the app.
    const keyedAnswer = await fetch(nginx.url(forgeries[0]!), { headers: { 'x-api-key': API_KEY } });
    expect(keyedAnswer.status).toBe(200);
    expect(keyedAnswer.headers.get('cache-control')).toBe('private, max-age=31536000, immutable');
    await keyedAnswer.arrayBuffer();
    // The control: the genuine signature is served, by nginx alone.
    accelApp.seen.length = 0;
    const genuine = await fetch(nginx.url(`${path}?${good.query}`));
    expect(genuine.status).toBe(200);
    await genuine.arrayBuffer();
    expect(accelApp.seen).toEqual([]);
  });

  it('in any other form than the one the app issues go to the app, which decides', async () => {
    const cid = await store.add(Buffer.from('other forms'));
    const good = accelApp.signer.sign(cid, 'audio.wav', 600);
    const path = artifactUrlPath(cid, 'audio.wav');
    accelApp.seen.length = 0;
    for (const query of [
      `sig=${good.signature}&expires=${good.expires}`,
      `${good.query}&x=1`,
      `expires=${good.expires}&%73ig=${good.signature}`,
    ]) {
      const res = await fetch(nginx.url(`${path}?${query}`));
      expect(res.status, query).toBe(200);
      expect(await res.text(), query).toBe('other forms');
    }
    // A conditional request too: the app answers If-None-Match itself.
    const notModified = await fetch(nginx.url(`${path}?${good.query}`), { headers: { 'if-none-match': `"${cid}"` } });
    expect(notModified.status).toBe(304);
    expect(accelApp.seen.length).toBe(4);
  });

  it('keep being served while the app is down; the rest waits for it', async () => {
    const app = await startDeliveryApp({ root: store.root, accelRedirectPrefix: '/_artifacts/' });
    const alone = await startNginx({ appPort: app.port, artifactRoot: store.root, urlSigningSecret: SIGNING_SECRET });
    try {
      const target = app.signedPath(wav.cid);
      await app.close();
      const res = await fetch(alone.url(target), { headers: { range: 'bytes=0-3' } });
      expect(res.status).toBe(206);
      expect(await res.text()).toBe('RIFF');
      // The control: what needs the app does not get through.
      const keyed = await fetch(alone.url(artifactUrlPath(wav.cid, 'audio.wav')), {
        headers: { 'x-api-key': API_KEY },
      });
      expect(keyed.status).toBe(502);
      await keyed.arrayBuffer();
    } finally {
      await alone.stop();
    }
  });

  it('are answered through the app when nginx lacks the signing secret or holds another one', async () => {
    const cid = await store.add(Buffer.from('no secret at nginx'));
    const target = accelApp.signedPath(cid);
    for (const urlSigningSecret of [undefined, 'another-signing-secret-of-32-characters']) {
      const other = await startNginx({ appPort: accelApp.port, artifactRoot: store.root, urlSigningSecret });
      try {
        accelApp.seen.length = 0;
        const res = await fetch(other.url(target), { headers: { range: 'bytes=3-5' } });
        expect(res.status).toBe(206);
        expect(await res.text()).toBe('sec');
        expect(res.headers.get('expires')).toBe(expiresOf(target));
        expect(accelApp.seen.map((seen) => [seen.path, seen.range])).toEqual([
          [artifactUrlPath(cid, 'audio.wav'), 'bytes=3-5'],
        ]);
      } finally {
        await other.stop();
      }
    }
  });
});

describe('download names (filename)', () => {
  // Quotes, a slash, right-to-left letters, emoji, and titles too long for a file name.
  const titles = [
    `Ein "Lied" / Teil 2: 'live'`,
    'שיר ערש (הקלטה)',
    '🎵 👩‍👩‍👧 Émoji ✓',
    'x'.repeat(2000),
    'ש'.repeat(2000),
    '🎵'.repeat(500),
  ];
  const names = titles.map((title) => downloadName(title, 'audio.wav'));
  const path = () => artifactUrlPath(wav.cid, 'audio.wav');
  const fallbackUrl = (target: string) => `http://127.0.0.1:${fallbackApp.port}${target}`;

  it("a signed URL naming its download: nginx alone answers with the app's Content-Disposition for it, as the fallback does", async () => {
    for (const name of names) {
      const target = `${path()}?${accelApp.signer.sign(wav.cid, 'audio.wav', 600, name).query}`;
      accelApp.seen.length = 0;
      for (const headers of [{}, { range: 'bytes=0-3' }] as Array<Record<string, string>>) {
        const viaNginx = await fetch(nginx.url(target), { headers });
        const viaApp = await fetch(fallbackUrl(target), { headers });
        for (const res of [viaNginx, viaApp]) {
          expect(res.status, name).toBe('range' in headers ? 206 : 200);
          expect(res.headers.get('content-disposition'), name).toBe(contentDisposition(name));
          const body = Buffer.from(await res.arrayBuffer());
          if (!('range' in headers)) expect(sha256(body)).toBe(wav.cid);
        }
      }
      expect(accelApp.seen, name).toEqual([]);
    }
  });

  it('a keyed request names its download with ?filename=, made safe: through the X-Accel-Redirect nginx completes, and the fallback', async () => {
    const asked = [...names, '../../etc/passwd', 'evil.exe', 'a\u202evaw.exe'];
    for (const filename of asked) {
      const target = `${path()}?filename=${encodeURIComponent(filename)}`;
      // A name the record gives comes back as it is; any other is made safe.
      const expected = contentDisposition(names.includes(filename) ? filename : downloadNameOfRequest(filename));
      accelApp.seen.length = 0;
      const viaNginx = await fetch(nginx.url(target), { headers: { 'x-api-key': API_KEY } });
      const viaApp = await fetch(fallbackUrl(target), { headers: { 'x-api-key': API_KEY } });
      for (const res of [viaNginx, viaApp]) {
        expect(res.status, filename).toBe(200);
        expect(res.headers.get('content-disposition'), filename).toBe(expected);
        expect(res.headers.get('cache-control')).toBe('private, max-age=31536000, immutable');
        expect(sha256(Buffer.from(await res.arrayBuffer()))).toBe(wav.cid);
      }
      // Through the app, which made the name safe; nginx sent the bytes.
      expect(accelApp.seen.map((seen) => seen.path)).toEqual([path()]);
    }
    expect(contentDisposition(downloadNameOfRequest('../../etc/passwd'))).toContain('filename="_.._etc_passwd.wav"');
  });

  it('a name the signature does not cover is refused, by nginx handing it to the app and by the fallback; a URL without one keeps its old form', async () => {
    const name = names[0]!;
    const named = accelApp.signer.sign(wav.cid, 'audio.wav', 600, name);
    const plain = accelApp.signer.sign(wav.cid, 'audio.wav', 600);
    const forgeries = [
      // Another name under the named URL's signature.
      `expires=${named.expires}&sig=${named.signature}&filename=${encodeURIComponent(names[1]!)}`,
      // The name taken off it.
      `expires=${named.expires}&sig=${named.signature}`,
      // A name added to a URL signed without one.
      `${plain.query}&filename=${encodeURIComponent(name)}`,
      `${plain.query}&filename=`,
    ];
    for (const query of forgeries) {
      for (const url of [nginx.url(`${path()}?${query}`), fallbackUrl(`${path()}?${query}`)]) {
        const res = await fetch(url);
        expect(res.status, url).toBe(403);
        expect(((await res.json()) as { code: string }).code, url).toBe('signature_invalid');
      }
    }
    // The controls: both genuine URLs are served, each with its name.
    for (const [query, disposition] of [
      [named.query, contentDisposition(name)],
      [plain.query, contentDisposition('audio.wav')],
    ] as const) {
      const res = await fetch(nginx.url(`${path()}?${query}`));
      expect(res.status).toBe(200);
      expect(res.headers.get('content-disposition')).toBe(disposition);
      await res.arrayBuffer();
    }
  });

  it('a named URL in another encoding than the one issued (+ for spaces) goes to the app, which checks the decoded name', async () => {
    const name = 'A song with spaces.wav';
    const signed = accelApp.signer.sign(wav.cid, 'audio.wav', 600, name);
    const plus = `${path()}?expires=${signed.expires}&sig=${signed.signature}&filename=${name.replaceAll(' ', '+')}`;
    accelApp.seen.length = 0;
    const res = await fetch(nginx.url(plus));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-disposition')).toBe(contentDisposition(name));
    expect(sha256(Buffer.from(await res.arrayBuffer()))).toBe(wav.cid);
    expect(accelApp.seen.map((seen) => seen.path)).toEqual([path()]);
  });
});

/** What a keyed request's `filename` is named as (src/delivery/download-name.ts). */
function downloadNameOfRequest(filename: string): string {
  return requestedDownloadName(filename, 'audio.wav');
}

describe('keyed requests behind nginx', () => {
  it("are answered by nginx alone after the app's yes to the key; another key still goes to the app", async () => {
    const cid = await store.add(Buffer.from('read with a key'.repeat(1000)));
    const target = artifactUrlPath(cid, 'audio.wav');
    // An nginx of its own, which has remembered no key yet.
    const own = await startNginx({
      appPort: accelApp.port,
      artifactRoot: store.root,
      urlSigningSecret: SIGNING_SECRET,
    });
    const usage = () => readFileSync(own.usageLogPath, 'utf8').split(` ${cid}\n`).length - 1;
    try {
      accelApp.seen.length = 0;
      // A key nginx has not seen the app accept: the app decides (the control: it can be reached).
      const first = await fetch(own.url(target), { headers: { 'x-api-key': API_KEY } });
      expect(first.status).toBe(200);
      await first.arrayBuffer();
      expect(accelApp.seen.map((seen) => seen.path)).toEqual([target]);
      accelApp.seen.length = 0;
      const whole = await fetch(own.url(target), { headers: { 'x-api-key': API_KEY } });
      expect(whole.status).toBe(200);
      expect(await whole.text()).toBe('read with a key'.repeat(1000));
      expect(whole.headers.get('cache-control')).toBe('private, max-age=31536000, immutable');
      expect(whole.headers.get('expires')).toBeNull();
      expect(whole.headers.get('etag')).toBe(`"${cid}"`);
      const range = await fetch(own.url(target), { headers: { 'x-api-key': API_KEY, range: 'bytes=15-29' } });
      expect(range.status).toBe(206);
      expect(await range.text()).toBe('read with a key');
      const head = await fetch(own.url(target), { method: 'HEAD', headers: { 'x-api-key': API_KEY } });
      expect(head.status).toBe(200);
      expect(accelApp.seen).toEqual([]);
      // nginx counts what it served for eviction, as for signed URLs.
      expect(await eventually(() => usage() >= 2, 3000)).toBe(true);
      // The yes is to these key headers only: a wrong key, the key under another header, no key.
      for (const headers of <Array<Record<string, string>>>[
        { 'x-api-key': 'not-the-key-at-all' },
        { authorization: `Bearer not-the-key-at-all` },
        { 'x-api-key': `${API_KEY}x` },
        {},
      ]) {
        const refused = await fetch(own.url(target), { headers });
        expect(refused.status, JSON.stringify(headers)).toBe(401);
        expect(((await refused.json()) as { code: string }).code).toBe('unauthorized');
      }
      expect(accelApp.seen.length).toBe(4);
    } finally {
      await own.stop();
    }
  });

  it('stop being served within 2 s of the app no longer accepting the key', async () => {
    const keys = new Set([API_KEY]);
    const app = await startDeliveryApp({
      root: store.root,
      accelRedirectPrefix: '/_artifacts/',
      checkKey: (key) => key !== undefined && keys.has(key),
    });
    const alone = await startNginx({ appPort: app.port, artifactRoot: store.root, urlSigningSecret: SIGNING_SECRET });
    try {
      const target = alone.url(artifactUrlPath(wav.cid, 'audio.wav'));
      const read = () => fetch(target, { headers: { authorization: `Bearer ${API_KEY}`, range: 'bytes=0-3' } });
      const yes = await read();
      const yesAt = Date.now();
      expect(yes.status).toBe(206);
      await yes.arrayBuffer();
      keys.delete(API_KEY);
      // Right after the revocation nginx still answers from the remembered yes (the control)...
      app.seen.length = 0;
      const remembered = await read();
      expect(remembered.status).toBe(206);
      await remembered.arrayBuffer();
      expect(app.seen).toEqual([]);
      // ...and then hands the key to the app, which refuses it.
      let last: Response | undefined;
      const refused = await eventually(async () => {
        last = await read();
        await last.arrayBuffer();
        return last.status === 401;
      }, 4000);
      expect(refused).toBe(true);
      // The yes lasts 2 s from the app's answer; the rest is the polling's own pace.
      expect(Date.now() - yesAt).toBeLessThan(3500);
    } finally {
      await alone.stop();
      await app.close();
    }
  });
});

describe('nginx in front', () => {
  it('answers 404 for /_artifacts/ asked for directly, in any spelling', async () => {
    const rel = artifactRelativePath(wav.cid, 'audio.wav');
    // Spellings nginx normalizes to its internal location: nginx's own 404, a problem document.
    const internal = [`/_artifacts/${rel}`, `/%5Fartifacts/${rel}`, `/_artifacts//${rel}`, `/x/../_artifacts/${rel}`];
    for (const target of [...internal, `/_ARTIFACTS/${rel}`]) {
      const res = await rawRequest(nginx.port, 'GET', target, { authorization: `Bearer ${API_KEY}` });
      expect(res.status, target).toBeGreaterThanOrEqual(400);
      expect(res.raw.includes(wav.bytes.subarray(0, 4096))).toBe(false);
      if (internal.includes(target)) {
        expect(res.status, target).toBe(404);
        expect(res.headers.get('content-type'), target).toBe('application/problem+json');
        expect(res.raw.toString('latin1'), target).toContain('"code":"artifact_not_found"');
      }
    }
  });

  it('the app answers X-Accel-Redirect only to what came through nginx, which then sends the bytes; its own port streams them', async () => {
    const direct = `http://127.0.0.1:${accelApp.port}`;
    const keyed = { 'x-api-key': API_KEY };
    // On the app's own port, with the prefix set: the file itself, whole and by range.
    for (const target of [accelApp.signedPath(wav.cid), artifactUrlPath(wav.cid, 'audio.wav')]) {
      const whole = await fetch(direct + target, { headers: keyed });
      expect(whole.status, target).toBe(200);
      expect(whole.headers.get('x-accel-redirect'), target).toBeNull();
      expect(whole.headers.get('content-length'), target).toBe(String(wav.bytes.length));
      expect(sha256(new Uint8Array(await whole.arrayBuffer())), target).toBe(wav.cid);
    }
    const range = await fetch(direct + artifactUrlPath(wav.cid, 'audio.wav'), {
      headers: { ...keyed, range: 'bytes=100-199' },
    });
    expect(range.status).toBe(206);
    expect(Buffer.from(await range.arrayBuffer()).equals(wav.bytes.subarray(100, 200))).toBe(true);
    // The header nginx sets on what it proxies (the control: the prefix is in force).
    const asNginx = await fetch(direct + accelApp.signedPath(wav.cid), {
      headers: { 'x-sendfile-type': 'X-Accel-Redirect' },
    });
    expect(asNginx.status).toBe(200);
    expect(asNginx.headers.get('x-accel-redirect')).toBe(`/_artifacts/${artifactRelativePath(wav.cid, 'audio.wav')}`);
    expect((await asNginx.arrayBuffer()).byteLength).toBe(0);
    // Through nginx, with a key nginx has not seen the app accept (an nginx of its own): the app
    // redirected, and nginx sent the file from its internal location, where it remembers the
    // app's yes to the key: the next request is nginx's alone. (Had the app streamed the bytes,
    // nginx would have remembered nothing.)
    const own = await startNginx({
      appPort: accelApp.port,
      artifactRoot: store.root,
      urlSigningSecret: SIGNING_SECRET,
    });
    try {
      accelApp.seen.length = 0;
      for (let i = 0; i < 2; i++) {
        const res = await fetch(own.url(artifactUrlPath(wav.cid, 'audio.wav')), { headers: keyed });
        expect(res.status).toBe(200);
        expect(res.headers.get('x-accel-redirect')).toBeNull();
        expect(sha256(new Uint8Array(await res.arrayBuffer()))).toBe(wav.cid);
      }
      expect(accelApp.seen.map((seen) => seen.path)).toEqual([artifactUrlPath(wav.cid, 'audio.wav')]);
      expect(own.errorLog()).not.toMatch(/\[(error|crit|alert|emerg)\]/);
    } finally {
      await own.stop();
    }
  });

  it('serves peaks.json as application/json, with a key and with a signed URL (answered through the app, which redirects)', async () => {
    const bytes = Buffer.from(
      '{"version":2,"channels":1,"sample_rate":44100,"samples_per_pixel":32,"bits":8,"length":1,"data":[-1,1]}',
    );
    const cid = await store.add(bytes, 'peaks.json');
    const keyed = await fetch(nginx.url(artifactUrlPath(cid, 'peaks.json')), { headers: { 'x-api-key': API_KEY } });
    const signedPath = accelApp.signedPath(cid, 'peaks.json');
    const signed = await fetch(nginx.url(signedPath));
    for (const res of [keyed, signed]) {
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('application/json');
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(Buffer.from(await res.arrayBuffer()).equals(bytes)).toBe(true);
    }
    expect(signed.headers.get('cache-control')).toBe('public, immutable');
    expect(signed.headers.get('expires')).toBe(expiresOf(signedPath));
    // Control: the WAV's signed URL is nginx's own, with its own type.
    expect((await fetch(nginx.url(accelApp.signedPath(wav.cid)))).headers.get('content-type')).toBe('audio/wav');
  });

  it('percent-encodes the redirect so that nginx finds names with spaces and non-ASCII letters', async () => {
    const name = 'my song é #1.json';
    const bytes = Buffer.from('{"hello":"world"}');
    const cid = await store.add(bytes, name);
    const res = await fetch(nginx.url(artifactUrlPath(cid, name)), { headers: { 'x-api-key': API_KEY } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(res.headers.get('content-disposition')).toBe(
      `inline; filename="my song _ #1.json"; filename*=UTF-8''my%20song%20%C3%A9%20%231.json`,
    );
    expect(Buffer.from(await res.arrayBuffer()).equals(bytes)).toBe(true);
  });
});
