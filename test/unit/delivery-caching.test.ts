/**
 * What the delivery handler tells caches: in-process, with a fixed clock and a real file.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createArtifactHandler } from '../../src/delivery/handler.js';
import { createUrlSigner } from '../../src/delivery/signed-url.js';
import { createKeyChecker } from '../../src/http/api-key.js';
import { createErrorHandler } from '../../src/http/problem.js';
import { artifactRelativePath, artifactUrlPath } from '../../src/store/layout.js';

const CID = 'c'.repeat(64);
const KEY = 'unit-test-key-0123456789';
const NOW = 1_800_000_000_000;

let root: string;
const served: string[] = [];

function appFor(accelRedirectPrefix: string | null) {
  const app = new Hono();
  app.onError(createErrorHandler(() => ({ error: () => undefined })));
  app.on(
    ['GET', 'HEAD'],
    '/artifacts/:cid/:name',
    createArtifactHandler({
      artifactRoot: root,
      accelRedirectPrefix,
      checkKey: createKeyChecker([KEY]),
      signer: createUrlSigner('unit-test-signing-secret', { now: () => NOW }),
      onServed: (cid) => served.push(cid),
      now: () => NOW,
    }),
  );
  return app;
}

const signer = createUrlSigner('unit-test-signing-secret', { now: () => NOW });
const signedPath = (ttl: number, cid = CID) => `${artifactUrlPath(cid, 'audio.wav')}?${signer.sign(cid, 'audio.wav', ttl).query}`;
const httpDate = (unixSeconds: number) => new Date(unixSeconds * 1000).toUTCString();

beforeAll(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'sf-authz-'));
  const file = path.join(root, artifactRelativePath(CID, 'audio.wav'));
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, 'RIFF....WAVE');
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('caching headers by credential', () => {
  it.each([null, '/_artifacts/'])('keyed answers are private; signed ones public until the signature expires (accel %s)', async (prefix) => {
    const app = appFor(prefix);
    const keyed = await app.request(artifactUrlPath(CID, 'audio.wav'), { headers: { 'x-api-key': KEY } });
    const signed = await app.request(signedPath(600));
    // Behind nginx the app hands the values over under names nginx copies onto successes only.
    const cacheControl = prefix === null ? 'cache-control' : 'x-artifact-cache-control';
    const expires = prefix === null ? 'expires' : 'x-artifact-expires';
    expect(keyed.headers.get(cacheControl)).toBe('private, max-age=31536000, immutable');
    expect(keyed.headers.get(expires)).toBeNull();
    expect(signed.headers.get(cacheControl)).toBe('public, immutable');
    expect(signed.headers.get(expires)).toBe(httpDate(NOW / 1000 + 600));
    if (prefix !== null) {
      for (const res of [keyed, signed]) {
        expect(res.headers.get('cache-control')).toBeNull();
        expect(res.headers.get('expires')).toBeNull();
      }
    }
  });

  it('a 304 carries the same caching headers as the answer it stands for', async () => {
    const res = await appFor(null).request(signedPath(600), { headers: { 'if-none-match': `"${CID}"` } });
    expect(res.status).toBe(304);
    expect(res.headers.get('cache-control')).toBe('public, immutable');
    expect(res.headers.get('expires')).toBe(httpDate(NOW / 1000 + 600));
  });
});
