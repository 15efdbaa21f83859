import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeFailingFfmpeg, writeFailingYtDlp, writeNotExecutable } from '../support/fake-tools.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { workLeftovers } from '../support/work-folder.js';

/**
 * Faults of the external tools and of their input: a downloader that is missing or not
 * executable, yt-dlp or ffmpeg exiting non-zero, and damaged media. Each job fails with a stable
 * code and a message free of server paths and proxy credentials, and nothing hangs.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');

let media: MediaServer;
let toolDir: string;

beforeAll(async () => {
  media = await startMediaServer();
  toolDir = await mkdtemp(path.join(tmpdir(), 'sf-fake-tools-'));
  const tone = await makeTone(FIXTURE_DIR, { seconds: 3, channels: 1, sampleRate: 22050, format: 'mp3' });
  media.serveFile('/tone.mp3', tone.path, { contentType: 'audio/mpeg' });
});
afterAll(async () => {
  await media?.close();
});

/** No server path, no data dir, no proxy credentials, in the sentence nor in the tool's words. */
function expectCleanMessage(job: JobBody, svc: ServiceHandle) {
  expect(job.error!.message.length).toBeGreaterThan(0);
  expect(job.error!.detail?.length ?? 0).toBeLessThanOrEqual(500);
  const message = `${job.error!.message}\n${job.error!.detail ?? ''}`;
  expect(message).not.toContain(svc.dataDir);
  expect(message).not.toMatch(/\/tmp\/|\/work\/|sf-data-|sf-fake-tools-|\.py"/);
  expect(message).not.toMatch(/@127\.0\.0\.1|:\/\/[^/\s]*:[^/\s]*@/);
  expect(message).not.toMatch(/\n\s+at /);
}

describe('no prober', () => {
  it('jobs never run ffprobe (the conversion tells what is not audio), and health names none', async () => {
    // An ffprobe first on PATH that records every call: had the service or yt-dlp run one by name, it would be this.
    const proberDir = path.join(toolDir, 'prober');
    const calls = path.join(proberDir, 'calls.log');
    await mkdir(proberDir, { recursive: true });
    await writeFile(calls, '');
    await writeFile(path.join(proberDir, 'ffprobe'), `#!/bin/sh\nprintf '%s\\n' "$*" >> '${calls}'\nexit 1\n`, {
      mode: 0o755,
    });
    const svc = await startService({
      env: {
        FETCH_ALLOW_HOSTS: media.hostPort,
        PATH: `${proberDir}:${process.env.PATH ?? '/usr/bin:/bin'}`,
        TOOL_MOUNT_VIEW: 'off',
      },
    });
    try {
      const health = await svc.request('/healthz', { auth: false });
      expect(health.status).toBe(200);
      const report = (await health.json()) as Record<string, unknown>;
      expect(report).toMatchObject({ can_fetch: true, ffmpeg: { present: true } });
      expect(report).not.toHaveProperty('ffprobe');
      const job = await svc.waitForJob(
        (await svc.submit(media.url('/tone.mp3?noprobe'))).job_id,
        ['done', 'failed'],
        30_000,
      );
      expect(job.error).toBeNull();
      expect(job.status).toBe('done');
      expect(await readFile(calls, 'utf8')).toBe('');
    } finally {
      await svc.stop();
    }
  });
});

describe('the downloader missing or not executable', () => {
  it('a file without the execute bit: health 503, jobs fail at once with downloader_missing', async () => {
    const noExec = await writeNotExecutable(path.join(toolDir, 'noexec'));
    const svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, YTDLP_PATH: noExec } });
    try {
      const health = await svc.request('/healthz', { auth: false });
      expect(health.status).toBe(503);
      expect(((await health.json()) as { downloader: { present: boolean } }).downloader.present).toBe(false);
      const started = Date.now();
      const job = await svc.waitForJob(
        (await svc.submit(media.url('/tone.mp3?noexec'))).job_id,
        ['done', 'failed'],
        10_000,
      );
      expect(job.status).toBe('failed');
      expect(job.error).toEqual({
        code: 'downloader_missing',
        message: 'The downloader (yt-dlp) is not installed or not executable.',
        detail: null,
        http_status: null,
      });
      expectCleanMessage(job, svc);
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(media.requests.filter((r) => r.path.includes('noexec'))).toEqual([]);
      expect(await workLeftovers(svc.dataDir)).toEqual([]);
    } finally {
      await svc.stop();
    }
  });
});

describe('tools that exit non-zero', () => {
  it('yt-dlp failing: download_failed, its error line as the detail, and neither paths nor proxy credentials', async () => {
    const ytdlp = await writeFailingYtDlp(path.join(toolDir, 'yt'));
    const svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, YTDLP_PATH: ytdlp } });
    try {
      const job = await svc.waitForJob(
        (await svc.submit(media.url('/tone.mp3?ytfail'))).job_id,
        ['done', 'failed'],
        20_000,
      );
      expect(job.status).toBe('failed');
      expect(job.error!.code).toBe('download_failed');
      expect(job.error!.message).toBe('The downloader could not get the media.');
      expect(job.error!.detail).toContain('ERROR: [generic] Unable to download webpage');
      expect(job.error!.detail).not.toContain('WARNING');
      expectCleanMessage(job, svc);
      // Nor in the logs: the proxy URL with its token is never logged.
      expect(svc.output()).not.toMatch(/http:\/\/[^/\s"]+:[^/\s"]+@127\.0\.0\.1/);
    } finally {
      await svc.stop();
    }
  });

  it("ffmpeg failing: conversion_failed, ffmpeg's cleaned words as the detail, nothing stored", async () => {
    const ffmpeg = await writeFailingFfmpeg(path.join(toolDir, 'ff'));
    const svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, FFMPEG_PATH: ffmpeg } });
    try {
      const job = await svc.waitForJob(
        (await svc.submit(media.url('/tone.mp3?fffail'))).job_id,
        ['done', 'failed'],
        20_000,
      );
      expect(job.status).toBe('failed');
      expect(job.error!.code).toBe('conversion_failed');
      expect(job.error!.message).toBe('The conversion to WAV failed.');
      expect(job.error!.detail).toMatch(/Header missing|Conversion failed/);
      expectCleanMessage(job, svc);
      expect(job.result).toBeNull();
      expect(await readdir(path.join(svc.dataDir, 'artifacts')).catch(() => [])).not.toContainEqual(
        expect.stringMatching(/^[0-9a-f]{2}$/),
      );
    } finally {
      await svc.stop();
    }
  });
});

describe('damaged media served with an audio content type', () => {
  let svc: ServiceHandle;
  beforeAll(async () => {
    svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort } });
    const dir = await mkdtemp(path.join(tmpdir(), 'sf-corrupt-'));
    const m4a = await makeTone(FIXTURE_DIR, { seconds: 3, channels: 2, sampleRate: 48000, format: 'm4a' });
    const whole = await readFile(m4a.path);
    // Cut in half: the MP4 index (moov, at the end) is lost.
    await writeFile(path.join(dir, 'cut.m4a'), whole.subarray(0, whole.length >> 1));
    // Index first (faststart), then cut: the file opens, but its audio stops half-way.
    const faststart = path.join(dir, 'faststart.m4a');
    execFileSync('ffmpeg', [
      '-nostdin',
      '-loglevel',
      'error',
      '-y',
      '-i',
      m4a.path,
      '-c',
      'copy',
      '-movflags',
      '+faststart',
      faststart,
    ]);
    const fs = await readFile(faststart);
    await writeFile(path.join(dir, 'cut-faststart.m4a'), fs.subarray(0, fs.length >> 1));
    await writeFile(path.join(dir, 'garbage.mp3'), randomBytes(64 * 1024));
    media.serveFile('/cut.m4a', path.join(dir, 'cut.m4a'), { contentType: 'audio/mp4' });
    media.serveFile('/cut-faststart.m4a', path.join(dir, 'cut-faststart.m4a'), { contentType: 'audio/mp4' });
    media.serveFile('/garbage.mp3', path.join(dir, 'garbage.mp3'), { contentType: 'audio/mpeg' });
    media.route('/server-error.mp3', (_req, res) => {
      res.writeHead(500, { 'content-type': 'text/plain' }).end('boom');
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it.each([
    ['/garbage.mp3', 'not_audio'],
    ['/cut.m4a', 'not_audio'],
    ['/cut-faststart.m4a', 'media_corrupt'],
    ['/server-error.mp3', 'http_server_error'],
  ])('%s fails with %s and a cleaned message', async (urlPath, code) => {
    const job = await svc.waitForJob((await svc.submit(media.url(urlPath))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error!.code).toBe(code);
    expectCleanMessage(job, svc);
    expect(job.result).toBeNull();
  });

  it('leaves no working folder and stores nothing', async () => {
    expect(await workLeftovers(svc.dataDir)).toEqual([]);
    const shards = (await readdir(path.join(svc.dataDir, 'artifacts'))).filter((e) => /^[0-9a-f]{2}$/.test(e));
    expect(shards).toEqual([]);
  });
});
