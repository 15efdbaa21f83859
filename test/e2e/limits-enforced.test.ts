import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeNotAudio, makeTone, type MediaFixture } from '../support/media.js';
import { drainedOrClosed, startMediaServer, type MediaServer } from '../support/media-server.js';
import { processesMatching } from '../support/processes.js';
import { startService, type ServiceHandle } from '../support/service.js';
import { workLeftovers } from '../support/work-folder.js';

/**
 * Every limit of the service, each with its problem+json or job error: request body and URL
 * length, download size (while downloading), audio duration, wall-clock time per job, queued
 * jobs, requests per key, playlists, and downloads that are not audio.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const MAX_BYTES = 300_000;

let media: MediaServer;
let big: MediaFixture; // 30 s stereo WAV, ~5.3 MB

beforeAll(async () => {
  big = await makeTone(FIXTURE_DIR, { seconds: 30, channels: 2, sampleRate: 44100, format: 'wav' });
  media = await startMediaServer();
});
afterAll(async () => {
  await media?.close();
});

interface Problem {
  type: string;
  status: number;
  code: string;
  detail: string;
}

async function problem(res: Response, status: number, code: string): Promise<Problem> {
  expect(res.status).toBe(status);
  expect(res.headers.get('content-type')).toBe('application/problem+json');
  const body = (await res.json()) as Problem;
  expect(body).toMatchObject({ status, code, type: `urn:source-fetch:problem:${code}` });
  return body;
}

/**
 * Streams `bytes` in 16 KiB chunks every 40 ms (~400 KB/s), with or without Content-Length,
 * and counts what it really wrote before the client went away.
 */
function countingRoute(bytes: Buffer, withLength: boolean) {
  const state = { sent: 0, closed: false };
  const handler = async (_req: unknown, res: ServerResponse) => {
    const headers: Record<string, string | number> = { 'content-type': 'audio/wav' };
    if (withLength) headers['content-length'] = bytes.length;
    res.writeHead(200, headers);
    res.on('close', () => (state.closed = true));
    for (let pos = 0; pos < bytes.length && !res.destroyed; pos += 16 * 1024) {
      const chunk = bytes.subarray(pos, pos + 16 * 1024);
      if (!res.write(chunk)) await drainedOrClosed(res);
      if (res.destroyed) break;
      state.sent += chunk.length;
      await sleep(40);
    }
    res.end();
  };
  return { state, handler };
}

describe('request and job limits (MAX_DOWNLOAD_BYTES, MAX_DURATION_S)', () => {
  let svc: ServiceHandle;
  beforeAll(async () => {
    svc = await startService({
      env: { FETCH_ALLOW_HOSTS: media.hostPort, MAX_DOWNLOAD_BYTES: String(MAX_BYTES), MAX_DURATION_S: '5' },
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  const post = (body: string) =>
    svc.request('/sources', { method: 'POST', headers: { 'content-type': 'application/json' }, body });

  it('takes a body of exactly 8 KiB and answers 413 body_too_large for one byte more', async () => {
    const json = JSON.stringify({ url: media.url('/body-limit.wav') });
    const exact = json.slice(0, -1) + ' '.repeat(8192 - Buffer.byteLength(json)) + '}';
    expect(Buffer.byteLength(exact)).toBe(8192);
    expect((await post(exact)).status).toBe(202);
    const over = json.slice(0, -1) + ' '.repeat(8193 - Buffer.byteLength(json)) + '}';
    await problem(await post(over), 413, 'body_too_large');
  });

  it('takes a URL of 2048 characters and answers 400 for 2049, or for one that serialises longer', async () => {
    const base = media.url('/u?pad=');
    const exact = base + 'a'.repeat(2048 - base.length);
    expect(exact.length).toBe(2048);
    expect((await post(JSON.stringify({ url: exact }))).status).toBe(202);
    await problem(await post(JSON.stringify({ url: `${exact}b` })), 400, 'url_too_long');
    // 2048 characters as written, but spaces become %20 when the URL is serialised.
    const spaced = base + ' '.repeat(10) + 'a'.repeat(2048 - base.length - 10);
    expect(spaced.length).toBe(2048);
    await problem(await post(JSON.stringify({ url: spaced })), 400, 'url_too_long');
  });

  it('cuts a chunked download (no Content-Length) once it passes MAX_DOWNLOAD_BYTES: file_too_large', async () => {
    const bytes = await readFile(big.path);
    const route = countingRoute(bytes, false);
    media.route('/chunked.wav', route.handler);
    const job = await svc.waitForJob((await svc.submit(media.url('/chunked.wav'))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error).toEqual({
      code: 'file_too_large',
      message: `The download is larger than the limit of ${MAX_BYTES} bytes.`,
      detail: null,
      http_status: null,
    });
    // The download was stopped while under way, not checked after: the origin sent a fraction.
    for (let i = 0; i < 200 && !route.state.closed; i++) await sleep(50);
    expect(route.state.closed).toBe(true);
    expect(route.state.sent).toBeGreaterThan(MAX_BYTES);
    expect(route.state.sent).toBeLessThan(bytes.length / 4);
    expect(await workLeftovers(svc.dataDir)).toEqual([]);
  });

  it('refuses an announced size over MAX_DOWNLOAD_BYTES before downloading it: file_too_large', async () => {
    const bytes = await readFile(big.path);
    const route = countingRoute(bytes, true);
    media.route('/announced.wav', route.handler);
    const job = await svc.waitForJob((await svc.submit(media.url('/announced.wav'))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error?.code).toBe('file_too_large');
    for (let i = 0; i < 200 && !route.state.closed; i++) await sleep(50);
    expect(route.state.sent).toBeLessThan(bytes.length / 4);
  });

  it('fails audio longer than MAX_DURATION_S with duration_exceeded', async () => {
    // 10 s of 64 kb/s MP3: ~80 KB, well under the byte cap.
    const tone = await makeTone(FIXTURE_DIR, { seconds: 10, channels: 1, sampleRate: 22050, format: 'mp3' });
    media.serveFile('/ten-seconds.mp3', tone.path, { contentType: 'audio/mpeg' });
    const job = await svc.waitForJob((await svc.submit(media.url('/ten-seconds.mp3'))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error).toMatchObject({
      code: 'duration_exceeded',
      message: 'The media lasts longer than the limit of 5 s.',
      http_status: null,
    });
  });

  it('stores audio within both limits', async () => {
    const tone = await makeTone(FIXTURE_DIR, { seconds: 3, channels: 1, sampleRate: 22050, format: 'mp3' });
    media.serveFile('/three-seconds.mp3', tone.path, { contentType: 'audio/mpeg' });
    const job = await svc.waitForJob((await svc.submit(media.url('/three-seconds.mp3'))).job_id, ['done', 'failed']);
    expect(job.error).toBeNull();
    expect(job.status).toBe('done');
  });

  it('refuses a playlist with playlist_not_supported, downloading none of its items', async () => {
    const tone = await makeTone(FIXTURE_DIR, { seconds: 3, channels: 1, sampleRate: 22050, format: 'mp3' });
    media.serveFile('/item-a.mp3', tone.path, { contentType: 'audio/mpeg' });
    media.serveFile('/item-b.mp3', tone.path, { contentType: 'audio/mpeg' });
    media.route('/two-items.html', (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<html><body><audio src="item-a.mp3"></audio><audio src="item-b.mp3"></audio></body></html>');
    });
    const job = await svc.waitForJob((await svc.submit(media.url('/two-items.html'))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error?.code).toBe('playlist_not_supported');
    expect(media.requestsFor('/item-a.mp3').filter((r) => r.method === 'GET')).toEqual([]);
    expect(media.requestsFor('/item-b.mp3').filter((r) => r.method === 'GET')).toEqual([]);
  });

  it('fails a PNG served as audio with not_audio, storing nothing', async () => {
    const png = await makeNotAudio(FIXTURE_DIR, 'png');
    media.serveFile('/picture.mp3', png.path, { contentType: 'audio/mpeg' });
    const job = await svc.waitForJob((await svc.submit(media.url('/picture.mp3'))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error).toEqual({
      code: 'not_audio',
      message: 'The downloaded file holds no audio the converter can read.',
      // ffmpeg's own words (a PNG is "not on whitelist" of its input formats).
      detail: expect.stringMatching(/whitelist|Invalid data found when processing input|matches no streams/),
      http_status: null,
    });
    expect(job.error!.detail).not.toMatch(/\/tmp\/|sf-data-|\/work\//);
    expect(job.result).toBeNull();
  });
});

describe('MAX_QUEUED_JOBS and FETCH_TIMEOUT_S', () => {
  let svc: ServiceHandle;
  beforeAll(async () => {
    svc = await startService({
      env: { FETCH_ALLOW_HOSTS: media.hostPort, WORKER_CONCURRENCY: '1', MAX_QUEUED_JOBS: '2', FETCH_TIMEOUT_S: '3' },
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('answers 429 queue_full with Retry-After past the queue cap, and times the running job out with fetch_timeout', async () => {
    // ~5.3 MB at 32 KiB/s: far longer than the 3 s timeout.
    media.serveFile('/timeout.wav', big.path, { contentType: 'audio/wav', throttleBytesPerSec: 32 * 1024 });
    const slow = await svc.submit(media.url('/timeout.wav'));
    const started = Date.now();
    await svc.waitForJob(slow.job_id, ['running'], 10_000);

    const queued = [await svc.submit(media.url('/q1.wav')), await svc.submit(media.url('/q2.wav'))];
    expect(queued.map((j) => j.status)).toEqual(['queued', 'queued']);
    const res = await svc.request('/sources', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ url: media.url('/q3.wav') }),
    });
    await problem(res, 429, 'queue_full');
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    // Canceling queued work makes room again.
    for (const job of queued)
      expect((await svc.request(`/jobs/${job.job_id}/cancel`, { method: 'POST' })).status).toBe(200);

    const timedOut = await svc.waitForJob(slow.job_id, ['done', 'failed'], 20_000);
    expect(timedOut.status).toBe('failed');
    // The origin answered, and sends slowly: the job's time limit, not an origin that never answered.
    expect(timedOut.error).toEqual({
      code: 'fetch_timeout',
      message: 'The fetch took longer than 3 s and was stopped.',
      detail: null,
      http_status: null,
    });
    expect(Date.now() - started).toBeLessThan(12_000);
    // Its tools were killed and its folder removed.
    const settle = Date.now() + 5_000;
    while ((await processesMatching(slow.job_id)).length > 0 && Date.now() < settle) await sleep(100);
    expect(await processesMatching(slow.job_id)).toEqual([]);
    expect(await workLeftovers(svc.dataDir)).toEqual([]);
    expect((await svc.submit(media.url('/q4.wav'))).status).toMatch(/queued|running/);
  });
});

describe('per-key request rate limit', () => {
  let svc: ServiceHandle;
  const other = randomBytes(24).toString('base64url');
  beforeAll(async () => {
    const key = randomBytes(24).toString('base64url');
    svc = await startService({
      apiKey: key,
      env: { API_KEYS: `${key},${other}`, RATE_LIMIT_PER_MINUTE: '60', RATE_LIMIT_BURST: '5' },
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('answers 429 rate_limited with Retry-After once a key spends its burst; other keys and the health check are not affected', async () => {
    for (let i = 0; i < 5; i++) expect((await svc.request('/jobs/nope')).status).toBe(404);
    const limited = await svc.request('/jobs/nope');
    await problem(limited, 429, 'rate_limited');
    expect(limited.headers.get('retry-after')).toBe('1');
    // Every keyed route counts against the same bucket.
    expect(
      (await svc.request('/sources', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }))
        .status,
    ).toBe(429);
    // Another valid key has its own bucket.
    expect((await svc.request('/jobs/nope', { headers: { authorization: `Bearer ${other}` } })).status).toBe(404);
    // The health check is exempt, with or without a key.
    for (let i = 0; i < 10; i++) {
      expect((await svc.request('/healthz')).status).not.toBe(429);
      expect((await svc.request('/healthz', { auth: false })).status).not.toBe(429);
    }
    // Requests without a valid key are refused by authentication, not counted against a bucket.
    expect((await svc.request('/jobs/nope', { headers: { authorization: 'Bearer wrong-key-wrong-key' } })).status).toBe(
      401,
    );
    // The bucket refills: one token a second.
    await sleep(1100);
    expect((await svc.request('/jobs/nope')).status).toBe(404);
    // No key, nor its digest's input, is logged.
    expect(svc.output()).not.toContain(svc.apiKey);
    expect(svc.output()).not.toContain(other);
  });
});
