/**
 * The delivery stack without the job pipeline, shared by the delivery tests and the benchmark:
 * an artifact root in a temp folder holding real 44.1 kHz WAVs at their content addresses (with
 * a secret file next to the root that must never be served), and getArtifact's operation mounted
 * in a tiny Hono app on 127.0.0.1 with the service's real request context and error handler, and
 * node's router in front of it dispatching to the same operation, as src/main.ts mounts them.
 */
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { serve, type ServerType } from '@hono/node-server';
import { Hono } from 'hono';
import { createServer, type RequestListener, type ServerOptions } from 'node:http';
import { createArtifactOperation } from '../../src/http/routes/artifacts.js';
import { createFileBodies } from '../../src/delivery/file-body.js';
import { createUrlSigner, type UrlSigner } from '../../src/delivery/signed-url.js';
import { createKeyChecker, type KeyChecker } from '../../src/http/api-key.js';
import type { AppEnv } from '../../src/http/env.js';
import { honoOperation } from '../../src/http/hono-operation.js';
import { createKeyAdmission } from '../../src/http/key-admission.js';
import { requestContext } from '../../src/http/middleware/request-context.js';
import { createNodeRouter } from '../../src/http/node-router.js';
import { createRequestEnvelope } from '../../src/http/request-envelope.js';
import { createErrorHandler } from '../../src/http/problem.js';
import { createLogger } from '../../src/logger.js';
import { artifactRelativePath, artifactUrlPath, AUDIO_ARTIFACT_NAME } from '../../src/store/layout.js';
import { makeTone } from '../../test/support/media.js';

export const API_KEY = 'delivery-test-key';
export const SECRET_MARKER = 'TOP-SECRET-OUTSIDE-THE-ROOT';
export const SIGNING_SECRET = 'delivery-test-signing-secret-of-32-or-more';

export interface ArtifactStore {
  dir: string;
  root: string;
  /** A file next to the root (dir/secret.txt) holding SECRET_MARKER. */
  secretPath: string;
  /** Stores bytes under their SHA-256 as `name`; returns the cid. */
  add(bytes: Buffer, name?: string): Promise<string>;
  /** Stores a WAV tone of `seconds` (44.1 kHz, 16-bit stereo); returns its cid and bytes. */
  addWav(seconds: number): Promise<{ cid: string; bytes: Buffer }>;
  remove(): Promise<void>;
}

export async function createArtifactStore(): Promise<ArtifactStore> {
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-delivery-'));
  const root = path.join(dir, 'artifacts');
  await mkdir(root);
  const secretPath = path.join(dir, 'secret.txt');
  await writeFile(secretPath, `${SECRET_MARKER}\n`);
  const add = async (bytes: Buffer, name = AUDIO_ARTIFACT_NAME) => {
    const cid = createHash('sha256').update(bytes).digest('hex');
    const file = path.join(root, artifactRelativePath(cid, name));
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, bytes);
    return cid;
  };
  return {
    dir,
    root,
    secretPath,
    add,
    async addWav(seconds) {
      const tone = await makeTone(path.join(dir, 'media'), { seconds, channels: 2, sampleRate: 44100, format: 'wav' });
      const bytes = await readFile(tone.path);
      return { cid: await add(bytes), bytes };
    },
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}

export interface SeenRequest {
  method: string;
  path: string;
  range: string | undefined;
  /** Answered by node's router, before the Hono app. */
  byRouter: boolean;
}

export interface DeliveryApp {
  port: number;
  signer: UrlSigner;
  /** Every request the app saw, in order (through nginx too: nginx forwards Range to the app). */
  seen: SeenRequest[];
  served: string[];
  /** `/artifacts/<cid>/<name>?expires=..&sig=..` */
  signedPath(cid: string, name?: string, ttlSeconds?: number): string;
  close(): Promise<void>;
}

export async function startDeliveryApp(options: {
  root: string;
  accelRedirectPrefix: string | null;
  now?: () => number;
  /** Keep `seen` and `served` (default true; the benchmark turns it off). */
  record?: boolean;
  /** Node's router in front of the app (default true, as the service has it). */
  nodeRouter?: boolean;
  /** The app's key check (default: API_KEY alone); a test revokes a key through it, as a restart with other API_KEYS would. */
  checkKey?: KeyChecker;
}): Promise<DeliveryApp> {
  const record = options.record ?? true;
  const signer = createUrlSigner(SIGNING_SECRET, { now: options.now });
  const seen: SeenRequest[] = [];
  const served: string[] = [];
  const log = createLogger('silent');
  const app = new Hono<AppEnv>();
  app.use('*', requestContext({ log }));
  app.onError(createErrorHandler(() => ({ error: () => undefined })));
  if (record) {
    app.use('*', async (c, next) => {
      seen.push({ method: c.req.method, path: c.req.path, range: c.req.header('range'), byRouter: false });
      await next();
    });
  }
  const binding = createArtifactOperation({
    artifactRoot: options.root,
    accelRedirectPrefix: options.accelRedirectPrefix,
    admission: createKeyAdmission({ checkKey: options.checkKey ?? createKeyChecker([API_KEY]) }),
    signer,
    onServed: record ? (cid) => served.push(cid) : undefined,
  });
  const bodies = createFileBodies();
  app.on(binding.method, binding.path, honoOperation(binding.operation, bodies));
  const router = (options.nodeRouter ?? true) ? createNodeRouter([binding], { bodies, log }) : undefined;
  // Around both, as around the service's: the request id (the router's answer is compared with the app's).
  const envelope = createRequestEnvelope({ log: createLogger('silent'), observeRequest: () => undefined });
  const withRouter = ((serverOptions: ServerOptions, listener: RequestListener) =>
    createServer(serverOptions, (req, res) => {
      if (!router) return envelope(req, res, () => listener(req, res));
      let declined = false;
      envelope(req, res, () =>
        router(req, res, () => {
          declined = true;
          listener(req, res);
        }),
      );
      // What the router answered never reaches the app's recorder above.
      const range = req.headers.range;
      const path = (req.url ?? '').split('?')[0]!;
      if (record) res.once('close', () => declined || seen.push({ method: req.method!, path, range, byRouter: true }));
    })) as typeof createServer;
  const server: ServerType = await new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0, createServer: withRouter }, () => resolve(s));
  });
  return {
    port: (server.address() as AddressInfo).port,
    signer,
    seen,
    served,
    signedPath: (cid, name = AUDIO_ARTIFACT_NAME, ttlSeconds = 600) =>
      `${artifactUrlPath(cid, name)}?${signer.sign(cid, name, ttlSeconds).query}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}
