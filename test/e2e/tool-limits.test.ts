import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { constants as zlibConstants, createBrotliCompress, createGzip } from 'node:zlib';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProcess } from '../../src/tools/process.js';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type ServiceHandle } from '../support/service.js';
import { workLeftovers } from '../support/work-folder.js';

/**
 * Hostile media against the ceilings the sandbox sets on every tool run (TOOL_MEMORY_BYTES,
 * MAX_OUTPUT_BYTES, DOWNLOAD_STALL_S, METADATA_TIMEOUT_S), through the public API with the real
 * yt-dlp and ffmpeg. The bombs are scaled to the test's ceilings; each row has a control, a normal
 * file of the same kind that still ends done. The tools' peak memory is read from /proc while they
 * run (VmHWM of every process working in the service's data dir).
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const MIB = 1024 * 1024;
const TOOL_MEMORY_BYTES = 256 * MIB;
const MAX_OUTPUT_BYTES = 8 * MIB;

let media: MediaServer;
let tone: MediaFixture;
let toneM4a: MediaFixture;
let toneFlac: MediaFixture;
let gzipBomb: Buffer;
let brotliBomb: Buffer;
let sampleTableBomb: Buffer;
let flacBomb: string;
let svc: ServiceHandle;

/**
 * An HTML page of `bytes` spaces, then `tail`, compressed (gzip or brotli) in pieces: the test
 * never holds the inflated page.
 */
async function compressedPage(bytes: number, encoding: 'gzip' | 'br', tail = ''): Promise<Buffer> {
  const gzip =
    encoding === 'gzip'
      ? createGzip({ level: 9 })
      : createBrotliCompress({ params: { [zlibConstants.BROTLI_PARAM_QUALITY]: 5 } });
  const chunks: Buffer[] = [];
  gzip.on('data', (chunk: Buffer) => chunks.push(chunk));
  gzip.write('<!doctype html>\n<html><head><title>page</title></head><body>\n');
  const piece = Buffer.alloc(MIB, ' ');
  for (let written = 0; written < bytes; written += piece.length) {
    if (!gzip.write(piece)) await new Promise((resolve) => gzip.once('drain', resolve));
  }
  const ended = once(gzip, 'end');
  gzip.end(tail);
  await ended;
  return Buffer.concat(chunks);
}

/**
 * An m4a whose sample table claims 85 million samples of one byte in one chunk: ffmpeg's MP4
 * demuxer builds an index entry per sample while opening it (2 GiB without a ceiling).
 */
function withHugeSampleTable(m4a: Buffer): Buffer {
  const bomb = Buffer.from(m4a);
  const stsz = bomb.indexOf('stsz');
  const stsc = bomb.indexOf('stsc');
  bomb.writeUInt32BE(1, stsz + 8); // every sample 1 byte
  bomb.writeUInt32BE(85_000_000, stsz + 12); // sample count
  bomb.writeUInt32BE(85_000_000, stsc + 16); // samples in the first chunk
  return bomb;
}

/** Peak resident memory (VmHWM, bytes) of any process whose command line names `needle`, sampled until `done` settles. */
async function peakMemoryWhile<T>(needle: string, done: Promise<T>): Promise<{ result: T; peakBytes: number }> {
  let peakBytes = 0;
  let finished = false;
  const result = done.finally(() => (finished = true));
  while (!finished) {
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
      if (!cmdline.includes(needle)) continue;
      const status = await readFile(`/proc/${entry}/status`, 'utf8').catch(() => '');
      const hwm = /^VmHWM:\s+(\d+) kB/m.exec(status);
      if (hwm) peakBytes = Math.max(peakBytes, Number(hwm[1]) * 1024);
    }
    await Promise.race([result, sleep(20)]);
  }
  return { result: await result, peakBytes };
}

const workDirOf = (s: ServiceHandle) => path.join(s.dataDir, 'work');

async function fetchJob(url: string) {
  const submitted = await svc.submit(url);
  return peakMemoryWhile(workDirOf(svc), svc.waitForJob(submitted.job_id, ['done', 'failed'], 90_000));
}

/**
 * fetchJob for a URL that fails, submitted again (up to 5 times) until the sampler has seen its
 * tool run: a run that fails within tens of milliseconds can end between two of the sampler's
 * passes over /proc, which take longer on a loaded machine (the sample-table bomb at load 13, the
 * brotli bomb beside another suite).
 */
async function fetchFailingJobSeen(url: string) {
  for (let attempt = 1; ; attempt++) {
    const fetched = await fetchJob(url);
    if (fetched.peakBytes > 0 || fetched.result.status !== 'failed' || attempt === 5) return fetched;
  }
}

beforeAll(async () => {
  tone = await makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'mp3' });
  toneM4a = await makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'm4a' });
  toneFlac = await makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'flac' });
  // Silence compresses to almost nothing in FLAC: 60 s of stereo is a 10.6 MB WAV.
  flacBomb = path.join(FIXTURE_DIR, 'silence-60s.flac');
  const made = await runProcess({
    command: 'ffmpeg',
    args: [
      '-nostdin',
      '-loglevel',
      'error',
      '-y',
      '-f',
      'lavfi',
      '-i',
      'anullsrc=r=44100:cl=stereo',
      '-t',
      '60',
      '-c:a',
      'flac',
      flacBomb,
    ],
  });
  expect(made.exitCode).toBe(0);
  gzipBomb = await compressedPage(384 * MIB, 'gzip');
  brotliBomb = await compressedPage(384 * MIB, 'br');
  sampleTableBomb = withHugeSampleTable(await readFile(toneM4a.path));
  media = await startMediaServer();
  media.serveFile('/tone.mp3', tone.path, { contentType: 'audio/mpeg' });
  media.serveFile('/tone.m4a', toneM4a.path, { contentType: 'audio/mp4' });
  media.serveFile('/tone.flac', toneFlac.path, { contentType: 'audio/flac' });
  media.serveFile('/silence.flac', flacBomb, { contentType: 'audio/flac' });
  const page =
    (body: Buffer, headers: Record<string, string> = {}) =>
    (_req: IncomingMessage, res: ServerResponse) => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-length': body.length, ...headers });
      res.end(body);
    };
  media.route('/bomb.html', page(gzipBomb, { 'content-encoding': 'gzip' }));
  media.route('/brotli-bomb.html', page(brotliBomb, { 'content-encoding': 'br' }));
  const audioTag = '<audio src="/tone.mp3"></audio></body></html>\n';
  media.route('/gzip-page.html', page(await compressedPage(MIB, 'gzip', audioTag), { 'content-encoding': 'gzip' }));
  media.route('/brotli-page.html', page(await compressedPage(MIB, 'br', audioTag), { 'content-encoding': 'br' }));
  const bombFile = path.join(FIXTURE_DIR, 'sample-table-bomb.m4a');
  await writeFile(bombFile, sampleTableBomb);
  media.serveFile('/sample-table-bomb.m4a', bombFile, { contentType: 'audio/mp4' });

  svc = await startService({
    env: {
      FETCH_ALLOW_HOSTS: media.hostPort,
      TOOL_MEMORY_BYTES: String(TOOL_MEMORY_BYTES),
      MAX_OUTPUT_BYTES: String(MAX_OUTPUT_BYTES),
    },
  });
}, 180_000);

afterAll(async () => {
  await svc?.stop();
  await media?.close();
});

describe('memory: TOOL_MEMORY_BYTES, set by the sandbox', () => {
  it.each([
    ['gzip', '/bomb.html', () => gzipBomb],
    ['brotli', '/brotli-bomb.html', () => brotliBomb],
  ])(
    'a %s page that inflates to 384 MiB stops the downloader at its ceiling: memory_exceeded',
    async (_encoding, urlPath, body) => {
      expect(body().length).toBeLessThan(MIB);
      const { result: job, peakBytes } = await fetchFailingJobSeen(media.url(urlPath));
      expect(job.status).toBe('failed');
      expect(job.error).toEqual({
        code: 'memory_exceeded',
        message: 'The downloader needed more than its memory limit of 256 MiB and was stopped.',
        detail: null,
        http_status: null,
      });
      // The sampler saw the inflation grow (it would read 0 had it missed the run) and stop under the ceiling.
      expect(peakBytes).toBeGreaterThan(64 * MIB);
      expect(peakBytes).toBeLessThan(TOOL_MEMORY_BYTES + 64 * MIB);
      expect(media.requestsFor(urlPath).length).toBeGreaterThan(0);
    },
  );

  it.each(['/gzip-page.html', '/brotli-page.html'])(
    'control: %s, 1 MiB inflated, is read and the audio it names fetched',
    async (urlPath) => {
      const { result: job } = await fetchJob(media.url(urlPath));
      expect(job.error).toBeNull();
      expect(job.status).toBe('done');
    },
  );

  it('control: an mp3 ends done', async () => {
    const { result: job } = await fetchJob(media.url('/tone.mp3'));
    expect(job.error).toBeNull();
    expect(job.status).toBe('done');
  });

  it('an m4a whose sample table claims 85 million samples is refused within the ceiling; a normal m4a ends done', async () => {
    const { result: bomb, peakBytes } = await fetchFailingJobSeen(media.url('/sample-table-bomb.m4a'));
    expect(bomb.status).toBe('failed');
    // ffmpeg drops, silently, the index it may not allocate, and then finds no audio to decode.
    expect(bomb.error).toEqual({
      code: 'not_audio',
      message: 'The downloaded file holds no audio the converter can read.',
      detail: 'The converter wrote a WAV without samples.',
      http_status: null,
    });
    // 2 GiB without the ceiling and ffmpeg's -max_alloc.
    expect(peakBytes).toBeGreaterThan(0);
    expect(peakBytes).toBeLessThan(128 * MIB);
    const { result: control } = await fetchJob(media.url('/tone.m4a'));
    expect(control.error).toBeNull();
    expect(control.status).toBe('done');
  });
});

describe('output: MAX_OUTPUT_BYTES, set by the sandbox as the converter file size ceiling', () => {
  it('a FLAC of silence that decodes to a 10.6 MB WAV fails output_too_large, leaving nothing stored', async () => {
    const flacBytes = (await readFile(flacBomb)).length;
    expect(flacBytes * 50).toBeLessThan(MAX_OUTPUT_BYTES);
    const { result: job } = await fetchJob(media.url('/silence.flac'));
    expect(job.status).toBe('failed');
    expect(job.error).toEqual({
      code: 'output_too_large',
      message: `The WAV would be larger than the limit of ${MAX_OUTPUT_BYTES} bytes.`,
      detail: null,
      http_status: null,
    });
    expect(job.result).toBeNull();
    expect(await workLeftovers(svc.dataDir)).toEqual([]);
  });

  it('control: a FLAC of a tone ends done', async () => {
    const { result: job } = await fetchJob(media.url('/tone.flac'));
    expect(job.error).toBeNull();
    expect(job.status).toBe('done');
  });
});

/**
 * An origin that answers at once and then sends a byte every half second: with the default
 * FETCH_TIMEOUT_S it would hold a worker for 30 minutes. DOWNLOAD_STALL_S and METADATA_TIMEOUT_S
 * end such jobs early, and the worker they held takes the next job.
 */
describe('stalled transfers: DOWNLOAD_STALL_S, METADATA_TIMEOUT_S', () => {
  let slow: ServiceHandle;
  let steady: MediaFixture;
  const STALL_S = 2;
  const METADATA_S = 3;

  /** Sends `head` at once (with a Content-Length for more), then one byte every 500 ms until the client goes away. */
  function trickle(contentType: string, head: () => Buffer) {
    return async (_req: IncomingMessage, res: ServerResponse) => {
      const first = head();
      res.writeHead(200, { 'content-type': contentType, 'content-length': first.length + 1_000_000 });
      res.write(first);
      while (!res.destroyed) {
        await sleep(500);
        res.write(' ');
      }
    };
  }

  beforeAll(async () => {
    // 8 s of mp3 at 64 kbit/s (~64 KB), sent at 12 KB/s: some 5 s, over two stall windows (at 16 KB/s it
    // took 3.9 s, and the job's end came as late as 4 s only with the job's own time added), slow but
    // never stalled.
    steady = await makeTone(FIXTURE_DIR, { seconds: 8, channels: 1, sampleRate: 44100, format: 'mp3' });
    media.serveFile('/steady.mp3', steady.path, { contentType: 'audio/mpeg', throttleBytesPerSec: 12 * 1024 });
    const mp3 = await readFile(tone.path);
    media.route(
      '/trickle-a.mp3',
      trickle('audio/mpeg', () => mp3.subarray(0, 4096)),
    );
    media.route(
      '/trickle-b.mp3',
      trickle('audio/mpeg', () => mp3.subarray(0, 4096)),
    );
    media.route(
      '/trickle-page.html',
      trickle('text/html', () => Buffer.from('<!doctype html>\n<html><body>\n')),
    );
    slow = await startService({
      env: {
        FETCH_ALLOW_HOSTS: media.hostPort,
        WORKER_CONCURRENCY: '2',
        FETCH_TIMEOUT_S: '300',
        DOWNLOAD_STALL_S: String(STALL_S),
        DOWNLOAD_MIN_BYTES_PER_S: '1024',
        METADATA_TIMEOUT_S: String(METADATA_S),
      },
    });
  });
  afterAll(async () => {
    await slow?.stop();
  });

  it('two trickling downloads fail download_stalled within seconds, and the job queued behind them ends done', async () => {
    const started = Date.now();
    const a = await slow.submit(media.url('/trickle-a.mp3'));
    const b = await slow.submit(media.url('/trickle-b.mp3'));
    const honest = await slow.submit(media.url('/tone.mp3?behind-the-trickles'));
    const ends = await Promise.all([a, b].map((job) => slow.waitForJob(job.job_id, ['done', 'failed'], 60_000)));
    for (const ended of ends) {
      expect(ended.status).toBe('failed');
      // The origin answered, and goes on trickling: a stall, not an origin that never answered.
      expect(ended.error).toEqual({
        code: 'download_stalled',
        message: `The download gained fewer than ${STALL_S * 1024} bytes in ${STALL_S} s and was stopped.`,
        detail: null,
        http_status: null,
      });
    }
    const done = await slow.waitForJob(honest.job_id, ['done', 'failed'], 60_000);
    expect(done.status).toBe('done');
    // Far below FETCH_TIMEOUT_S (300 s): a stall window or two, and the tools' start.
    expect(Date.now() - started).toBeLessThan(30_000);
    // The trickles were really downloading: the origin saw yt-dlp's download requests.
    expect(media.requestsFor('/trickle-a.mp3').length).toBeGreaterThan(1);
  });

  it('a page that trickles fails metadata_timeout after METADATA_TIMEOUT_S', async () => {
    const started = Date.now();
    const job = await slow.waitForJob(
      (await slow.submit(media.url('/trickle-page.html'))).job_id,
      ['done', 'failed'],
      60_000,
    );
    expect(job.status).toBe('failed');
    expect(job.error).toEqual({
      code: 'metadata_timeout',
      message: `Reading the media's metadata took longer than ${METADATA_S} s and was stopped.`,
      detail: null,
      http_status: null,
    });
    expect(Date.now() - started).toBeGreaterThanOrEqual(METADATA_S * 1000);
    expect(Date.now() - started).toBeLessThan(30_000);
  });

  it('control: a download slower than the stall window but steady ends done', async () => {
    const started = Date.now();
    const job = await slow.waitForJob((await slow.submit(media.url('/steady.mp3'))).job_id, ['done', 'failed'], 60_000);
    expect(job.error).toBeNull();
    expect(job.status).toBe('done');
    // It took several stall windows.
    expect(Date.now() - started).toBeGreaterThan(2 * STALL_S * 1000);
  });
});

/**
 * The work volume (DATA_DIR/work, a tmpfs the test mounts) with less room than a job's WAV needs,
 * by less than ffmpeg's I/O buffer: ffmpeg exits 0 when it cannot write its trailer, and the WAV
 * it leaves is cut short with a header whose sizes are placeholders. Nothing of it may be stored.
 * Needs mount(2) (root, as CI runs); skipped with a message otherwise.
 */
describe('a full work volume: only complete WAVs are committed', () => {
  const WORK_BYTES = 1024 * 1024;
  let base: string;
  let work: string;
  let mounted = false;
  let mountError = '';
  let full: ServiceHandle | undefined;

  beforeAll(async () => {
    base = await mkdtemp(path.join(tmpdir(), 'sf-work-full-'));
    work = path.join(base, 'data', 'work');
    await mkdir(work, { recursive: true });
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${WORK_BYTES},mode=0755`, 'tmpfs', work], { stdio: 'pipe' });
      mounted = true;
    } catch (err) {
      mountError = String((err as { stderr?: Buffer }).stderr ?? err).trim();
    }
  });
  afterAll(async () => {
    await full?.stop();
    if (mounted) execFileSync('umount', ['-l', work]);
    if (base) await rm(base, { recursive: true, force: true });
  });

  it('a WAV cut short by the full volume fails storage_full, nothing stored; with room again the same URL ends done', async (ctx) => {
    if (!mounted) ctx.skip(`cannot mount a tmpfs here (needs root): ${mountError}`);
    const download = (await readFile(tone.path)).length;
    // 2 s of mono at 44.1 kHz, 16-bit: the WAV the job writes.
    const wavBytes = 44 + 2 * 44100 * 2;
    // Room for the download and the WAV, not for the job's small files (its info JSON and
    // configuration, a few KiB): the WAV overshoots by less than ffmpeg's 32 KiB buffer.
    const room = download + wavBytes;
    full = await startService({
      dataDir: path.join(base, 'data'),
      env: { FETCH_ALLOW_HOSTS: media.hostPort, ARTIFACT_ROOT: path.join(base, 'artifacts') },
    });
    // After the start, which clears what earlier processes left in the work folder.
    const filler = path.join(work, 'filler.bin');
    await writeFile(filler, Buffer.alloc(WORK_BYTES - room));

    const failed = await full.waitForJob((await full.submit(media.url('/tone.mp3?full-volume'))).job_id, [
      'done',
      'failed',
    ]);
    expect(failed.status).toBe('failed');
    expect(failed.error?.code).toBe('storage_full');
    expect(failed.result).toBeNull();
    expect(await readdir(path.join(base, 'artifacts')).catch(() => [])).not.toContainEqual(
      expect.stringMatching(/^[0-9a-f]{2}$/),
    );

    await rm(filler);
    const done = await full.waitForJob((await full.submit(media.url('/tone.mp3?full-volume'))).job_id, [
      'done',
      'failed',
    ]);
    expect(done.error).toBeNull();
    expect(done.status).toBe('done');
  });
});
