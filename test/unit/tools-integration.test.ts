/**
 * The argument builders against Debian's real yt-dlp (2023.03.04) and ffmpeg (5.1), fetching
 * from the loopback media server (127.0.0.1 needs no proxy). This is where the yt-dlp behaviour
 * documented in src/tools/ytdlp-args.ts, ytdlp-output.ts and ytdlp-failure.ts is pinned down.
 */
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConvertArgs } from '../../src/tools/ffmpeg.js';
import { runProcess } from '../../src/tools/process.js';
import { parseWavHeader } from '../../src/tools/wav.js';
import { cleanToolMessage } from '../../src/tools/tool-message.js';
import { buildDownloadArgs, buildProbeArgs } from '../../src/tools/ytdlp-args.js';
import { classifyYtDlpFailure } from '../../src/tools/ytdlp-failure.js';
import { parseInfoJson, parseProgressLine, type DownloadProgress } from '../../src/tools/ytdlp-output.js';
import { generateMediaFixtures, makeNotAudio, type MediaFixture, type MediaFixtureName } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';

const YTDLP = '/usr/bin/yt-dlp';

/** Cuts an audio file into an HLS VOD playlist of 1 s MPEG-TS segments, served under /hls/. */
async function serveHls(server: MediaServer, input: string, hlsDir: string): Promise<void> {
  await mkdir(hlsDir, { recursive: true });
  const made = await runProcess({
    command: 'ffmpeg',
    args: [
      ...['-nostdin', '-loglevel', 'error', '-y', '-i', input, '-c:a', 'copy'],
      ...['-f', 'hls', '-hls_time', '1', '-hls_playlist_type', 'vod'],
      ...['-hls_segment_filename', join(hlsDir, 'seg%d.ts'), join(hlsDir, 'index.m3u8')],
    ],
  });
  if (made.exitCode !== 0) throw new Error(`ffmpeg could not make HLS: ${made.stderrTail}`);
  for (const name of await readdir(hlsDir)) {
    const contentType = name.endsWith('.m3u8') ? 'application/vnd.apple.mpegurl' : 'video/mp2t';
    server.serveFile(`/hls/${name}`, join(hlsDir, name), { contentType });
  }
}
/** What the downloaded file holds, as ffprobe sees it: container, and the first audio stream's shape. */
async function streamOf(file: string): Promise<{ format: string; channels: number; sampleRate: number }> {
  const probe = await runProcess({
    command: 'ffprobe',
    args: [
      '-v',
      'error',
      '-select_streams',
      'a:0',
      '-show_entries',
      'format=format_name:stream=channels,sample_rate',
      '-of',
      'json',
      file,
    ],
    stdoutCaptureBytes: 1 << 20,
  });
  const { format, streams } = JSON.parse(probe.stdout) as {
    format: { format_name: string };
    streams: Array<{ channels: number; sample_rate: string }>;
  };
  return { format: format.format_name, channels: streams[0]!.channels, sampleRate: Number(streams[0]!.sample_rate) };
}

/** No proxy from the environment: these requests go straight to loopback. */
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/_proxy$/i.test(k)));

describe('yt-dlp and ffmpeg with the argument builders', () => {
  let dir: string;
  let fixtures: Record<MediaFixtureName, MediaFixture>;
  let server: MediaServer;
  let jobCount = 0;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tools-integration-'));
    fixtures = await generateMediaFixtures(join(dir, 'fixtures'));
    server = await startMediaServer();
    server.serveFile('/a.m4a', fixtures.aac_m4a.path, { contentType: fixtures.aac_m4a.contentType });
    server.serveFile('/b.webm', fixtures.opus_webm.path, { contentType: fixtures.opus_webm.contentType });
    server.serveFile('/chunked.mp3', fixtures.mp3_mono.path, { contentType: 'audio/mpeg', unknownLength: true });
    const page = await makeNotAudio(join(dir, 'fixtures'));
    server.serveFile('/page.html', page.path, { contentType: page.contentType });
    await serveHls(server, fixtures.aac_m4a.path, join(dir, 'hls'));
  });
  afterAll(async () => {
    await server?.close();
    await rm(dir, { recursive: true, force: true });
  });

  async function newJobDir(): Promise<string> {
    const jobDir = join(dir, `job-${++jobCount}`);
    await mkdir(join(jobDir, 'download'), { recursive: true });
    return jobDir;
  }

  async function download(args: string[]) {
    const progress: DownloadProgress[] = [];
    const other: string[] = [];
    const result = await runProcess({
      command: YTDLP,
      args,
      env,
      timeoutMs: 60_000,
      onStdoutLine: (line) => {
        const p = parseProgressLine(line);
        if (p) progress.push(p);
        else other.push(line);
      },
    });
    return { result, progress, other };
  }

  it('probes, downloads from the info JSON and converts the file to 44.1 kHz stereo PCM', async () => {
    const jobDir = await newJobDir();
    const url = server.url('/a.m4a');

    const probe = await runProcess({
      command: YTDLP,
      args: buildProbeArgs({ url, socketTimeoutS: 10 }),
      env,
      stdoutCaptureBytes: 16 << 20,
    });
    expect(probe.exitCode).toBe(0);
    // The generic extractor on a direct link: id and title from the file name, no duration.
    const raw = JSON.parse(probe.stdout) as Record<string, unknown>;
    expect(raw).toMatchObject({ direct: true, webpage_url: url, protocol: 'http', ext: 'm4a' });
    expect(raw.duration).toBeUndefined();
    expect(parseInfoJson(probe.stdout)).toEqual({
      extractor: 'generic',
      extractorKey: 'Generic',
      mediaId: 'a',
      title: 'a',
      webpageUrl: url,
      isPlaylist: false,
      protocols: ['http'],
    });
    const probeRequests = server.requestsFor('/a.m4a').length;
    expect(probeRequests).toBeGreaterThan(0);

    const infoJsonPath = join(jobDir, 'info.json');
    await writeFile(infoJsonPath, probe.stdout);
    const outputDir = join(jobDir, 'download');
    // A bogus URL proves the URL is not used when the info JSON is given.
    const { result, progress, other } = await download(
      buildDownloadArgs({
        infoJsonPath,
        url: server.url('/never-requested'),
        outputDir,
        maxBytes: 10_000_000,
        socketTimeoutS: 10,
      }),
    );
    expect(result.exitCode).toBe(0);
    expect(server.requestsFor('/never-requested')).toHaveLength(0);
    expect(server.requestsFor('/a.m4a').length).toBeGreaterThan(probeRequests);

    // stdout: progress lines, then exactly one line, the absolute path of the file.
    const size = (await stat(fixtures.aac_m4a.path)).size;
    expect(other).toEqual([join(outputDir, 'source.m4a')]);
    expect(await readdir(outputDir)).toEqual(['source.m4a']);
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.at(-1)).toEqual({ downloadedBytes: size, totalBytes: size });

    expect(await streamOf(other[0]!)).toEqual({ format: 'mov,mp4,m4a,3gp,3g2,mj2', channels: 2, sampleRate: 48000 });

    const wavPath = join(jobDir, 'out.wav');
    const convert = await runProcess({
      command: 'ffmpeg',
      args: buildConvertArgs({ input: other[0]!, output: wavPath, maxDurationS: 600, maxAllocBytes: 1024 ** 3 }),
    });
    expect(convert.exitCode).toBe(0);
    const header = parseWavHeader(await readFile(wavPath));
    expect(header).toMatchObject({ audioFormat: 1, sampleRate: 44100, bitsPerSample: 16, channels: 2 });
    expect(header.durationS).toBeCloseTo(3, 1);
  });

  it('downloads HLS with its own downloader (so through --proxy), without an ffmpeg fix-up', async () => {
    const outputDir = join(await newJobDir(), 'download');
    const { result, other } = await download(buildDownloadArgs({ url: server.url('/hls/index.m3u8'), outputDir }));
    expect(result.exitCode).toBe(0);
    const segments = server.requests.filter((r) => r.path.startsWith('/hls/seg'));
    expect(segments.length).toBeGreaterThan(1);
    // ffmpeg would announce itself as Lavf.
    expect(segments.every((r) => !String(r.headers['user-agent']).includes('Lavf'))).toBe(true);
    // Named .mp4 by yt-dlp, but left as MPEG-TS since --fixup never: ffmpeg goes by content.
    expect(other).toEqual([join(outputDir, 'source.mp4')]);
    expect(await streamOf(other[0]!)).toMatchObject({ format: 'mpegts' });
  });

  it('downloads straight from the URL when there is no info JSON', async () => {
    const outputDir = join(await newJobDir(), 'download');
    const { result, other } = await download(buildDownloadArgs({ url: server.url('/b.webm'), outputDir }));
    expect(result.exitCode).toBe(0);
    expect(other).toEqual([join(outputDir, 'source.webm')]);
  });

  it('refuses an announced size over --max-filesize silently: exit 0, no path, no file', async () => {
    const outputDir = join(await newJobDir(), 'download');
    const { result, progress, other } = await download(
      buildDownloadArgs({ url: server.url('/a.m4a'), outputDir, maxBytes: 1000 }),
    );
    expect(result.exitCode).toBe(0);
    expect(other).toEqual([]);
    expect(progress).toEqual([]);
    expect(await readdir(outputDir)).toEqual([]);
  });

  it('does not enforce --max-filesize when the size is not announced: the worker must, from progress', async () => {
    const outputDir = join(await newJobDir(), 'download');
    const { result, progress, other } = await download(
      buildDownloadArgs({ url: server.url('/chunked.mp3'), outputDir, maxBytes: 1000 }),
    );
    expect(result.exitCode).toBe(0);
    expect(other).toEqual([join(outputDir, 'source.mp3')]);
    expect(progress.at(-1)!.downloadedBytes).toBeGreaterThan(1000);
    expect(progress[0]!.totalBytes).toBeNull();
  });

  it('classifies a page without media and a 404, with messages free of server paths', async () => {
    const jobDir = await newJobDir();
    const page = await runProcess({ command: YTDLP, args: buildProbeArgs({ url: server.url('/page.html') }), env });
    expect(page.exitCode).not.toBe(0);
    expect(classifyYtDlpFailure(page.stderrTail)).toBe('unsupported_url');

    const missing = await runProcess({
      command: YTDLP,
      args: buildProbeArgs({ url: server.url('/missing.mp3') }),
      env,
    });
    expect(missing.exitCode).not.toBe(0);
    expect(classifyYtDlpFailure(missing.stderrTail)).toBe('http_error');
    const message = cleanToolMessage(missing.stderrTail, [jobDir, dirname(jobDir)]);
    expect(message).toMatch(/^ERROR: .*HTTP Error 404/);
    expect(message).not.toMatch(/please report|\/tmp\//);
  });
});
