import { readdir, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { processesMatching } from '../support/processes.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import { workLeftovers } from '../support/work-folder.js';

/** Cancel, restart recovery (on both databases) and a missing downloader, with the real service and tools. */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');

let media: MediaServer;
let long: MediaFixture;

beforeAll(async () => {
  long = await makeTone(FIXTURE_DIR, { seconds: 30, channels: 2, sampleRate: 44100, format: 'wav' });
  media = await startMediaServer();
});

afterAll(async () => {
  await media?.close();
});

async function contentDirs(dataDir: string): Promise<string[]> {
  const root = path.join(dataDir, 'artifacts');
  const shards = (await readdir(root).catch(() => [] as string[])).filter((entry) => /^[0-9a-f]{2}$/.test(entry));
  const all = await Promise.all(shards.map((shard) => readdir(path.join(root, shard))));
  return all.flat();
}

/** A running job's progress with a known size: bytes done of the total, and the percent they make. */
function expectProgress(job: JobBody, size: number) {
  const progress = job.progress!;
  expect(progress, JSON.stringify(job)).not.toBeNull();
  expect(progress.bytes_done).toBeGreaterThan(0);
  expect(progress.bytes_done).toBeLessThanOrEqual(size);
  expect(progress.bytes_total).toBe(size);
  expect(progress.percent).toEqual(expect.any(Number));
  expect(progress.percent!).toBeGreaterThanOrEqual(0);
  expect(progress.percent!).toBeLessThanOrEqual(100);
  // Rounded to a tenth of a percent.
  expect(Math.abs(progress.percent! - (progress.bytes_done / size) * 100)).toBeLessThanOrEqual(0.05 + 1e-9);
}

/** Polls until the job runs and has downloaded something (or 30 s pass); returns the last record. */
async function runningWithProgress(svc: ServiceHandle, jobId: string): Promise<JobBody> {
  const deadline = Date.now() + 30_000;
  let job = await svc.getJob(jobId);
  while (!(job.status === 'running' && (job.progress?.bytes_done ?? 0) > 0) && Date.now() < deadline) {
    await sleep(100);
    job = await svc.getJob(jobId);
  }
  return job;
}

describe.each(BACKENDS)('cancelJob on %s', (kind) => {
  let svc: ServiceHandle;
  beforeAll(async () => {
    svc = await startService({ env: { ...(await serviceEnv(kind)), FETCH_ALLOW_HOSTS: media.hostPort } });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('kills a throttled download and every process it started, removes its folder, stores nothing', async () => {
    // ~5.3 MB at 128 KiB/s: about 40 s, far longer than the test waits.
    media.serveFile(`/${kind}/slow-cancel.wav`, long.path, {
      contentType: 'audio/wav',
      throttleBytesPerSec: 128 * 1024,
    });
    const submitted = await svc.submit(media.url(`/${kind}/slow-cancel.wav`));
    const running = await runningWithProgress(svc, submitted.job_id);
    expect(running.status).toBe('running');
    const size = (await stat(long.path)).size;
    expectProgress(running, size);
    // Progress moves on while the download runs (written past each quarter and with every lease renewal).
    let later = running;
    const deadline = Date.now() + 10_000;
    while (
      later.status === 'running' &&
      later.progress!.bytes_done <= running.progress!.bytes_done &&
      Date.now() < deadline
    ) {
      await sleep(100);
      later = await svc.getJob(submitted.job_id);
    }
    expect(later.status).toBe('running');
    expectProgress(later, size);
    expect(later.progress!.bytes_done).toBeGreaterThan(running.progress!.bytes_done);
    expect(later.progress!.percent!).toBeGreaterThanOrEqual(running.progress!.percent!);
    expect((await processesMatching(submitted.job_id)).length).toBeGreaterThan(0);

    const res = await svc.request(`/jobs/${submitted.job_id}/cancel`, { method: 'POST' });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { status: string }).status).toBe('canceled');

    const settle = Date.now() + 10_000;
    while ((await processesMatching(submitted.job_id)).length > 0 && Date.now() < settle) await sleep(100);
    expect(await processesMatching(submitted.job_id)).toEqual([]);
    while ((await workLeftovers(svc.dataDir)).length > 0 && Date.now() < settle) await sleep(100);
    expect(await workLeftovers(svc.dataDir)).toEqual([]);
    expect(await contentDirs(svc.dataDir)).toEqual([]);
    expect((await svc.getJob(submitted.job_id)).status).toBe('canceled');

    // Canceling again answers the same record; an unknown id is 404.
    const again = await svc.request(`/jobs/${submitted.job_id}/cancel`, { method: 'POST' });
    expect(again.status).toBe(200);
    expect(((await again.json()) as { status: string }).status).toBe('canceled');
    const unknown = await svc.request('/jobs/no-such-job/cancel', { method: 'POST' });
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { code: string }).code).toBe('job_not_found');
  });

  it('cancels a queued job at once, and refuses to cancel a finished one (done or failed) with 409', async () => {
    const short = await makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'flac' });
    media.serveFile(`/${kind}/short-done.flac`, short.path, { contentType: 'audio/flac' });
    const done = await svc.waitForJob((await svc.submit(media.url(`/${kind}/short-done.flac`))).job_id, [
      'done',
      'failed',
    ]);
    expect(done.status).toBe('done');
    const conflict = await svc.request(`/jobs/${done.job_id}/cancel`, { method: 'POST' });
    expect(conflict.status).toBe(409);
    expect(conflict.headers.get('content-type')).toContain('application/problem+json');
    expect(((await conflict.json()) as { code: string }).code).toBe('job_already_finished');
    expect((await svc.getJob(done.job_id)).status).toBe('done');

    // A failed job cannot be canceled either: 409 job_already_finished, and it stays failed.
    const failed = await svc.waitForJob((await svc.submit(media.url(`/${kind}/no-such-file.wav`))).job_id, [
      'done',
      'failed',
    ]);
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatchObject({ code: 'http_not_found', http_status: 404 });
    const failedConflict = await svc.request(`/jobs/${failed.job_id}/cancel`, { method: 'POST' });
    expect(failedConflict.status).toBe(409);
    expect(failedConflict.headers.get('content-type')).toContain('application/problem+json');
    expect(await failedConflict.json()).toMatchObject({ status: 409, code: 'job_already_finished' });
    const still = await svc.getJob(failed.job_id);
    expect(still.status).toBe('failed');
    expect(still.error).toEqual(failed.error);
  });

  it('a download of unannounced size shows bytes_done, with bytes_total and percent null', async () => {
    // Chunked transfer: no Content-Length, so neither yt-dlp nor the job knows the size.
    media.serveFile(`/${kind}/slow-unknown.wav`, long.path, {
      contentType: 'audio/wav',
      throttleBytesPerSec: 128 * 1024,
      unknownLength: true,
    });
    const submitted = await svc.submit(media.url(`/${kind}/slow-unknown.wav`));
    const running = await runningWithProgress(svc, submitted.job_id);
    expect(running.status).toBe('running');
    expect(running.progress).toEqual({ bytes_done: expect.any(Number), bytes_total: null, percent: null });
    expect(running.progress!.bytes_done).toBeGreaterThan(0);
    const res = await svc.request(`/jobs/${submitted.job_id}/cancel`, { method: 'POST' });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { status: string }).status).toBe('canceled');
  });
});

describe.each(BACKENDS)('restart on %s', (kind) => {
  it('takes back the job a crash left running once its lease runs out, finishes it, and leaves no temporary files', async () => {
    const dataDir = path.join(tmpdir(), `sf-restart-${kind}-${process.pid}-${Date.now()}`);
    media.serveFile(`/${kind}/restart.wav`, long.path, { contentType: 'audio/wav', throttleBytesPerSec: 1024 * 1024 });
    const env = { ...(await serviceEnv(kind)), FETCH_ALLOW_HOSTS: media.hostPort, JOB_LEASE_S: '3' };
    const first = await startService({ dataDir, env });
    const submitted = await first.submit(media.url(`/${kind}/restart.wav`));
    // Mid-download (bytes arrived, 5 s of throttled transfer left), the tools must be running when the crash comes.
    const running = await runningWithProgress(first, submitted.job_id);
    expect(running.status, JSON.stringify(running)).toBe('running');
    expect(
      (await processesMatching(submitted.job_id)).length,
      JSON.stringify(await first.getJob(submitted.job_id)),
    ).toBeGreaterThan(0);
    await first.kill();

    const second = await startService({ dataDir, apiKey: first.apiKey, env });
    try {
      const job = await second.waitForJob(submitted.job_id, ['done', 'failed'], 90_000);
      expect(job.status).toBe('done');
      expect(job.attempts).toBe(2);
      // Start-up itself touched no job; the lease ran out and the worker pool took the job back.
      expect(second.logs.find((line) => line.msg === 'took back jobs whose lease ran out')).toMatchObject({
        requeued: 1,
      });
      // Tools the crash orphaned are gone (killed at start-up if they had not died of the broken pipe).
      expect(await processesMatching(`${submitted.job_id}.1`)).toEqual([]);
      expect(await workLeftovers(dataDir)).toEqual([]);
      expect(await readdir(path.join(dataDir, 'artifacts', '.incoming')).catch(() => [])).toEqual([]);
    } finally {
      await second.stop();
    }
    if (kind === 'sqlite') {
      const db = new Database(path.join(dataDir, 'source-fetch.sqlite'), { readonly: true });
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      db.close();
    }
  });
});

describe('a missing downloader', () => {
  it('makes health 503 and fails jobs at once with downloader_missing', async () => {
    const svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, YTDLP_PATH: '/nonexistent/yt-dlp' } });
    try {
      const health = await svc.request('/healthz', { auth: false });
      expect(health.status).toBe(503);
      const body = (await health.json()) as { can_fetch: boolean; downloader: { present: boolean } };
      expect(body.can_fetch).toBe(false);
      expect(body.downloader.present).toBe(false);

      media.serveFile('/nodownloader.wav', long.path, { contentType: 'audio/wav' });
      const job = await svc.waitForJob(
        (await svc.submit(media.url('/nodownloader.wav'))).job_id,
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
      expect(media.requestsFor('/nodownloader.wav')).toEqual([]);
    } finally {
      await svc.stop();
    }
  });

  it('with the real tools present, health is 200 and names their versions', async () => {
    const svc = await startService();
    try {
      const health = await svc.request('/healthz', { auth: false });
      expect(health.status).toBe(200);
      const body = (await health.json()) as Record<
        string,
        { present?: boolean; version?: string; writable?: boolean; ok?: boolean }
      >;
      expect(body.downloader).toMatchObject({ present: true, version: expect.stringMatching(/^\d{4}\.\d{2}\.\d{2}/) });
      expect(body.ffmpeg).toMatchObject({ present: true, version: expect.stringContaining('ffmpeg') });
      expect(body.database).toEqual({ ok: true, kind: 'sqlite' });
      expect(body.node_id).toMatch(/-\d+-[0-9a-f]{6}$/);
      expect(body.artifact_root).toMatchObject({ writable: true });
    } finally {
      await svc.stop();
    }
  });
});
