/**
 * getArtifact's operation alone in a Hono app, with a fixed clock, a real file under a temp root and
 * a record of what it counted as served: for unit tests of what it answers.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Hono } from 'hono';
import { afterAll, beforeAll } from 'vitest';
import { createArtifactOperation } from '../../src/http/routes/artifacts.js';
import { createFileBodies } from '../../src/delivery/file-body.js';
import { createUrlSigner } from '../../src/delivery/signed-url.js';
import { createKeyChecker } from '../../src/http/api-key.js';
import type { AppEnv } from '../../src/http/env.js';
import { honoOperation } from '../../src/http/hono-operation.js';
import { createKeyAdmission } from '../../src/http/key-admission.js';
import { requestContext } from '../../src/http/middleware/request-context.js';
import { createErrorHandler } from '../../src/http/problem.js';
import { createLogger } from '../../src/logger.js';
import { artifactRelativePath, artifactUrlPath } from '../../src/store/layout.js';

export const CID = 'c'.repeat(64);
export const KEY = 'unit-test-key-0123456789';
export const NOW = 1_800_000_000_000;
const SIGNING_SECRET = 'unit-test-signing-secret';

const signer = createUrlSigner(SIGNING_SECRET, { now: () => NOW });
export const signedPath = (ttl: number, cid = CID) =>
  `${artifactUrlPath(cid, 'audio.wav')}?${signer.sign(cid, 'audio.wav', ttl).query}`;
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
    const app = new Hono<AppEnv>();
    app.use('*', requestContext({ log: createLogger('silent') }));
    app.onError(createErrorHandler(() => ({ error: () => undefined })));
    const {
      method,
      path: route,
      operation,
    } = createArtifactOperation({
      artifactRoot: root,
      accelRedirectPrefix,
      admission: createKeyAdmission({ checkKey: createKeyChecker([KEY]) }),
      signer: createUrlSigner(SIGNING_SECRET, { now: () => NOW }),
      onServed: (cid) => served.push(cid),
      now: () => NOW,
    });
    app.on(method, route, honoOperation(operation, createFileBodies()));
    return app;
  };
  return { served, appFor };
}
