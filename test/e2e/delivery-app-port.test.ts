/**
 * The service set up for nginx (ACCEL_REDIRECT_PREFIX=/_artifacts/, as docs/operations.md says)
 * and used on its own port anyway, as a person trying it does: a fetched WAV still comes whole
 * from the app's port (curl with the key, the job's signed URL, the CLI), and through the real
 * nginx in front as well. The app answers X-Accel-Redirect only to requests that came through
 * nginx (src/http/routes/artifacts.ts, nginx/templates/default.conf.template).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../../src/cli/exit-codes.js';
import { startServiceBehindNginx } from '../support/behind-nginx.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import type { RunningNginx } from '../support/nginx.js';
import { ROOT, type JobBody, type ServiceHandle } from '../support/service.js';

let media: MediaServer;
let svc: ServiceHandle;
let nginx: RunningNginx;
let work: string;
let done: JobBody;

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'sf-app-port-'));
  media = await startMediaServer();
  const tone = await makeTone(work, { seconds: 2, channels: 2, sampleRate: 44100, format: 'wav' });
  media.serveFile('/tone.wav', tone.path, { contentType: 'audio/wav' });
  ({ svc, nginx } = await startServiceBehindNginx({ env: { FETCH_ALLOW_HOSTS: media.hostPort } }));
  const job = await svc.submit(media.url('/tone.wav'));
  done = await svc.waitForJob(job.job_id, ['done', 'failed']);
  expect(done.status, JSON.stringify(done.error)).toBe('done');
});

afterAll(async () => {
  await nginx?.stop();
  await svc?.stop();
  await media?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

function runCli(args: string[], baseUrl: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(path.join(ROOT, 'dist/cli/main.js'), args, {
      cwd: work,
      env: { PATH: process.env.PATH, SOURCE_FETCH_URL: baseUrl, SOURCE_FETCH_API_KEY: svc.apiKey },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, output }));
  });
}

describe.each(['the app port', 'nginx'] as const)('with ACCEL_REDIRECT_PREFIX set, through %s', (via) => {
  const base = () => (via === 'nginx' ? nginx.url('') : svc.baseUrl);

  it("answers the WAV's bytes, whose SHA-256 is its content id, with the key and on the signed URL", async () => {
    const cid = done.result!.content_id;
    const artifact = done.result!.artifacts.find((a) => a.name === 'audio.wav')!;
    for (const [label, target, headers] of [
      ['keyed', artifact.path, { authorization: `Bearer ${svc.apiKey}` }],
      ['signed', artifact.signed_url, {}],
    ] as const) {
      const res = await fetch(base() + target, { headers });
      expect(res.status, label).toBe(200);
      expect(res.headers.get('x-accel-redirect'), label).toBeNull();
      const body = new Uint8Array(await res.arrayBuffer());
      expect(body.byteLength, label).toBe(artifact.bytes);
      expect(sha256(body), label).toBe(cid);
    }
  });

  it('lets the CLI fetch the WAV and check it against its content id', async () => {
    const output = path.join(work, `${via.replace(/\W+/g, '-')}.wav`);
    const result = await runCli(['fetch', media.url('/tone.wav'), '-o', output], base());
    expect(result.code, result.output).toBe(EXIT.ok);
    expect(result.output).toContain('SHA-256 matches the content id');
    expect(sha256(await readFile(output))).toBe(done.result!.content_id);
  });
});
