/**
 * The delivery handler alone in a Hono app, with a fixed clock, a real file under a temp root and
 * a record of what it counted as served: for unit tests of what it answers.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Hono } from 'hono';
import { afterAll, beforeAll } from 'vitest';
import { createArtifactHandler } from '../../src/delivery/handler.js';
import { createUrlSigner } from '../../src/delivery/signed-url.js';
import { createKeyChecker } from '../../src/http/api-key.js';
import { createErrorHandler } from '../../src/http/problem.js';
import { artifactRelativePath, artifactUrlPath } from '../../src/store/layout.js';

export const CID = 'c'.repeat(64);
export const KEY = 'unit-test-key-0123456789';
export const NOW = 1_800_000_000_000;
const SIGNING_SECRET = 'unit-test-signing-secret';

const signer = createUrlSigner(SIGNING_SECRET, { now: () => NOW });
export const signedPath = (ttl: number, cid = CID) => `${artifactUrlPath(cid, 'audio.wav')}?${signer.sign(cid, 'audio.wav', ttl).query}`;
export const httpDate = (unixSeconds: number) => new Date(unixSeconds * 1000).toUTCString();

/** Registers the temp root's set-up and removal in the calling test file. */
export function artifactAppFixture() {
  let root = '';
  const served: string[] = [];
  beforeAll(async () => {
    root = await mkdtemp(path.join(tmpdir(), 'sf-artifact-app-'));
    const file = path.join(root, artifactRelativePath(CID, 'audio.wav'));
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, 'RIFF....WAVE');
  });
  afterAll(async () => {
    await rm(root, { recursive: true, force: true });
  });
  const appFor = (accelRedirectPrefix: string | null) => {
    const app = new Hono();
    app.onError(createErrorHandler(() => ({ error: () => undefined })));
    app.on(
      ['GET', 'HEAD'],
      '/artifacts/:cid/:name',
      createArtifactHandler({
        artifactRoot: root,
        accelRedirectPrefix,
        checkKey: createKeyChecker([KEY]),
        signer: createUrlSigner(SIGNING_SECRET, { now: () => NOW }),
        onServed: (cid) => served.push(cid),
        now: () => NOW,
      }),
    );
    return app;
  };
  return { served, appFor };
}
