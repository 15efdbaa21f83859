import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type ServiceHandle } from '../support/service.js';

/**
 * Secrets generated at first start, when the configuration gives none: the API key
 * (DATA_DIR/api-key), the URL signing secret (DATA_DIR/url-signing-secret) and the callbacks'
 * signing secret (DATA_DIR/webhook-secret), each mode 0600,
 * the file's path logged but never its content, and the same secrets after a restart: the key
 * still opens the API and a signed URL handed out before the restart still plays.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');

let media: MediaServer;
let tone: MediaFixture;
let dataDir: string;

beforeAll(async () => {
  tone = await makeTone(FIXTURE_DIR, { seconds: 1, channels: 1, sampleRate: 44100, format: 'flac' });
  media = await startMediaServer();
  media.serveFile('/secret-tone.flac', tone.path, { contentType: tone.contentType });
  dataDir = await mkdtemp(path.join(tmpdir(), 'sf-secrets-'));
});

afterAll(async () => {
  await media?.close();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

async function secretFile(name: string): Promise<{ value: string; mode: number; ino: number }> {
  const file = path.join(dataDir, name);
  const info = await stat(file);
  return { value: (await readFile(file, 'utf8')).trim(), mode: info.mode & 0o777, ino: info.ino };
}

/**
 * The log line that names the generated key's file; the plain words on stderr that say where to
 * open the page and where the key is; and proof that no secret reached the output.
 */
async function expectLoggedSafely(svc: ServiceHandle, secrets: string[], created: boolean) {
  const keyFile = path.join(dataDir, 'api-key');
  const line = svc.logs.find((l) => l.file === keyFile);
  expect(line, 'a log line names the key file').toBeDefined();
  expect(line).toMatchObject({ created });
  // The welcome is written to standard error once the server listens: it may come after readiness.
  await expect
    .poll(() => svc.errorOutput())
    .toContain(`source-fetch is ready: open http://127.0.0.1:${svc.port}/ in a browser.\n`);
  expect(svc.errorOutput()).toContain(
    `The API key ${created ? 'was generated into' : 'is in'} ${keyFile} (read it with: cat ${keyFile})`,
  );
  const output = svc.output();
  for (const secret of secrets) expect(output.includes(secret), 'a secret in the output').toBe(false);
}

describe('secrets generated at first start', () => {
  it('keeps the API key and the signing secret in the data dir (0600), never logs them, and uses the same ones after a restart', async () => {
    const env = { FETCH_ALLOW_HOSTS: media.hostPort };
    let cid: string;
    let signedUrl: string;
    let key: { value: string; mode: number; ino: number };
    let signing: { value: string; mode: number; ino: number };
    let webhook: { value: string; mode: number; ino: number };

    const first = await startService({ dataDir, apiKey: null, env });
    try {
      key = await secretFile('api-key');
      signing = await secretFile('url-signing-secret');
      webhook = await secretFile('webhook-secret');
      expect(key.mode).toBe(0o600);
      expect(signing.mode).toBe(0o600);
      expect(webhook.mode).toBe(0o600);
      expect(webhook.value.length).toBeGreaterThanOrEqual(32);
      expect(new Set([key.value, signing.value, webhook.value]).size).toBe(3);
      expect(first.logs.find((l) => l.file === path.join(dataDir, 'webhook-secret'))).toMatchObject({ created: true });
      expect(key.value).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(signing.value.length).toBeGreaterThanOrEqual(32);
      expect(signing.value).not.toBe(key.value);
      expect(first.apiKey).toBe(key.value);

      // The generated key is the key: without it 401, with it the API answers.
      expect((await first.request('/jobs/none', { auth: false })).status).toBe(401);
      expect(
        (await first.request('/jobs/none', { auth: false, headers: { authorization: `Bearer ${key.value}` } })).status,
      ).toBe(404);

      const job = await first.waitForJob((await first.submit(media.url('/secret-tone.flac'))).job_id, [
        'done',
        'failed',
      ]);
      expect(job.status).toBe('done');
      cid = job.result!.content_id;
      signedUrl = job.result!.artifacts[0]!.signed_url;
      expect(signedUrl).toMatch(/[?&]sig=/);
      const played = await fetch(`${first.baseUrl}${signedUrl}`);
      expect(played.status).toBe(200);
      await played.arrayBuffer();
      await expectLoggedSafely(first, [key.value, signing.value, webhook.value], true);
    } finally {
      await first.stop();
    }

    const second = await startService({ dataDir, apiKey: null, env });
    try {
      // Same files, untouched; the log says the key was read, not made.
      expect(await secretFile('api-key')).toEqual(key);
      expect(await secretFile('url-signing-secret')).toEqual(signing);
      expect(await secretFile('webhook-secret')).toEqual(webhook);
      expect(second.apiKey).toBe(key.value);
      await expectLoggedSafely(second, [key.value, signing.value, webhook.value], false);

      // The key from before the restart still opens the API.
      const res = await second.request('/jobs/none', { auth: false, headers: { 'x-api-key': key.value } });
      expect(res.status).toBe(404);
      expect((await second.request('/jobs/none', { auth: false })).status).toBe(401);

      // A signed URL handed out before the restart still plays, without a key.
      const played = await fetch(`${second.baseUrl}${signedUrl}`);
      expect(played.status).toBe(200);
      expect(
        createHash('sha256')
          .update(Buffer.from(await played.arrayBuffer()))
          .digest('hex'),
      ).toBe(cid);
      // ...and the signature is checked: another one is refused.
      const forged = signedUrl.replace(/sig=([A-Za-z0-9_-])/, (_m, c: string) => `sig=${c === 'A' ? 'B' : 'A'}`);
      expect(forged).not.toBe(signedUrl);
      const refused = await fetch(`${second.baseUrl}${forged}`);
      expect(refused.status).toBe(403);
      expect(((await refused.json()) as { code: string }).code).toBe('signature_invalid');
    } finally {
      await second.stop();
    }
  });

  it('with API_KEYS and WEBHOOK_SECRET set, writes no api-key or webhook-secret file', async () => {
    const svc = await startService({ env: { WEBHOOK_SECRET: 'a-configured-webhook-secret-0123456789' } });
    try {
      await expect(stat(path.join(svc.dataDir, 'api-key'))).rejects.toMatchObject({ code: 'ENOENT' });
      await expect(stat(path.join(svc.dataDir, 'webhook-secret'))).rejects.toMatchObject({ code: 'ENOENT' });
      expect((await stat(path.join(svc.dataDir, 'url-signing-secret'))).mode & 0o777).toBe(0o600);
      expect(svc.logs.some((l) => typeof l.file === 'string' && l.file.endsWith('api-key'))).toBe(false);
      await expect.poll(() => svc.errorOutput()).toContain('The API key is one of API_KEYS');
      expect(svc.output()).not.toContain(svc.apiKey);
    } finally {
      await svc.stop();
    }
  });
});
