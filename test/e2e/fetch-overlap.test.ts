import { createHash } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConvertArgs } from '../../src/tools/ffmpeg.js';
import { runProcess } from '../../src/tools/process.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer, type ServeFileOptions } from '../support/media-server.js';
import { processesMatching } from '../support/processes.js';
import { startService, type ServiceHandle } from '../support/service.js';
import { storedFiles } from '../support/store-inspect.js';
import { until } from '../support/until.js';

/**
 * The conversion alongside the download (src/jobs/fetch/convert-while-downloading.ts), end to end:
 * the real service, yt-dlp and ffmpeg in their sandbox, a media server on 127.0.0.1. A streamable
 * download (mp3) is converted as it arrives, an m4a once whole, both to the bytes ffmpeg itself
 * gives the file; a download that fails stops ffmpeg, a conversion that fails stops the download,
 * and a cancel stops both; none leaves a file behind.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const MAX_BYTES = 400 * 1024;

let media: MediaServer;
let svc: ServiceHandle;
let mp3: string;
let m4a: string;
let scratch: string;

beforeAll(async () => {
  mp3 = (await makeTone(FIXTURE_DIR, { seconds: 20, channels: 2, sampleRate: 44100, format: 'mp3' })).path;
  m4a = (await makeTone(FIXTURE_DIR, { seconds: 20, channels: 2, sampleRate: 48000, format: 'm4a' })).path;
  scratch = await mkdtemp(path.join(tmpdir(), 'sf-overlap-'));
  media = await startMediaServer();
  // Each job starts its own ffmpeg (the one started before the job has its tests below).
  svc = await startService({
    env: { FETCH_ALLOW_HOSTS: media.hostPort, MAX_DOWNLOAD_BYTES: String(MAX_BYTES), CONVERTER_WAITING: 'off' },
  });
});

afterAll(async () => {
  await svc?.stop();
  await media?.close();
  await rm(scratch, { recursive: true, force: true });
});

/** The job's 'fetch steps' line, logged once its end is recorded. */
function stepsOf(jobId: string, service = svc) {
  return until('the job\'s "fetch steps" line', () =>
    service.logs.find((line) => line.msg === 'fetch steps' && line.job_id === jobId),
  );
}

/** Serves `file` at `route` and fetches it: the job, which must end done, and its 'fetch steps' line. */
async function fetchedDone(route: string, file: string, served: ServeFileOptions, service = svc) {
  media.serveFile(route, file, served);
  const submitted = await service.submit(media.url(route));
  const job = await service.waitForJob(submitted.job_id, ['done', 'failed']);
  expect(job.status, JSON.stringify(job.error)).toBe('done');
  return { job, steps: await stepsOf(submitted.job_id, service) };
}

/** What ffmpeg itself makes of the file, with the service's arguments, unconfined. */
async function ffmpegSha256(file: string): Promise<string> {
  const out = path.join(scratch, `${path.basename(file)}.${Date.now()}.wav`);
  const run = await runProcess({
    command: 'ffmpeg',
    args: buildConvertArgs({ input: file, output: out, maxDurationS: 10_800, maxAllocBytes: 1024 ** 3 }),
    timeoutMs: 60_000,
  });
  expect(run.exitCode, run.stderrTail).toBe(0);
  return createHash('sha256')
    .update(await readFile(out))
    .digest('hex');
}

async function expectNothingLeft(jobId: string) {
  expect(await readdir(path.join(svc.dataDir, 'work'))).toEqual([]);
  expect(await readdir(path.join(svc.dataDir, 'artifacts', '.incoming')).catch(() => [])).toEqual([]);
  expect(await processesMatching(jobId)).toEqual([]);
}

describe('conversion alongside the download', () => {
  it('converts an mp3 as it arrives, to the bytes ffmpeg gives the whole file', async () => {
    // Throttled: the download lasts about a second, so the conversion really runs beside it.
    const { job, steps } = await fetchedDone('/tone.mp3', mp3, {
      contentType: 'audio/mpeg',
      throttleBytesPerSec: 256 * 1024,
    });
    // ffmpeg was started before the download, waiting for it; the profile's parts of the download step.
    expect(steps.during_download).toMatchObject({
      converter_input: 'stream',
      converter_start: 'before_download',
      conversion_during_download_ms: expect.any(Number),
      converter_ready_ms: expect.any(Number),
      feed_wait_ms: expect.any(Number),
      request_ms: expect.any(Number),
      downloader_exit_ms: expect.any(Number),
    });
    expect(job.result!.content_id).toBe(await ffmpegSha256(mp3));
    await expectNothingLeft(job.job_id);
  });

  it('converts a download the FIFO holds whole, written before ffmpeg has opened its end (a 1-second FLAC)', async () => {
    const flac = (await makeTone(FIXTURE_DIR, { seconds: 1, channels: 1, sampleRate: 44100, format: 'flac' })).path;
    // Named as an m4a, so ffmpeg is started only once the first bytes say FLAC: by then the
    // whole second has been written.
    const { job, steps } = await fetchedDone('/short-flac.m4a', flac, { contentType: 'audio/flac' });
    expect(steps.during_download).toMatchObject({ converter_input: 'stream', converter_start: 'at_first_bytes' });
    expect(job.result!.content_id).toBe(await ffmpegSha256(flac));
    await expectNothingLeft(job.job_id);
  });

  // Named as an m4a, no ffmpeg is started before the download; under another name, the one
  // started then is stopped unfed.
  it.each([
    { route: '/tone.m4a', start: 'none' },
    { route: '/tone-without-extension', start: 'before_download' },
  ])(
    'converts an m4a once it is whole (its index may be at its end), to the bytes ffmpeg gives it: $route',
    async ({ route, start }) => {
      const { job, steps } = await fetchedDone(route, m4a, {
        contentType: 'audio/mp4',
        throttleBytesPerSec: 256 * 1024,
      });
      expect(steps.during_download).toMatchObject({ converter_input: 'whole', converter_start: start });
      expect(steps.during_download).not.toHaveProperty('conversion_during_download_ms');
      expect(steps.during_download).not.toHaveProperty('feed_wait_ms');
      expect(job.result!.content_id).toBe(await ffmpegSha256(m4a));
      await expectNothingLeft(job.job_id);
    },
  );

  it('a download that fails mid-way (past MAX_DOWNLOAD_BYTES) stops ffmpeg: file_too_large, nothing stored', async () => {
    const before = await storedFiles(path.join(svc.dataDir, 'artifacts'));
    // A long mp3, chunked (no size announced), so the limit is found while downloading and converting.
    const long = (await makeTone(FIXTURE_DIR, { seconds: 120, channels: 2, sampleRate: 44100, format: 'mp3' })).path;
    media.serveFile('/long.mp3', long, {
      contentType: 'audio/mpeg',
      throttleBytesPerSec: 512 * 1024,
      unknownLength: true,
    });
    const submitted = await svc.submit(media.url('/long.mp3'));
    const job = await svc.waitForJob(submitted.job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error).toEqual({
      code: 'file_too_large',
      message: `The download is larger than the limit of ${MAX_BYTES} bytes.`,
      detail: null,
      http_status: null,
    });
    // ffmpeg was running on it when the download failed.
    expect((await stepsOf(submitted.job_id)).during_download).toMatchObject({
      converter_input: 'stream',
      conversion_during_download_ms: expect.any(Number),
    });
    expect(await storedFiles(path.join(svc.dataDir, 'artifacts'))).toEqual(before);
    await expectNothingLeft(submitted.job_id);
  });

  it('a conversion that fails (not audio behind a WebM header) stops the download: not_audio, nothing stored', async () => {
    const before = await storedFiles(path.join(svc.dataDir, 'artifacts'));
    // An EBML header, then text: ffmpeg refuses it from its first bytes, while 10 s of it remain to send.
    const bogus = Buffer.concat([
      Buffer.from([0x1a, 0x45, 0xdf, 0xa3]),
      Buffer.from('this is not audio at all\n'.repeat(12_000)),
    ]);
    // Each response's state; the last is the download's (the extraction reads the start first).
    const responses: Array<{ sent: number; ended: boolean; closed: boolean }> = [];
    media.route('/bogus.webm', (_req, res) => {
      const state = { sent: 0, ended: false, closed: false };
      responses.push(state);
      res.writeHead(200, { 'content-type': 'video/webm', 'content-length': String(bogus.length) });
      res.on('close', () => (state.closed = true));
      const timer = setInterval(() => {
        if (res.destroyed) return clearInterval(timer);
        const chunk = bogus.subarray(state.sent, state.sent + 3000);
        state.sent += chunk.length;
        res.write(chunk);
        if (state.sent >= bogus.length) {
          clearInterval(timer);
          state.ended = true;
          res.end();
        }
      }, 100);
    });
    const submitted = await svc.submit(media.url('/bogus.webm'));
    const job = await svc.waitForJob(submitted.job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error).toMatchObject({ code: 'not_audio' });
    expect((await stepsOf(submitted.job_id)).during_download).toMatchObject({ converter_input: 'stream' });
    // The download was stopped: the origin saw its client go before it had sent everything.
    const download = responses.at(-1)!;
    expect(responses.length).toBeGreaterThan(1);
    await until('the origin to see its client go', () => (download.closed ? true : undefined));
    expect(download.ended).toBe(false);
    expect(download.sent).toBeLessThan(bogus.length);
    expect(await storedFiles(path.join(svc.dataDir, 'artifacts'))).toEqual(before);
    await expectNothingLeft(submitted.job_id);
  });

  it('a cancel while both run stops both and leaves nothing', async () => {
    const before = await storedFiles(path.join(svc.dataDir, 'artifacts'));
    media.serveFile('/slow.mp3', mp3, { contentType: 'audio/mpeg', throttleBytesPerSec: 32 * 1024 });
    const submitted = await svc.submit(media.url('/slow.mp3'));
    // ffmpeg runs on the feed while yt-dlp downloads.
    await until(
      'ffmpeg converting the download as it arrives',
      async () => {
        const pids = await processesMatching(`${submitted.job_id}.1/feed`);
        const job = await svc.getJob(submitted.job_id);
        return pids.length > 0 && (job.progress?.bytes_done ?? 0) > 0 ? true : undefined;
      },
      60_000,
    );
    const res = await svc.request(`/jobs/${submitted.job_id}/cancel`, { method: 'POST' });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { status: string }).status).toBe('canceled');
    await until("the job's tools and folder to be gone", async () =>
      (await processesMatching(submitted.job_id)).length === 0 &&
      (await readdir(path.join(svc.dataDir, 'work'))).length === 0
        ? true
        : undefined,
    );
    expect((await svc.getJob(submitted.job_id)).status).toBe('canceled');
    expect(await storedFiles(path.join(svc.dataDir, 'artifacts'))).toEqual(before);
    await expectNothingLeft(submitted.job_id);
  });
});

describe('the converter started before the job (CONVERTER_WAITING=on)', () => {
  let waitingSvc: ServiceHandle;
  const work = () => path.join(waitingSvc.dataDir, 'work');

  /** The waiting converter's folder, once there is one and its ffmpeg runs in it. */
  async function waitingFolder(other?: string): Promise<string> {
    return until(
      'a converter waiting for the next job',
      async () => {
        const [folder, ...more] = (await readdir(work())).filter((name) => name.startsWith('converter.'));
        if (folder === undefined || more.length > 0 || folder === other) return undefined;
        return (await processesMatching(`${folder}/feed`)).length > 0 ? folder : undefined;
      },
      60_000,
    );
  }

  beforeAll(async () => {
    waitingSvc = await startService({
      // Its own data folder, kept after it stops: what its shutdown left is looked at.
      dataDir: await mkdtemp(path.join(tmpdir(), 'sf-waiting-')),
      env: { FETCH_ALLOW_HOSTS: media.hostPort, MAX_DOWNLOAD_BYTES: String(MAX_BYTES), CONVERTER_WAITING: 'on' },
    });
  });

  afterAll(async () => {
    await waitingSvc?.stop();
    if (waitingSvc) await rm(waitingSvc.dataDir, { recursive: true, force: true });
  });

  it('the first job starts its own; the next takes the one started after it, to the same bytes', async () => {
    const served = { contentType: 'audio/mpeg', throttleBytesPerSec: 256 * 1024 };
    const first = await fetchedDone('/waiting-first.mp3', mp3, served, waitingSvc);
    expect(first.steps.during_download).toMatchObject({ converter_start: 'before_download' });
    const folder = await waitingFolder();

    const tone = (await makeTone(FIXTURE_DIR, { seconds: 12, channels: 2, sampleRate: 44100, format: 'mp3' })).path;
    const second = await fetchedDone('/waiting-second.mp3', tone, served, waitingSvc);
    expect(second.steps.during_download).toMatchObject({
      converter_input: 'stream',
      converter_start: 'before_job',
      converter_ready_ms: expect.any(Number),
    });
    expect(second.job.result!.content_id).toBe(await ffmpegSha256(tone));
    // The one it took is gone with the job; another waits for the next.
    const next = await waitingFolder(folder);
    expect(await readdir(work())).toEqual([next]);
    expect(await processesMatching(folder)).toEqual([]);
    expect(await processesMatching(second.job.job_id)).toEqual([]);
  });

  it('an m4a leaves it waiting; a cancel stops the one the job took; shutdown stops the last', async () => {
    const folder = await waitingFolder();
    const m4aJob = await fetchedDone('/waiting.m4a', m4a, { contentType: 'audio/mp4' }, waitingSvc);
    expect(m4aJob.steps.during_download).toMatchObject({ converter_input: 'whole', converter_start: 'none' });
    expect(await readdir(work())).toEqual([folder]);

    media.serveFile('/waiting-slow.mp3', mp3, { contentType: 'audio/mpeg', throttleBytesPerSec: 32 * 1024 });
    const submitted = await waitingSvc.submit(media.url('/waiting-slow.mp3'));
    await until(
      'the waiting ffmpeg converting the download as it arrives',
      async () => ((await waitingSvc.getJob(submitted.job_id)).progress?.bytes_done ?? 0) > 0 || undefined,
      60_000,
    );
    expect((await processesMatching(`${folder}/feed`)).length).toBeGreaterThan(0);
    const res = await waitingSvc.request(`/jobs/${submitted.job_id}/cancel`, { method: 'POST' });
    expect(res.status).toBe(200);
    const next = await waitingFolder(folder);
    await until("the canceled job's tools and folders to be gone", async () =>
      (await processesMatching(folder)).length === 0 &&
      (await processesMatching(submitted.job_id)).length === 0 &&
      (await readdir(work())).join() === next
        ? true
        : undefined,
    );
    expect((await waitingSvc.getJob(submitted.job_id)).status).toBe('canceled');

    expect(await waitingSvc.stop()).toBe(0);
    expect(await processesMatching(next)).toEqual([]);
    expect(await readdir(work())).toEqual([]);
  });

  it("a node killed with its converter waiting: the next node's start-up removes its folder", async () => {
    const dataDir = waitingSvc.dataDir;
    const env = { FETCH_ALLOW_HOSTS: media.hostPort, CONVERTER_WAITING: 'on' };
    const crashed = await startService({ dataDir, env });
    try {
      await fetchedDone('/waiting-crash.mp3', mp3, { contentType: 'audio/mpeg' }, crashed);
      const folder = await waitingFolder();
      await crashed.kill();
      const next = await startService({ dataDir, apiKey: crashed.apiKey, env: { ...env, CONVERTER_WAITING: 'off' } });
      try {
        expect(await readdir(work())).toEqual([]);
        expect(await processesMatching(folder)).toEqual([]);
      } finally {
        await next.stop();
      }
    } finally {
      await crashed.stop();
    }
  });
});
