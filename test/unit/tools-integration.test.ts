/**
 * The argument builders against Debian's real yt-dlp (2023.03.04) and ffmpeg (5.1), fetching
 * from the loopback media server (127.0.0.1 needs no proxy). This is where the yt-dlp behaviour
 * documented in src/tools/ytdlp-args.ts, ytdlp-output.ts and ytdlp-failure.ts is pinned down.
 */
import { mkdir, mkdtemp, open, readdir, readFile, rm, stat, writeFile, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConvertArgs } from '../../src/tools/ffmpeg.js';
import { runProcess } from '../../src/tools/process.js';
import { parseWavHeader } from '../../src/tools/wav.js';
import { cleanToolMessage } from '../../src/tools/tool-message.js';
import { buildDownloadArgs, buildWarmUpRun, GATE_FIFO, GATE_LINE, INFO_PREFIX } from '../../src/tools/ytdlp-args.js';
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
    server.serveFile('/warm-up.webm', fixtures.opus_webm.path, { contentType: fixtures.opus_webm.contentType });
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

  /**
   * One run in the job's folder (its cwd, where the gate's FIFO is made): stdout's info line, the
   * gate (opened at once unless `gateOpen` is false), progress lines and the other lines, apart.
   */
  async function download(args: string[], { cwd, gateOpen = true }: { cwd: string; gateOpen?: boolean }) {
    const progress: DownloadProgress[] = [];
    const other: string[] = [];
    const info: string[] = [];
    let gate: Promise<FileHandle> | undefined;
    let requestsAtGate = -1;
    const stopped = new AbortController();
    const result = await runProcess({
      command: YTDLP,
      args,
      cwd,
      env,
      timeoutMs: 60_000,
      signal: stopped.signal,
      onStdoutLine: (line) => {
        if (line.startsWith(INFO_PREFIX)) info.push(line.slice(INFO_PREFIX.length));
        else if (line === GATE_LINE) {
          requestsAtGate = server.requests.length;
          if (!gateOpen) stopped.abort();
          else
            gate = open(join(cwd, GATE_FIFO), 'r+').then(async (handle) => {
              await handle.write('go\n');
              return handle;
            });
        } else {
          const p = parseProgressLine(line);
          if (p) progress.push(p);
          else other.push(line);
        }
      },
    });
    await (await gate)?.close();
    return { result, progress, other, info, requestsAtGate };
  }

  it('extracts, prints the info JSON, waits at the gate, then downloads and the file converts to 44.1 kHz stereo PCM', async () => {
    const jobDir = await newJobDir();
    const url = server.url('/a.m4a');
    const outputDir = join(jobDir, 'download');
    const { result, progress, other, info, requestsAtGate } = await download(
      buildDownloadArgs({ url, outputDir, maxBytes: 10_000_000, socketTimeoutS: 10 }),
      { cwd: jobDir },
    );
    expect(result.exitCode).toBe(0);
    // The generic extractor on a direct link: id and title from the file name, no duration.
    expect(info).toHaveLength(1);
    const raw = JSON.parse(info[0]!) as Record<string, unknown>;
    // Printed before a format is chosen: every format, each with its own protocol and extension.
    expect(raw).toMatchObject({
      direct: true,
      webpage_url: url,
      formats: [expect.objectContaining({ ext: 'm4a', protocol: 'http' })],
    });
    expect(raw.duration).toBeUndefined();
    expect(parseInfoJson(info[0]!)).toEqual({
      extractor: 'generic',
      extractorKey: 'Generic',
      mediaId: 'a',
      title: 'a',
      direct: true,
      webpageUrl: url,
      isPlaylist: false,
      overridesProxy: false,
      protocols: ['http'],
    });
    // The extraction reads the link; the download comes after the gate.
    expect(requestsAtGate).toBeGreaterThan(0);
    expect(server.requests.length).toBeGreaterThan(requestsAtGate);

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
    const jobDir = await newJobDir();
    const outputDir = join(jobDir, 'download');
    const { result, other } = await download(buildDownloadArgs({ url: server.url('/hls/index.m3u8'), outputDir }), {
      cwd: jobDir,
    });
    expect(result.exitCode).toBe(0);
    const segments = server.requests.filter((r) => r.path.startsWith('/hls/seg'));
    expect(segments.length).toBeGreaterThan(1);
    // ffmpeg would announce itself as Lavf.
    expect(segments.every((r) => !String(r.headers['user-agent']).includes('Lavf'))).toBe(true);
    // Named .mp4 by yt-dlp, but left as MPEG-TS since --fixup never: ffmpeg goes by content.
    expect(other).toEqual([join(outputDir, 'source.mp4')]);
    expect(await streamOf(other[0]!)).toMatchObject({ format: 'mpegts' });
  });

  it('downloads nothing while the gate is closed: stopped there, no request after it and no file', async () => {
    const jobDir = await newJobDir();
    const outputDir = join(jobDir, 'download');
    const { result, info, other, requestsAtGate } = await download(
      buildDownloadArgs({ url: server.url('/b.webm?gate-closed'), outputDir }),
      { cwd: jobDir, gateOpen: false },
    );
    expect(result.aborted).toBe(true);
    expect(info).toHaveLength(1);
    expect(requestsAtGate).toBeGreaterThan(0);
    expect(server.requests.length).toBe(requestsAtGate);
    expect(other).toEqual([]);
    expect(await readdir(outputDir)).toEqual([]);
  });

  it("runs the resident sandbox's warm-up: a job's options on made-up media, simulated, with no request and no file", async () => {
    const warmUp = buildWarmUpRun();
    /** The made-up media, but at the loopback server, so that a request would show. */
    async function runIn(folder: string, argv: string[]) {
      const at = server.url('/warm-up.webm');
      const info = JSON.parse(JSON.stringify(warmUp.info).replaceAll(String(warmUp.info.url), at)) as object;
      await writeFile(join(folder, warmUp.info_file), JSON.stringify(info));
      return download(argv, { cwd: folder });
    }
    const warmed = await newJobDir();
    const { result, info, other } = await runIn(warmed, warmUp.argv);
    expect(result.exitCode).toBe(0);
    expect(info.map((line) => (JSON.parse(line) as { id: string }).id)).toEqual(['media']);
    expect(other).toEqual([]);
    expect(server.requestsFor('/warm-up.webm')).toEqual([]);
    expect((await readdir(warmed)).sort()).toEqual(['download', warmUp.info_file]);
    // The control: the same run, not simulated, fetches the media and writes it.
    const control = await newJobDir();
    const fetched = await runIn(
      control,
      warmUp.argv.map((arg) => (arg === '--simulate' ? '--no-simulate' : arg)),
    );
    expect(fetched.result.exitCode).toBe(0);
    expect(server.downloadsOf('/warm-up.webm')).toBe(1);
    expect(await readdir(control)).toContain('source.mp3');
  });

  it('downloads a WebM straight from the URL', async () => {
    const jobDir = await newJobDir();
    const outputDir = join(jobDir, 'download');
    const { result, other } = await download(buildDownloadArgs({ url: server.url('/b.webm'), outputDir }), {
      cwd: jobDir,
    });
    expect(result.exitCode).toBe(0);
    expect(other).toEqual([join(outputDir, 'source.webm')]);
  });

  it('refuses an announced size over --max-filesize silently: exit 0, no path, no file', async () => {
    const jobDir = await newJobDir();
    const outputDir = join(jobDir, 'download');
    const { result, progress, other } = await download(
      buildDownloadArgs({ url: server.url('/a.m4a'), outputDir, maxBytes: 1000 }),
      { cwd: jobDir },
    );
    expect(result.exitCode).toBe(0);
    expect(other).toEqual([]);
    expect(progress).toEqual([]);
    expect(await readdir(outputDir)).toEqual([]);
  });

  it('does not enforce --max-filesize when the size is not announced: the worker must, from progress', async () => {
    const jobDir = await newJobDir();
    const outputDir = join(jobDir, 'download');
    const { result, progress, other } = await download(
      buildDownloadArgs({ url: server.url('/chunked.mp3'), outputDir, maxBytes: 1000 }),
      { cwd: jobDir },
    );
    expect(result.exitCode).toBe(0);
    expect(other).toEqual([join(outputDir, 'source.mp3')]);
    expect(progress.at(-1)!.downloadedBytes).toBeGreaterThan(1000);
    expect(progress[0]!.totalBytes).toBeNull();
  });

  it('classifies a page without media and a 404, with messages free of server paths', async () => {
    const jobDir = await newJobDir();
    const outputDir = join(jobDir, 'download');
    const page = await download(buildDownloadArgs({ url: server.url('/page.html'), outputDir }), { cwd: jobDir });
    expect(page.result.exitCode).not.toBe(0);
    expect(page.info).toEqual([]);
    expect(classifyYtDlpFailure(page.result.stderrTail)).toEqual({ code: 'not_media', httpStatus: null });

    const { result: missing, info } = await download(
      buildDownloadArgs({ url: server.url('/missing.mp3'), outputDir }),
      {
        cwd: jobDir,
      },
    );
    expect(missing.exitCode).not.toBe(0);
    expect(info).toEqual([]);
    expect(classifyYtDlpFailure(missing.stderrTail)).toEqual({ code: 'http_not_found', httpStatus: 404 });
    const message = cleanToolMessage(missing.stderrTail, [jobDir, dirname(jobDir)]);
    expect(message).toMatch(/^ERROR: .*HTTP Error 404/);
    expect(message).not.toMatch(/please report|\/tmp\//);
  });
});
