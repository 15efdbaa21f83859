import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConvertArgs, DURATION_OVERRUN_S, INPUT_FORMAT_WHITELIST, inputUrl } from '../../src/tools/ffmpeg.js';
import { parseFfmetadata } from '../../src/tools/ffmpeg-tags.js';
import { runProcess } from '../../src/tools/process.js';
import { parseWavHeader } from '../../src/tools/wav.js';
import { generateMediaFixtures, type MediaFixtureName, type MediaFixture } from '../support/media.js';

describe('buildConvertArgs', () => {
  it('makes a bit-exact 44.1 kHz s16le WAV of the first audio stream, mono or stereo, from and to local files only, no allocation over a quarter of its memory', () => {
    expect(
      buildConvertArgs({ input: '/w/in.m4a', output: '/w/out.wav', maxDurationS: 600, maxAllocBytes: 1024 ** 3 }),
    ).toEqual([
      '-nostdin',
      '-nostats',
      '-hide_banner',
      '-loglevel',
      'error',
      '-max_alloc',
      String(1024 ** 3 / 4),
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
      String(600 + DURATION_OVERRUN_S),
      '-af',
      'aformat=channel_layouts=mono|stereo',
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

  it('reads a FIFO fed as the download grows through the async reader, and files only through it', () => {
    const args = buildConvertArgs({
      input: '/w/feed',
      fedThroughFifo: true,
      output: '/w/out.wav',
      maxDurationS: 600,
      maxAllocBytes: 1024 ** 3,
    });
    const plain = buildConvertArgs({
      input: '/w/feed',
      output: '/w/out.wav',
      maxDurationS: 600,
      maxAllocBytes: 1024 ** 3,
    });
    const at = args.indexOf('-protocol_whitelist');
    expect(args.slice(at, at + 6)).toEqual([
      '-protocol_whitelist',
      'async,file',
      '-format_whitelist',
      INPUT_FORMAT_WHITELIST,
      '-i',
      'async:file:/w/feed',
    ]);
    expect(inputUrl({ input: '/w/feed', fedThroughFifo: true })).toBe('async:file:/w/feed');
    // Everything else as for a file.
    expect(args.filter((_, i) => i !== at + 1 && i !== at + 5)).toEqual(
      plain.filter((_, i) => i !== at + 1 && i !== at + 5),
    );
  });
});

describe('with the real ffmpeg', () => {
  let dir: string;
  let fixtures: Record<MediaFixtureName, MediaFixture>;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tools-ffmpeg-'));
    fixtures = await generateMediaFixtures(join(dir, 'fixtures'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function convert(input: string, name: string, maxDurationS = 600) {
    const output = join(dir, name);
    const result = await runProcess({
      command: 'ffmpeg',
      args: buildConvertArgs({ input, output, maxDurationS, maxAllocBytes: 1024 ** 3 }),
    });
    expect(result.stderrTail).toBe('');
    expect(result.exitCode).toBe(0);
    return output;
  }

  /** A conversion that fails, and whether it left an output file (ffmpeg opens it only for an input with audio). */
  async function refused(input: string, name: string) {
    const output = join(dir, name);
    const result = await runProcess({
      command: 'ffmpeg',
      args: buildConvertArgs({ input, output, maxDurationS: 10, maxAllocBytes: 1024 ** 3 }),
    });
    expect(result.exitCode).not.toBe(0);
    return {
      stderr: result.stderrTail,
      output: await stat(output).then(
        () => true,
        () => false,
      ),
    };
  }

  const sha = async (p: string) =>
    createHash('sha256')
      .update(await readFile(p))
      .digest('hex');

  it.each([
    ['an MP3 with ID3', 'mp3', ['-c:a', 'libmp3lame'], {}],
    ["an Ogg with Vorbis comments (its stream's)", 'ogg', ['-c:a', 'libvorbis'], {}],
    ['a FLAC with Vorbis comments', 'flac', ['-c:a', 'flac'], {}],
    ['an Opus in Ogg', 'opus', ['-c:a', 'libopus'], {}],
    ['an M4A', 'm4a', ['-c:a', 'aac'], {}],
    [
      'a Matroska file whose stream has its own title (the global one wins)',
      'mka',
      ['-c:a', 'libopus'],
      { 'metadata:s:a:0': 'title=Stream title' },
    ],
  ] as const)(
    "writes the input's tags beside the WAV when asked, in the same run, and the WAV's bytes stay the same: %s",
    async (_label, extension, codec, extra) => {
      const title = 'Ein "Lied" = a;b#c\\d / שיר 🎵';
      const input = join(dir, `tagged.${extension}`);
      const tagArgs = [
        ...['-metadata', `title=${title}`, '-metadata', 'artist=Line one\nline two', '-metadata', 'album=Alb'],
        ...Object.entries(extra).flatMap(([option, value]) => [`-${option}`, value]),
      ];
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
          'sine=duration=1',
          ...codec,
          ...tagArgs,
          input,
        ],
      });
      expect(made.stderrTail).toBe('');
      const tagsOutput = join(dir, `tagged-${extension}.tags`);
      const withTags = join(dir, `tagged-${extension}.wav`);
      const result = await runProcess({
        command: 'ffmpeg',
        args: buildConvertArgs({ input, output: withTags, tagsOutput, maxDurationS: 600, maxAllocBytes: 1024 ** 3 }),
      });
      expect(result.stderrTail).toBe('');
      expect(result.exitCode).toBe(0);
      expect(parseFfmetadata(await readFile(tagsOutput, 'utf8'))).toEqual({
        title,
        artist: 'Line one\nline two',
        album: 'Alb',
      });
      expect(await sha(withTags)).toBe(await sha(await convert(input, `untagged-${extension}.wav`)));
      expect((await readFile(withTags)).includes(Buffer.from('Alb'))).toBe(false);
    },
  );

  it('converts byte-for-byte the same twice (no encoder tag, no metadata)', async () => {
    const a = await convert(fixtures.aac_m4a.path, 'a.wav');
    const b = await convert(fixtures.aac_m4a.path, 'b.wav');
    expect(await sha(a)).toBe(await sha(b));
    const wav = await readFile(a);
    expect(wav.includes(Buffer.from('Lavf'))).toBe(false);
    expect(wav.includes(Buffer.from('LIST'))).toBe(false);
    expect(parseWavHeader(wav)).toMatchObject({ audioFormat: 1, channels: 2, sampleRate: 44100, bitsPerSample: 16 });
  });

  it.each([
    ['mp3_mono', 1],
    ['flac_mono', 1],
    ['opus_webm', 2],
    ['aac_m4a', 2],
    ['flac_51', 2],
  ] as const)(
    '%s: the same bytes as -ac %i chosen from its channel count (content ids do not change)',
    async (name, channels) => {
      const ours = await convert(fixtures[name].path, `${name}-ours.wav`);
      const args = buildConvertArgs({
        input: fixtures[name].path,
        output: join(dir, `${name}-ac.wav`),
        maxDurationS: 600,
        maxAllocBytes: 1024 ** 3,
      });
      const af = args.indexOf('-af');
      args.splice(af, 2, '-ac', String(channels));
      expect((await runProcess({ command: 'ffmpeg', args })).exitCode).toBe(0);
      expect(await sha(ours)).toBe(await sha(join(dir, `${name}-ac.wav`)));
      expect(parseWavHeader(await readFile(ours)).channels).toBe(channels);
    },
  );

  it('never overwrites an existing output', async () => {
    const output = join(dir, 'exists.wav');
    await writeFile(output, 'keep me');
    const result = await runProcess({
      command: 'ffmpeg',
      args: buildConvertArgs({ input: fixtures.flac_mono.path, output, maxDurationS: 10, maxAllocBytes: 1024 ** 3 }),
    });
    expect(result.exitCode).not.toBe(0);
    expect(await readFile(output, 'utf8')).toBe('keep me');
  });

  it('resamples to 44.1 kHz and stops DURATION_OVERRUN_S past the limit, so that a longer input shows', async () => {
    const mono = parseWavHeader(await readFile(await convert(fixtures.mp3_mono.path, 'mono.wav')));
    expect(mono).toMatchObject({ channels: 1, sampleRate: 44100, bitsPerSample: 16 });
    const surround = parseWavHeader(await readFile(await convert(fixtures.flac_51.path, 'surround.wav')));
    expect(surround.durationS).toBeCloseTo(3, 2);
    // 3 s of audio, a limit of 1 s: the WAV goes a second past it, then stops.
    const capped = parseWavHeader(await readFile(await convert(fixtures.flac_mono.path, 'capped.wav', 1)));
    expect(capped.durationS).toBeCloseTo(1 + DURATION_OVERRUN_S, 2);
  });

  it('refuses a file with no audio stream before opening its output', async () => {
    const videoOnly = join(dir, 'video-only.mp4');
    const made = await runProcess({
      command: 'ffmpeg',
      args: [
        '-nostdin',
        '-loglevel',
        'error',
        '-f',
        'lavfi',
        '-i',
        'color=c=blue:s=32x32:d=1',
        '-c:v',
        'mpeg4',
        videoOnly,
      ],
    });
    expect(made.exitCode).toBe(0);
    expect(await refused(videoOnly, 'video-only.wav')).toEqual({
      stderr: expect.stringMatching(/matches no streams/),
      output: false,
    });
  });

  it('refuses a "media" file that is really a playlist pointing at other local files, before opening its output', async () => {
    // Without the demuxer whitelist the hls demuxer would read the neighbouring file it lists.
    const playlist = join(dir, 'evil.m4a');
    await writeFile(
      playlist,
      '#EXTM3U\n#EXT-X-TARGETDURATION:3\n#EXTINF:3,\nfixtures/tone-3s-1ch-44100hz.flac\n#EXT-X-ENDLIST\n',
    );
    expect(await refused(playlist, 'evil.wav')).toEqual({
      stderr: expect.stringMatching(/not on whitelist/),
      output: false,
    });
  });

  it('refuses a file that is not media at all (an HTML page), before opening its output', async () => {
    const page = join(dir, 'page.html');
    await writeFile(page, '<!doctype html><title>x</title>');
    expect((await refused(page, 'page.wav')).output).toBe(false);
  });
});
