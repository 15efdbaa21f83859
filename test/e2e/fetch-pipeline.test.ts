import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProcess } from '../../src/tools/process.js';
import { parseWavHeader } from '../../src/tools/wav.js';
import { generateMediaFixtures, type MediaFixture, type MediaFixtureName } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type ServiceHandle } from '../support/service.js';
import { workLeftovers } from '../support/work-folder.js';

/**
 * The fetch pipeline end to end: the real service, the real yt-dlp and ffmpeg, a media server
 * on 127.0.0.1 (allowed through FETCH_ALLOW_HOSTS) and a real SQLite file.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');

let media: MediaServer;
let svc: ServiceHandle;
let fixtures: Record<MediaFixtureName, MediaFixture>;

beforeAll(async () => {
  fixtures = await generateMediaFixtures(FIXTURE_DIR);
  media = await startMediaServer();
  for (const [name, fixture] of Object.entries(fixtures)) {
    media.serveFile(`/${name}${path.extname(fixture.path)}`, fixture.path, { contentType: fixture.contentType });
  }
  svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort } });
});

afterAll(async () => {
  await svc?.stop();
  await media?.close();
});

function storedPath(cid: string): string {
  return path.join(svc.dataDir, 'artifacts', cid.slice(0, 2), cid, 'audio.wav');
}

/** Every fixture, with the channel count its WAV must have (5.1 is downmixed to stereo). */
const cases: Array<{ name: MediaFixtureName; channels: number }> = [
  { name: 'opus_webm', channels: 2 },
  { name: 'aac_m4a', channels: 2 },
  { name: 'mp3_mono', channels: 1 },
  { name: 'flac_mono', channels: 1 },
  { name: 'wav_mono_22k', channels: 1 },
  { name: 'flac_51', channels: 2 },
  { name: 'aac_mono_48k', channels: 1 },
  { name: 'mp3_stereo_22k', channels: 2 },
];

describe('the fixture table', () => {
  it('covers every fixture, and 48 kHz and 22.05 kHz each in mono and stereo', async () => {
    expect(cases.map((c) => c.name).sort()).toEqual(Object.keys(fixtures).sort());
    const shapes = new Set<string>();
    for (const { name } of cases) {
      // What the file really holds, not only what was asked for.
      const probe = await runProcess({
        command: 'ffprobe',
        args: [
          '-v',
          'error',
          '-select_streams',
          'a:0',
          '-show_entries',
          'stream=sample_rate,channels',
          '-of',
          'json',
          fixtures[name].path,
        ],
        timeoutMs: 20_000,
        stdoutCaptureBytes: 64 * 1024,
      });
      expect(probe.exitCode, `${name}: ${probe.stderrTail}`).toBe(0);
      const [stream] = (JSON.parse(probe.stdout) as { streams: Array<{ sample_rate: string; channels: number }> })
        .streams;
      expect({ sampleRate: Number(stream!.sample_rate), channels: stream!.channels }, name).toEqual({
        sampleRate: fixtures[name].sampleRate,
        channels: fixtures[name].channels,
      });
      shapes.add(`${stream!.sample_rate}/${stream!.channels}`);
    }
    for (const shape of ['48000/1', '48000/2', '22050/1', '22050/2']) expect(shapes, shape).toContain(shape);
  });
});

describe('a submitted URL becomes a stored 44.1 kHz WAV', () => {
  it.each(cases)(
    '$name → PCM 16-bit 44.1 kHz, $channels channel(s), content id = SHA-256',
    async ({ name, channels }) => {
      const fixture = fixtures[name];
      const url = media.url(`/${name}${path.extname(fixture.path)}`);
      const submitted = await svc.submit(url);
      expect(Object.keys(submitted)[0]).toBe('job_id');
      expect(['queued', 'running']).toContain(submitted.status);

      const job = await svc.waitForJob(submitted.job_id, ['done', 'failed']);
      expect(job.error).toBeNull();
      expect(job.status).toBe('done');
      expect(job.born_done).toBe(false);
      const cid = job.result!.content_id;
      expect(cid).toMatch(/^[0-9a-f]{64}$/);

      const bytes = await readFile(storedPath(cid));
      expect(createHash('sha256').update(bytes).digest('hex')).toBe(cid);
      const header = parseWavHeader(bytes);
      expect(header).toMatchObject({ audioFormat: 1, sampleRate: 44100, bitsPerSample: 16, channels });
      expect(header.durationS).toBeGreaterThan(fixture.durationS - 0.1);
      expect(header.durationS).toBeLessThan(fixture.durationS + 0.2);

      const [artifact] = job.result!.artifacts;
      expect(artifact).toMatchObject({
        name: 'audio.wav',
        path: `/artifacts/${cid}/audio.wav`,
        bytes: bytes.length,
        content_type: 'audio/wav',
        sample_rate: 44100,
        channels,
      });
      expect(artifact!.duration).toBeCloseTo(header.durationS, 3);
    },
  );

  it('a URL already stored gives a job born done, and nothing is downloaded again', async () => {
    const url = media.url('/aac_m4a.m4a');
    const first = await svc.waitForJob((await svc.submit(url)).job_id, ['done', 'failed']);
    expect(first.status).toBe('done');
    const seen = media.requestsFor('/aac_m4a.m4a').length;

    const again = await svc.submit(url);
    expect(again.status).toBe('done');
    expect(again.born_done).toBe(true);
    expect(again.result!.content_id).toBe(first.result!.content_id);
    expect(media.requestsFor('/aac_m4a.m4a').length).toBe(seen);
  });

  it('every other spelling of a stored URL is born done, with no media request', async () => {
    // Stored once under a URL with a query; the origin ignores the query, the alias key does not.
    const port = media.hostPort.split(':')[1]!;
    const stored = await svc.waitForJob((await svc.submit(media.url('/aac_m4a.m4a?a=1&b=2'))).job_id, [
      'done',
      'failed',
    ]);
    expect(stored.status).toBe('done');
    const cid = stored.result!.content_id;
    const plain = await svc.waitForJob((await svc.submit(media.url('/aac_m4a.m4a'))).job_id, ['done', 'failed']);
    expect(plain.result!.content_id).toBe(cid);
    const requestsBefore = media.requests.length;

    const respellings = [
      // scheme in upper case
      `HTTP://${media.hostPort}/aac_m4a.m4a?a=1&b=2`,
      // the host spelled otherwise (hex with an upper-case X, decimal, short form, trailing dot), mixed-case scheme
      `HtTp://0X7F.0.0.1:${port}/aac_m4a.m4a?a=1&b=2`,
      `http://2130706433:${port}/aac_m4a.m4a?a=1&b=2`,
      `http://127.1:${port}/aac_m4a.m4a?a=1&b=2`,
      `http://127.0.0.1.:${port}/aac_m4a.m4a?a=1&b=2`,
      // the port with a leading zero
      `http://127.0.0.1:0${port}/aac_m4a.m4a?a=1&b=2`,
      // query parameters reordered, empty parameters
      `http://${media.hostPort}/aac_m4a.m4a?b=2&a=1`,
      `http://${media.hostPort}/aac_m4a.m4a?&b=2&&a=1&`,
      // a fragment
      `http://${media.hostPort}/aac_m4a.m4a?a=1&b=2#t=3`,
      // all at once
      `HTTP://0X7F.1:0${port}/aac_m4a.m4a?b=2&&a=1#t=3`,
      // the URL without a query: an empty ? and a fragment
      `http://${media.hostPort}/aac_m4a.m4a?`,
      `HTTP://127.0.0.1.:${port}/aac_m4a.m4a?#start`,
    ];
    for (const url of respellings) {
      const job = await svc.submit(url);
      expect({ url, status: job.status, born_done: job.born_done, cid: job.result?.content_id }).toEqual({
        url,
        status: 'done',
        born_done: true,
        cid,
      });
    }
    expect(media.requests.slice(requestsBefore)).toEqual([]);

    // The path is case-sensitive, and a parameter's value counts: not the same URL, so not born done.
    for (const other of [media.url('/AAC_M4A.m4a?a=1&b=2'), media.url('/aac_m4a.m4a?a=1&b=3')]) {
      const job = await svc.submit(other);
      expect({ other, born_done: job.born_done }).toEqual({ other, born_done: false });
      await svc.waitForJob(job.job_id, ['done', 'failed']);
    }
    expect(media.requests.length).toBeGreaterThan(requestsBefore);
  });

  it('concurrent submissions of one URL download once and all end done with the same content', async () => {
    const fixture = fixtures.flac_mono;
    media.serveFile('/concurrent.flac', fixture.path, {
      contentType: fixture.contentType,
      throttleBytesPerSec: 256 * 1024,
    });
    media.serveFile('/single.flac', fixture.path, { contentType: fixture.contentType });
    const single = await svc.waitForJob((await svc.submit(media.url('/single.flac'))).job_id, ['done', 'failed']);
    const requestsForOneFetch = media.requestsFor('/single.flac').length;

    const url = media.url('/concurrent.flac');
    const submitted = await Promise.all([svc.submit(url), svc.submit(url), svc.submit(url)]);
    const jobs = await Promise.all(submitted.map((job) => svc.waitForJob(job.job_id, ['done', 'failed'])));
    expect(new Set(jobs.map((job) => job.job_id)).size).toBe(3);
    for (const job of jobs) {
      expect(job.status).toBe('done');
      expect(job.result!.content_id).toBe(single.result!.content_id);
    }
    expect(media.requestsFor('/concurrent.flac').length).toBe(requestsForOneFetch);
  });

  it('identical audio from another URL reuses the stored file', async () => {
    const fixture = fixtures.mp3_mono;
    media.serveFile('/copy-of-mp3.mp3', fixture.path, { contentType: fixture.contentType });
    const original = await svc.waitForJob((await svc.submit(media.url('/mp3_mono.mp3'))).job_id, ['done']);
    const copy = await svc.waitForJob((await svc.submit(media.url('/copy-of-mp3.mp3'))).job_id, ['done']);
    expect(copy.born_done).toBe(false);
    expect(copy.result!.content_id).toBe(original.result!.content_id);
  });

  it('a page without media fails with not_media, and nothing is stored', async () => {
    media.route('/page.html', (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' }).end('<html><body>no media here</body></html>');
    });
    const job = await svc.waitForJob((await svc.submit(media.url('/page.html'))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error!.code).toBe('not_media');
    expect(job.error!.detail).not.toMatch(/\/tmp\/|\/work\/|sf-data-/);
  });

  it("an HTTP error at the origin fails the job with its code and status, the downloader's words free of server paths", async () => {
    const job = await svc.waitForJob((await svc.submit(media.url('/missing.mp3'))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error).toMatchObject({
      code: 'http_not_found',
      message: 'Nothing was found at the source (HTTP 404).',
      http_status: 404,
    });
    expect(job.error!.detail).toMatch(/HTTP Error 404/);
    expect(job.error!.detail).not.toContain(svc.dataDir);
  });

  it('leaves no working folders behind', async () => {
    expect(await workLeftovers(svc.dataDir)).toEqual([]);
  });
});
