import { mkdir, rename } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProcess } from '../../src/tools/process.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';

/**
 * Waveform peaks and loudness end to end: the real service (SQLite, the resident sandbox), the
 * real yt-dlp and ffmpeg, and known signals on a loopback media server.
 *  - a 1 kHz sine at -6 dBFS on the left, silence on the right: the served peaks.json's maxima
 *    are 0.5 of full scale on the left, 0 on the right;
 *  - EBU's reference: a 1 kHz sine on both channels at -23 LUFS. BS.1770's weighting gives a
 *    1 kHz sine of amplitude A on one channel -3.01 dB + 20 log10(A) (its mean square A²/2, the
 *    K-filter's gain at 1 kHz and the -0.691 offset cancelling); on two channels the powers add
 *    (+3.01 dB): 20 log10(A) = -23, so A = 10^(-23/20), a peak of -23 dBFS on each channel
 *    (an RMS of -26 dBFS). Its true peak is -23 dBTP, its range 0 LU.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const MINUS_6_DBFS = 10 ** (-6 / 20);
const MINUS_23_DBFS = 10 ** (-23 / 20);

let media: MediaServer;
let svc: ServiceHandle;

/** A FLAC (lossless, so the levels are exact) of one expression per channel, 44.1 kHz. */
async function makeSignal(name: string, exprs: string, seconds: number): Promise<string> {
  const file = path.join(FIXTURE_DIR, `${name}.flac`);
  const tmp = `${file}.${process.pid}.tmp`;
  await mkdir(FIXTURE_DIR, { recursive: true });
  const result = await runProcess({
    command: 'ffmpeg',
    args: [
      '-nostdin',
      '-v',
      'error',
      '-y',
      '-f',
      'lavfi',
      '-i',
      `aevalsrc=${exprs}:c=stereo:s=44100:d=${seconds}`,
      '-c:a',
      'flac',
      '-map_metadata',
      '-1',
      '-fflags',
      '+bitexact',
      '-f',
      'flac',
      tmp,
    ],
    timeoutMs: 60_000,
  });
  if (result.exitCode !== 0) throw new Error(`ffmpeg could not make ${name}: ${result.stderrTail}`);
  await rename(tmp, file);
  return file;
}

beforeAll(async () => {
  const leftOnly = await makeSignal('sine-1k-minus6-left', `${MINUS_6_DBFS}*sin(2*PI*1000*t)|0`, 5);
  const reference = await makeSignal(
    'ebu-1k-minus23-lufs',
    `${MINUS_23_DBFS}*sin(2*PI*1000*t)|${MINUS_23_DBFS}*sin(2*PI*1000*t)`,
    20,
  );
  media = await startMediaServer();
  media.serveFile('/left-only.flac', leftOnly, { contentType: 'audio/flac' });
  media.serveFile('/reference.flac', reference, { contentType: 'audio/flac' });
  svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, LOUDNESS: 'on' } });
});

afterAll(async () => {
  await svc?.stop();
  await media?.close();
});

interface Peaks {
  version: number;
  channels: number;
  sample_rate: number;
  samples_per_pixel: number;
  bits: number;
  length: number;
  data: number[];
}

async function fetchDone(service: ServiceHandle, url: string): Promise<JobBody> {
  const job = await service.waitForJob((await service.submit(url)).job_id, ['done', 'failed']);
  expect(job.error).toBeNull();
  expect(job.status).toBe('done');
  return job;
}

/** Per channel, the highest max and the lowest min of the peaks, as fractions of full scale. */
function extremes(peaks: Peaks): Array<{ max: number; min: number }> {
  const out = Array.from({ length: peaks.channels }, () => ({ max: 0, min: 0 }));
  const scale = 2 ** (peaks.bits - 1);
  peaks.data.forEach((value, i) => {
    const channel = out[Math.floor(i / 2) % peaks.channels]!;
    if (i % 2 === 1) channel.max = Math.max(channel.max, value / scale);
    else channel.min = Math.min(channel.min, value / scale);
  });
  return out;
}

describe('waveform peaks', () => {
  it('a 1 kHz sine at -6 dBFS on the left and silence on the right: maxima 0.5 and 0, served as peaks.json beside the WAV', async () => {
    const job = await fetchDone(svc, media.url('/left-only.flac'));
    const cid = job.result!.content_id;
    const [wav, peaksArtifact] = job.result!.artifacts;
    expect(wav).toMatchObject({ name: 'audio.wav', channels: 2, sample_rate: 44100 });
    expect(peaksArtifact).toMatchObject({
      name: 'peaks.json',
      path: `/artifacts/${cid}/peaks.json`,
      content_type: 'application/json',
      sample_rate: null,
      channels: null,
      duration: null,
    });

    const res = await svc.request(peaksArtifact!.path);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    const text = await res.text();
    expect(Buffer.byteLength(text)).toBe(peaksArtifact!.bytes);
    const peaks = JSON.parse(text) as Peaks;
    // 5 s at 44.1 kHz: 220500 frames, under MAX_PIXELS × the floor, so the floor's 32 frames a pixel.
    expect(peaks).toMatchObject({ version: 2, channels: 2, sample_rate: 44100, samples_per_pixel: 32, bits: 8 });
    expect(peaks.length).toBe(Math.ceil((wav!.duration! * 44100) / 32));
    expect(peaks.data).toHaveLength(peaks.length * 2 * 2);
    // Within one step of 8 bits (1/128): the high byte of ±16422 is 64 and -65.
    const [left, right] = extremes(peaks);
    expect(Math.abs(left!.max - 0.5)).toBeLessThanOrEqual(1 / 128);
    expect(Math.abs(left!.min - -0.5)).toBeLessThanOrEqual(1 / 128);
    expect(right).toEqual({ max: 0, min: 0 });

    // Signed: the same bytes without the key.
    const signed = await svc.request(peaksArtifact!.signed_url, { auth: false });
    expect(signed.status).toBe(200);
    expect(signed.headers.get('content-type')).toBe('application/json');
    expect(await signed.text()).toBe(text);
    // Control: without key or signature, refused.
    expect((await svc.request(peaksArtifact!.path, { auth: false })).status).toBe(401);
  });
});

describe('loudness', () => {
  it("EBU's -23 LUFS reference tone reads -23 ± 0.1 LUFS in the job record, and again in a job born done", async () => {
    const url = media.url('/reference.flac');
    const job = await fetchDone(svc, url);
    const loudness = job.result!.loudness!;
    expect(Math.abs(loudness.integrated_lufs - -23)).toBeLessThanOrEqual(0.1);
    expect(Math.abs(loudness.true_peak_dbtp - -23)).toBeLessThanOrEqual(0.2);
    expect(loudness.range_lu).toBeLessThanOrEqual(0.5);

    const again = await fetchDone(svc, url);
    expect(again.born_done).toBe(true);
    expect(again.result!.loudness).toEqual(loudness);
    expect(again.result!.artifacts.map((artifact) => artifact.name)).toEqual(['audio.wav', 'peaks.json']);
  });
});

describe('with LOUDNESS=off and WAVEFORM_PEAKS=off (as content stored before they existed)', () => {
  it('the job record lists the WAV alone and says null for loudness; peaks.json is not found', async () => {
    const off = await startService({
      env: { FETCH_ALLOW_HOSTS: media.hostPort, LOUDNESS: 'off', WAVEFORM_PEAKS: 'off' },
    });
    try {
      const job = await fetchDone(off, media.url('/left-only.flac'));
      expect(job.result!.artifacts.map((artifact) => artifact.name)).toEqual(['audio.wav']);
      expect(job.result!.loudness).toBeNull();
      const cid = job.result!.content_id;
      const missing = await off.request(`/artifacts/${cid}/peaks.json`);
      expect(missing.status).toBe(404);
      expect(((await missing.json()) as { code: string }).code).toBe('artifact_not_found');
      // Control: the WAV itself is served.
      expect((await off.request(`/artifacts/${cid}/audio.wav`)).status).toBe(200);
    } finally {
      await off.stop();
    }
  });
});
