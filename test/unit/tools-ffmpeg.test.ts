import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConvertArgs, buildProbeArgs, INPUT_FORMAT_WHITELIST, parseProbe } from '../../src/tools/ffmpeg.js';
import { runProcess } from '../../src/tools/process.js';
import { parseWavHeader } from '../../src/tools/wav.js';
import { generateMediaFixtures, type MediaFixtureName, type MediaFixture } from '../support/media.js';

describe('buildConvertArgs', () => {
  it('makes a bit-exact 44.1 kHz s16le WAV of the first audio stream, from and to local files only', () => {
    expect(buildConvertArgs({ input: '/w/in.m4a', output: '/w/out.wav', inputChannels: 2, maxDurationS: 600 })).toEqual([
      '-nostdin',
      '-hide_banner',
      '-loglevel',
      'error',
      '-n',
      '-protocol_whitelist',
      'file',
      '-format_whitelist',
      INPUT_FORMAT_WHITELIST,
      '-i',
      'file:/w/in.m4a',
      '-map',
      '0:a:0',
      '-t',
      '600',
      '-ac',
      '2',
      '-ar',
      '44100',
      '-c:a',
      'pcm_s16le',
      '-map_metadata',
      '-1',
      '-fflags',
      '+bitexact',
      '-flags:a',
      '+bitexact',
      '-f',
      'wav',
      'file:/w/out.wav',
    ]);
  });

  it('keeps mono mono and turns anything else into stereo', () => {
    const ac = (inputChannels: number | null) => {
      const args = buildConvertArgs({ input: 'i', output: 'o', inputChannels, maxDurationS: 1 });
      return args[args.indexOf('-ac') + 1];
    };
    expect([ac(1), ac(2), ac(6), ac(null)]).toEqual(['1', '2', '2', '2']);
  });
});

describe('parseProbe', () => {
  it('summarises the first audio stream and the container', () => {
    const json = JSON.stringify({
      streams: [
        { index: 0, codec_type: 'video', codec_name: 'mjpeg' },
        { index: 1, codec_type: 'audio', codec_name: 'aac', sample_rate: '48000', channels: 2, duration: '3.01' },
        { index: 2, codec_type: 'audio', codec_name: 'aac', sample_rate: '44100', channels: 1 },
      ],
      format: { format_name: 'mov,mp4,m4a,3gp,3g2,mj2', duration: '3.023000' },
    });
    expect(parseProbe(json)).toEqual({
      audioStreams: 2,
      channels: 2,
      sampleRate: 48000,
      durationS: 3.023,
      formatName: 'mov,mp4,m4a,3gp,3g2,mj2',
    });
  });

  it('reports a file without audio as zero audio streams', () => {
    const json = JSON.stringify({ streams: [{ codec_type: 'video' }], format: { format_name: 'mp4', duration: 'N/A' } });
    expect(parseProbe(json)).toEqual({ audioStreams: 0, channels: null, sampleRate: null, durationS: null, formatName: 'mp4' });
  });

  it('throws when the text is not ffprobe JSON', () => {
    expect(() => parseProbe('')).toThrow();
    expect(() => parseProbe('[]')).toThrow();
  });
});

describe('with the real ffmpeg and ffprobe', () => {
  let dir: string;
  let fixtures: Record<MediaFixtureName, MediaFixture>;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tools-ffmpeg-'));
    fixtures = await generateMediaFixtures(join(dir, 'fixtures'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function probe(input: string) {
    const result = await runProcess({ command: 'ffprobe', args: buildProbeArgs(input), stdoutCaptureBytes: 1 << 20 });
    return { result, summary: result.exitCode === 0 ? parseProbe(result.stdout) : null };
  }

  async function convert(input: string, name: string, inputChannels: number | null, maxDurationS = 600) {
    const output = join(dir, name);
    const result = await runProcess({ command: 'ffmpeg', args: buildConvertArgs({ input, output, inputChannels, maxDurationS }) });
    expect(result.stderrTail).toBe('');
    expect(result.exitCode).toBe(0);
    return output;
  }

  it.each([
    ['opus_webm', 2, 48000],
    ['aac_m4a', 2, 48000],
    ['mp3_mono', 1, 22050],
    ['flac_mono', 1, 44100],
    ['wav_mono_22k', 1, 22050],
    ['flac_51', 6, 48000],
  ] as const)('probes %s: %i channels at %i Hz', async (name, channels, sampleRate) => {
    const { summary } = await probe(fixtures[name].path);
    expect(summary).toMatchObject({ audioStreams: 1, channels, sampleRate });
    expect(summary?.durationS).toBeCloseTo(3, 0);
  });

  it('converts byte-for-byte the same twice (no encoder tag, no metadata)', async () => {
    const a = await convert(fixtures.aac_m4a.path, 'a.wav', 2);
    const b = await convert(fixtures.aac_m4a.path, 'b.wav', 2);
    const sha = async (p: string) => createHash('sha256').update(await readFile(p)).digest('hex');
    expect(await sha(a)).toBe(await sha(b));
    const wav = await readFile(a);
    expect(wav.includes(Buffer.from('Lavf'))).toBe(false);
    expect(wav.includes(Buffer.from('LIST'))).toBe(false);
    expect(parseWavHeader(wav)).toMatchObject({ audioFormat: 1, channels: 2, sampleRate: 44100, bitsPerSample: 16 });
  });

  it('never overwrites an existing output', async () => {
    const output = join(dir, 'exists.wav');
    await writeFile(output, 'keep me');
    const result = await runProcess({
      command: 'ffmpeg',
      args: buildConvertArgs({ input: fixtures.flac_mono.path, output, inputChannels: 1, maxDurationS: 10 }),
    });
    expect(result.exitCode).not.toBe(0);
    expect(await readFile(output, 'utf8')).toBe('keep me');
  });

  it('keeps mono, downmixes 5.1 to stereo, resamples to 44.1 kHz and caps the duration', async () => {
    const mono = parseWavHeader(await readFile(await convert(fixtures.mp3_mono.path, 'mono.wav', 1)));
    expect(mono).toMatchObject({ channels: 1, sampleRate: 44100, bitsPerSample: 16 });
    const surround = parseWavHeader(await readFile(await convert(fixtures.flac_51.path, 'surround.wav', 6)));
    expect(surround).toMatchObject({ channels: 2, sampleRate: 44100 });
    expect(surround.durationS).toBeCloseTo(3, 2);
    const capped = parseWavHeader(await readFile(await convert(fixtures.flac_mono.path, 'capped.wav', 1, 1)));
    expect(capped.durationS).toBeCloseTo(1, 2);
  });

  it('detects a file with no audio stream', async () => {
    const videoOnly = join(dir, 'video-only.mp4');
    const made = await runProcess({
      command: 'ffmpeg',
      args: ['-nostdin', '-loglevel', 'error', '-f', 'lavfi', '-i', 'color=c=blue:s=32x32:d=1', '-c:v', 'mpeg4', videoOnly],
    });
    expect(made.exitCode).toBe(0);
    const { summary } = await probe(videoOnly);
    expect(summary?.audioStreams).toBe(0);
  });

  it('refuses a "media" file that is really a playlist pointing at other local files', async () => {
    // Without the demuxer whitelist the hls demuxer would read the neighbouring file it lists.
    const playlist = join(dir, 'evil.m4a');
    await writeFile(playlist, '#EXTM3U\n#EXT-X-TARGETDURATION:3\n#EXTINF:3,\nfixtures/tone-3s-1ch-44100hz.flac\n#EXT-X-ENDLIST\n');
    const { result } = await probe(playlist);
    expect(result.exitCode).not.toBe(0);
    expect(result.stderrTail).toMatch(/not on whitelist/);
    const converted = await runProcess({
      command: 'ffmpeg',
      args: buildConvertArgs({ input: playlist, output: join(dir, 'evil.wav'), inputChannels: 2, maxDurationS: 10 }),
    });
    expect(converted.exitCode).not.toBe(0);
  });

  it('refuses a file that is not media at all (an HTML page)', async () => {
    const page = join(dir, 'page.html');
    await writeFile(page, '<!doctype html><title>x</title>');
    const { result } = await probe(page);
    expect(result.exitCode).not.toBe(0);
  });
});
