/**
 * The whole path as its users meet it, with nothing in a test harness's place: the built
 * service (dist/main.js, `npm start`) fetches a URL with the real yt-dlp and ffmpeg, then a real
 * browser plays the job's signed URL, once through a real nginx rendering nginx/templates
 * (X-Accel-Redirect) and once from the service's own fallback. Paths that try to climb out of
 * the artifact root aim at what really sits next to it in DATA_DIR: the SQLite file, and the
 * API key and signing secret the service generated there.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchBrowser, playFromMiddle, startPlayerPages } from '../support/browser.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { SHARED_URL_SIGNING_SECRET, type RunningNginx } from '../support/nginx.js';
import { startServiceBehindNginx } from '../support/behind-nginx.js';
import { rawRequest } from '../support/raw-http.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';

const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const SECONDS = 20;

interface Deployment {
  svc: ServiceHandle;
  /** Where clients talk to: nginx's port, or the service's own. */
  origin: string;
  port: number;
  /**
   * Status and Range of each artifact request, from the front server's own log, once `ready`
   * holds for them: both write their line after the answer has gone out.
   */
  artifactRequests(ready: (requests: ArtifactRequest[]) => boolean): Promise<ArtifactRequest[]>;
}

interface ArtifactRequest {
  status: number;
  range: string;
}

async function waitForLines<T>(read: () => T[], ready: (lines: T[]) => boolean, timeoutMs = 5000): Promise<T[]> {
  const deadline = Date.now() + timeoutMs;
  for (let lines = read(); ; lines = read()) {
    if (ready(lines)) return lines;
    if (Date.now() >= deadline)
      throw new Error(`the log did not reach the expected lines within ${timeoutMs} ms:\n${JSON.stringify(lines)}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

let media: MediaServer;
let browser: Browser;
let pages: Awaited<ReturnType<typeof startPlayerPages>>;
let nginx: RunningNginx;
const deployments = {} as Record<'nginx' | 'fallback', Deployment>;

beforeAll(async () => {
  media = await startMediaServer();
  const tone = await makeTone(FIXTURE_DIR, { seconds: SECONDS, channels: 2, sampleRate: 48000, format: 'm4a' });
  media.serveFile('/journey.m4a', tone.path, { contentType: 'audio/mp4' });

  const behindNginx = await startServiceBehindNginx({ apiKey: null, env: { FETCH_ALLOW_HOSTS: media.hostPort } });
  const accel = behindNginx.svc;
  nginx = behindNginx.nginx;
  deployments.nginx = {
    svc: accel,
    origin: nginx.url(''),
    port: nginx.port,
    artifactRequests: async (ready) => {
      const asRequest = (entry: Record<string, string>): ArtifactRequest => ({
        status: Number(entry.status),
        range: entry.range ?? '',
      });
      const lines = await nginx.accessLines(
        (entry) => entry.route === '/artifacts/{cid}/{name}',
        (entries) => ready(entries.map(asRequest)),
        10_000,
      );
      return lines.map(asRequest);
    },
  };
  const fallback = await startService({ apiKey: null, env: { FETCH_ALLOW_HOSTS: media.hostPort } });
  deployments.fallback = {
    svc: fallback,
    origin: fallback.baseUrl,
    port: fallback.port,
    // The service logs the status, not the request's headers: a 206 is a Range it answered.
    artifactRequests: (ready) =>
      waitForLines(
        () =>
          fallback.logs
            .filter((line) => line.msg === 'request' && line.route === '/artifacts/{cid}/{name}')
            .map((line) => ({ status: Number(line.status), range: '' })),
        ready,
        10_000,
      ),
  };

  pages = await startPlayerPages();
  browser = await launchBrowser();
});

afterAll(async () => {
  await browser?.close();
  await pages?.close();
  await nginx?.stop();
  await deployments.nginx?.svc.stop();
  await deployments.fallback?.svc.stop();
  await media?.close();
});

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

describe.each(['nginx', 'fallback'] as const)('submit, poll, then play in a browser, through %s', (mode) => {
  let job: JobBody;
  const deployment = () => deployments[mode];

  it('a submitted URL through the front server ends done with a 44.1 kHz WAV whose SHA-256 is its content id', async () => {
    const { svc, origin } = deployment();
    const auth = { authorization: `Bearer ${svc.apiKey}` };
    const submitted = await fetch(`${origin}/sources`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ url: media.url('/journey.m4a') }),
    });
    expect(submitted.status).toBe(202);
    const { job_id } = (await submitted.json()) as { job_id: string };
    expect(submitted.headers.get('location')).toBe(`/jobs/${job_id}`);
    const deadline = Date.now() + 60_000;
    do {
      job = (await (await fetch(`${origin}/jobs/${job_id}`, { headers: auth })).json()) as JobBody;
      if (job.status === 'done' || job.status === 'failed') break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    } while (Date.now() < deadline);
    expect(job.status, JSON.stringify(job.error)).toBe('done');
    const artifact = job.result!.artifacts[0]!;
    expect(artifact).toMatchObject({ name: 'audio.wav', content_type: 'audio/wav', sample_rate: 44100, channels: 2 });
    expect(Math.abs(artifact.duration! - SECONDS)).toBeLessThan(0.1);

    const whole = await fetch(origin + artifact.signed_url);
    expect(whole.status).toBe(200);
    const bytes = new Uint8Array(await whole.arrayBuffer());
    expect(bytes.length).toBe(artifact.bytes);
    expect(sha256(bytes)).toBe(job.result!.content_id);
    expect(whole.headers.get('content-type')).toBe('audio/wav');
    expect(whole.headers.get('etag')).toBe(`"${job.result!.content_id}"`);
    // A signed answer may be cached by anyone, until the signature expires.
    expect(whole.headers.get('cache-control')).toBe('public, immutable');
    const expires = Number(new URL(artifact.signed_url, origin).searchParams.get('expires'));
    expect(Date.parse(whole.headers.get('expires') ?? '')).toBe(expires * 1000);
    expect(whole.headers.get('x-accel-redirect')).toBeNull();

    const again = await fetch(origin + artifact.signed_url, {
      headers: { 'if-none-match': `"${job.result!.content_id}"` },
    });
    expect(again.status).toBe(304);
    const tampered = artifact.signed_url.replace(
      /sig=([^&])/,
      (_m, first: string) => `sig=${first === 'A' ? 'B' : 'A'}`,
    );
    const refused = await fetch(origin + tampered);
    expect(refused.status).toBe(403);
    expect(refused.headers.get('content-type')).toContain('application/problem+json');
  });

  it('the browser loads the signed URL, finds the WAV duration, seeks to the middle and plays from there', async () => {
    expect(job?.status).toBe('done');
    const { origin } = deployment();
    const src = origin + job.result!.artifacts[0]!.signed_url;
    const before = (await deployment().artifactRequests(() => true)).length;
    const result = await playFromMiddle(browser, pages, src);
    expect(Math.abs(result.duration - SECONDS)).toBeLessThan(0.1);
    expect(result.reached).toBeGreaterThan(result.middle + 0.5);
    expect(result.reached).toBeLessThan(result.middle + 10);
    // The browser asked for parts of the file, and got them as 206; through nginx, whose log
    // carries the Range, one of them starts inside the file (the seek).
    const seeked = (r: ArtifactRequest) =>
      r.status === 206 && (mode === 'fallback' || /^bytes=[1-9]\d*-/.test(r.range));
    const requests = (await deployment().artifactRequests((all) => all.slice(before).some(seeked))).slice(before);
    expect(requests.filter(seeked).length).toBeGreaterThan(0);
  });

  it('paths that climb out of the artifact root never reach the database or the API key beside it', async () => {
    const { svc, port } = deployment();
    // Given to the app behind nginx (nginx checks signed URLs with it); generated by the other.
    const signingSecret =
      mode === 'nginx'
        ? SHARED_URL_SIGNING_SECRET
        : (await readFile(path.join(svc.dataDir, 'url-signing-secret'), 'utf8')).trim();
    const cid = job.result!.content_id;
    const targets = [
      '/artifacts/../source-fetch.sqlite',
      '/artifacts/%2e%2e/source-fetch.sqlite',
      `/artifacts/${cid}/..%2f..%2f..%2f..%2fsource-fetch.sqlite`,
      `/artifacts/${cid}/%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fsource-fetch.sqlite`,
      `/artifacts/${cid}/%252e%252e%252f%252e%252e%252fsource-fetch.sqlite`,
      `/artifacts/${cid}/..%5c..%5c..%5c..%5capi-key`,
      `/artifacts/${cid}/%2fetc%2fpasswd`,
      `/artifacts/${cid}/audio.wav%00.txt`,
      `/artifacts/..%2f..%2f..%2f/api-key`,
      `/artifacts/${cid}/../../../../source-fetch.sqlite`,
      '/_artifacts/../source-fetch.sqlite',
      '/_artifacts/%2e%2e/api-key',
      `/artifacts/${cid}/..%2f..%2f..%2f..%2furl-signing-secret`,
    ];
    for (const target of targets) {
      const res = await rawRequest(port, 'GET', target, { authorization: `Bearer ${svc.apiKey}` });
      expect(res.status, target).toBeGreaterThanOrEqual(400);
      expect(res.status, target).toBeLessThan(500);
      expect(res.raw.includes('SQLite format 3'), target).toBe(false);
      expect(res.raw.includes(svc.apiKey), target).toBe(false);
      expect(res.raw.includes(signingSecret), target).toBe(false);
      expect(res.raw.includes('root:'), target).toBe(false);
    }
  });
});
