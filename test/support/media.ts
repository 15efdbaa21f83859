/**
 * Deterministic audio fixtures made with the real ffmpeg, for tests that need media files.
 *
 *   const fixtures = await generateMediaFixtures(dir);
 *   fixtures.aac_m4a.path          // 3 s AAC in MP4, 48 kHz stereo, contentType 'audio/mp4'
 *   fixtures.aac_mono_48k          // 1 s AAC in MP4, 48 kHz mono; fixtures.mp3_stereo_22k: 1 s MP3, 22.05 kHz stereo
 *   const long = await makeTone(dir, { seconds: 30, channels: 2, sampleRate: 44100, format: 'wav' });
 *   const page = await makeNotAudio(dir);          // an HTML page; makeNotAudio(dir, 'png') for an image
 *
 * Every file is a tone where channel i plays its own sine (440 Hz, 660 Hz, ...), so a downmix
 * or a swapped channel is visible. Same arguments → same bytes (bitexact, no metadata).
 * Files are cached by name: a call finds an existing file (in this process or left on disk by
 * another test file) and returns at once. Files are written under a temporary name and renamed,
 * so concurrent test workers sharing a folder never see half a file.
 * durationS, channels and sampleRate are what was asked for; lossy encoders add a few
 * milliseconds of padding to the real duration.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { runProcess } from '../../src/tools/process.js';

export type ToneFormat = 'webm' | 'm4a' | 'mp3' | 'flac' | 'wav';

export interface MediaFixture {
  path: string;
  contentType: string;
  channels: number;
  sampleRate: number;
  durationS: number;
}

export interface ToneSpec {
  seconds: number;
  channels: number;
  sampleRate: number;
  format: ToneFormat;
  /** Raises every channel's pitch by this many Hz: the same kind of file with other samples. */
  variant?: number;
}

export type MediaFixtureName =
  'opus_webm' | 'aac_m4a' | 'mp3_mono' | 'flac_mono' | 'wav_mono_22k' | 'flac_51' | 'aac_mono_48k' | 'mp3_stereo_22k';

const FIXTURES: Record<MediaFixtureName, ToneSpec> = {
  opus_webm: { format: 'webm', channels: 2, sampleRate: 48000, seconds: 3 },
  aac_m4a: { format: 'm4a', channels: 2, sampleRate: 48000, seconds: 3 },
  mp3_mono: { format: 'mp3', channels: 1, sampleRate: 22050, seconds: 3 },
  flac_mono: { format: 'flac', channels: 1, sampleRate: 44100, seconds: 3 },
  wav_mono_22k: { format: 'wav', channels: 1, sampleRate: 22050, seconds: 3 },
  /** 5.1, for the downmix-to-stereo case. */
  flac_51: { format: 'flac', channels: 6, sampleRate: 48000, seconds: 3 },
  /** 48 kHz mono and 22.05 kHz stereo, so both rates come in both channel counts; short, to stay cheap. */
  aac_mono_48k: { format: 'm4a', channels: 1, sampleRate: 48000, seconds: 1 },
  mp3_stereo_22k: { format: 'mp3', channels: 2, sampleRate: 22050, seconds: 1 },
};

const FORMATS: Record<ToneFormat, { contentType: string; muxer: string; codecArgs: string[] }> = {
  webm: { contentType: 'audio/webm', muxer: 'webm', codecArgs: ['-c:a', 'libopus', '-b:a', '64k'] },
  m4a: { contentType: 'audio/mp4', muxer: 'mp4', codecArgs: ['-c:a', 'aac', '-b:a', '96k'] },
  mp3: { contentType: 'audio/mpeg', muxer: 'mp3', codecArgs: ['-c:a', 'libmp3lame', '-b:a', '64k'] },
  flac: { contentType: 'audio/flac', muxer: 'flac', codecArgs: ['-c:a', 'flac'] },
  wav: { contentType: 'audio/wav', muxer: 'wav', codecArgs: ['-c:a', 'pcm_s16le'] },
};

const CHANNEL_LAYOUTS: Record<number, string> = { 1: 'mono', 2: 'stereo', 6: '5.1' };

/** Promises by absolute path, so concurrent calls in one process render a file once. */
const cache = new Map<string, Promise<MediaFixture>>();

/** The standard fixtures (3 s each; the 48 kHz mono and 22.05 kHz stereo ones 1 s), keyed by name. */
export async function generateMediaFixtures(dir: string): Promise<Record<MediaFixtureName, MediaFixture>> {
  const names = Object.keys(FIXTURES) as MediaFixtureName[];
  const made = await Promise.all(names.map((name) => makeTone(dir, FIXTURES[name])));
  return Object.fromEntries(names.map((name, i) => [name, made[i]!])) as Record<MediaFixtureName, MediaFixture>;
}

/** One tone file of any length, e.g. 180 s for a benchmark or 30 s for a throttled-cancel test. */
export function makeTone(dir: string, spec: ToneSpec): Promise<MediaFixture> {
  const variant = spec.variant ? `-v${spec.variant}` : '';
  const path = resolve(dir, `tone-${spec.seconds}s-${spec.channels}ch-${spec.sampleRate}hz${variant}.${spec.format}`);
  let pending = cache.get(path);
  if (!pending) {
    pending = render(path, spec);
    cache.set(path, pending);
    pending.catch(() => cache.delete(path));
  }
  return pending;
}

async function render(path: string, spec: ToneSpec): Promise<MediaFixture> {
  const { contentType, muxer, codecArgs } = FORMATS[spec.format];
  const fixture: MediaFixture = {
    path,
    contentType,
    channels: spec.channels,
    sampleRate: spec.sampleRate,
    durationS: spec.seconds,
  };
  if (await exists(path)) return fixture;

  const exprs = Array.from(
    { length: spec.channels },
    (_, i) => `0.4*sin(2*PI*${220 * (i + 2) + (spec.variant ?? 0)}*t)`,
  ).join('|');
  const layout = CHANNEL_LAYOUTS[spec.channels] ?? `${spec.channels}c`;
  const tmp = tempName(path);
  await mkdir(dirname(path), { recursive: true });
  const result = await runProcess({
    command: 'ffmpeg',
    args: [
      '-nostdin',
      '-hide_banner',
      '-loglevel',
      'error',
      '-f',
      'lavfi',
      '-i',
      `aevalsrc=${exprs}:c=${layout}:s=${spec.sampleRate}:d=${spec.seconds}`,
      ...codecArgs,
      '-map_metadata',
      '-1',
      '-fflags',
      '+bitexact',
      '-flags:a',
      '+bitexact',
      '-f',
      muxer,
      tmp,
    ],
    timeoutMs: 120_000,
  });
  if (result.exitCode !== 0) {
    await rm(tmp, { force: true });
    throw new Error(`ffmpeg could not make ${path}: ${result.stderrTail || `exit ${result.exitCode}`}`);
  }
  await rename(tmp, path);
  return fixture;
}

const HTML_PAGE =
  '<!doctype html>\n<html><head><title>No audio here</title></head><body><p>Just a page.</p></body></html>\n';

/** A 1×1 PNG. */
const PNG_BYTES = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==',
  'base64',
);

/** A file that is not audio: an HTML page (yt-dlp's generic extractor finds no media in it) or a PNG. */
export async function makeNotAudio(
  dir: string,
  kind: 'html' | 'png' = 'html',
): Promise<{ path: string; contentType: string }> {
  await mkdir(dir, { recursive: true });
  const path = join(resolve(dir), `not-audio.${kind}`);
  const tmp = tempName(path);
  await writeFile(tmp, kind === 'png' ? PNG_BYTES : HTML_PAGE);
  await rename(tmp, path);
  return { path, contentType: kind === 'png' ? 'image/png' : 'text/html; charset=utf-8' };
}

/** Written beside the final name, then renamed over it: readers see the whole file or none. */
function tempName(path: string): string {
  return `${path}.${randomBytes(6).toString('hex')}.tmp`;
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}
