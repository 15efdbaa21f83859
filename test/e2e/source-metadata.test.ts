/**
 * What the service says of a source, end to end: the real service behind the repository's nginx
 * (X-Accel-Redirect, signed URLs answered by nginx alone), real yt-dlp and ffmpeg against a media
 * server on loopback serving files whose tags ffmpeg wrote here (ID3 in an MP3, Vorbis comments in
 * an Ogg and a FLAC) and a page with an og:title and an <audio>. The titles carry quotes, slashes,
 * markup, a bidirectional override, right-to-left letters, emoji, and 2,000 characters. Each
 * title is checked in the record, in the record of a second submission (born done), in the
 * Content-Disposition of the app's port and of nginx's signed and keyed paths, and in the name
 * of the file the CLI saves.
 */
import type { components } from '../../src/client/openapi-types.js';
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_DOWNLOAD_NAME_BYTES } from '../../src/delivery/download-name.js';
import { contentDisposition } from '../../src/delivery/representation.js';
import { startServiceBehindNginx } from '../support/behind-nginx.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import type { RunningNginx } from '../support/nginx.js';
import { ROOT, type JobBody, type ServiceHandle } from '../support/service.js';

const run = promisify(execFile);
const CLI = path.join(ROOT, 'dist/cli/main.js');

const QUOTES_AND_SLASHES = 'He said "Hi" / AC/DC <b>live</b>';
const RTL_AND_EMOJI = 'שיר ערש 🎵 👩‍👩‍👧 (גרסה 2)';
const LONG = 'A very long title, '.repeat(106).slice(0, 2000);
/** Served with every file, as a server's Last-Modified: yt-dlp's upload date. */
const LAST_MODIFIED = 'Mon, 30 Nov 2026 12:00:00 GMT';

/** The record's parts as the contract (openapi.json) gives them to clients. */
type Media = NonNullable<components['schemas']['Job']['media']>;
type Artifact = components['schemas']['Artifact'];

let work: string;
let media: MediaServer;
let svc: ServiceHandle;
let nginx: RunningNginx;

/** An audio file of 1 s, encoded by ffmpeg with these tags. */
async function tagged(name: string, codec: string[], tags: Record<string, string>): Promise<string> {
  const file = path.join(work, name);
  const metadata = Object.entries(tags).flatMap(([key, value]) => ['-metadata', `${key}=${value}`]);
  await run('ffmpeg', [
    '-nostdin',
    '-hide_banner',
    '-loglevel',
    'error',
    '-f',
    'lavfi',
    '-i',
    'sine=frequency=440:duration=1',
    ...codec,
    ...metadata,
    file,
  ]);
  return file;
}

/** Serves a file whole (GET and HEAD, no ranges), with a Last-Modified. */
function serveWithDate(urlPath: string, file: string, contentType: string): void {
  media.route(urlPath, async (req, res) => {
    const body = await readFile(file);
    res.writeHead(200, { 'content-type': contentType, 'content-length': body.length, 'last-modified': LAST_MODIFIED });
    res.end(req.method === 'HEAD' ? undefined : body);
  });
}

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'sf-metadata-'));
  media = await startMediaServer();
  const mp3 = await tagged('tagged.mp3', ['-c:a', 'libmp3lame', '-id3v2_version', '3'], {
    title: QUOTES_AND_SLASHES,
    artist: 'Band \u202eevil',
    album: 'Album One',
  });
  const ogg = await tagged('tagged.ogg', ['-c:a', 'libvorbis'], { title: RTL_AND_EMOJI, artist: 'זמרת' });
  const flac = await tagged('long.flac', ['-c:a', 'flac'], { TITLE: LONG });
  const embedded = await tagged('embedded.mp3', ['-c:a', 'libmp3lame'], {
    title: 'The file says this',
    artist: 'Embedded Artist',
  });
  const page = path.join(work, 'page.html');
  await writeFile(
    page,
    `<!doctype html><html><head><title>Not this</title>
<meta property="og:title" content="OG &quot;Page&quot; / שלום 🎵 &lt;i&gt;x&lt;/i&gt;">
</head><body><audio src="embedded.mp3" controls></audio></body></html>`,
  );
  serveWithDate('/tagged.mp3', mp3, 'audio/mpeg');
  serveWithDate('/tagged.ogg', ogg, 'audio/ogg');
  serveWithDate('/long.flac', flac, 'audio/flac');
  serveWithDate('/embedded.mp3', embedded, 'audio/mpeg');
  serveWithDate('/page.html', page, 'text/html; charset=utf-8');
  ({ svc, nginx } = await startServiceBehindNginx({ env: { FETCH_ALLOW_HOSTS: media.hostPort } }));
});

afterAll(async () => {
  await nginx?.stop();
  await svc?.stop();
  await media?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');
const wavOf = (job: JobBody) => job.result!.artifacts.find((a) => a.name === 'audio.wav') as Artifact;

/** Each source, with what its record must say. */
const SOURCES = [
  {
    label: 'an MP3 with ID3 tags: quotes, slashes, markup and an override',
    path: '/tagged.mp3',
    media: {
      extractor: 'Generic',
      id: 'tagged',
      title: 'He said "Hi" / AC/DC live',
      artist: 'Band evil',
      album: 'Album One',
    },
    downloadName: 'He said _Hi_ _ AC_DC live.wav',
  },
  {
    label: 'an Ogg with Vorbis comments: right-to-left letters and emoji',
    path: '/tagged.ogg',
    media: { extractor: 'Generic', id: 'tagged', title: RTL_AND_EMOJI, artist: 'זמרת', album: null },
    downloadName: `${RTL_AND_EMOJI}.wav`,
  },
  {
    label: 'a FLAC whose title has 2,000 characters',
    path: '/long.flac',
    media: { extractor: 'Generic', id: 'long', title: `${LONG.slice(0, 299).trimEnd()}…`, artist: null, album: null },
    // Cut to the bytes left beside each suffix (ASCII: a byte a character), without a trailing space.
    downloadName: `${LONG.slice(0, MAX_DOWNLOAD_NAME_BYTES - '.wav'.length).trimEnd()}.wav`,
    peaksName: `${LONG.slice(0, MAX_DOWNLOAD_NAME_BYTES - '.peaks.json'.length).trimEnd()}.peaks.json`,
  },
  {
    label: "a page's og:title, with its <audio>'s artist tag",
    path: '/page.html',
    media: {
      extractor: 'HTML5MediaEmbed',
      id: 'page-1',
      title: 'OG "Page" / שלום 🎵 x',
      artist: 'Embedded Artist',
      album: null,
    },
    downloadName: 'OG _Page_ _ שלום 🎵 x.wav',
  },
] as const;

const firstJobs = new Map<string, JobBody>();

describe.each(SOURCES)('$label', (source) => {
  it('is in the record, cleaned and bounded, with the download name made from its title', async () => {
    const submitted = await svc.submit(media.url(source.path));
    const done = await svc.waitForJob(submitted.job_id, ['done', 'failed']);
    expect(done.error).toBeNull();
    firstJobs.set(source.path, done);
    expect(done.media).toEqual({
      ...source.media,
      track: null,
      duration: null,
      upload_date: '2026-11-30',
      webpage_url: media.url(source.path),
    });
    const title = (done.media as Media).title!;
    expect([...title].length).toBeLessThanOrEqual(300);
    const wav = wavOf(done);
    expect(wav.download_name).toBe(source.downloadName);
    expect(Buffer.byteLength(wav.download_name)).toBeLessThanOrEqual(MAX_DOWNLOAD_NAME_BYTES);
    const peaks = done.result!.artifacts.find((a) => a.name === 'peaks.json') as Artifact;
    expect(peaks.download_name).toBe(
      'peaksName' in source ? source.peaksName : source.downloadName.replace(/\.wav$/, '.peaks.json'),
    );
  });

  it("names the download on nginx's signed and keyed paths and on the app's own port", async () => {
    const done = firstJobs.get(source.path)!;
    const cid = done.result!.content_id;
    const wav = wavOf(done);
    const disposition = contentDisposition(source.downloadName);
    const keyed = `${wav.path}?filename=${encodeURIComponent(wav.download_name)}`;
    const key = { authorization: `Bearer ${svc.apiKey}` };

    // nginx, signed: answered by nginx alone (no trip to the app), named by the URL's signed filename.
    const signed = await fetch(nginx.url(wav.signed_url));
    expect(signed.status).toBe(200);
    expect(signed.headers.get('content-disposition')).toBe(disposition);
    expect(sha256(new Uint8Array(await signed.arrayBuffer()))).toBe(cid);
    const [line] = await nginx.accessLines(
      (entry) => entry.cid === cid && entry.status === '200' && entry.upstream_time === '',
      (lines) => lines.length > 0,
    );
    expect(line).toBeDefined();

    // nginx, keyed: the app checks the key and names the file, nginx streams it.
    const viaNginx = await fetch(nginx.url(keyed), { headers: key });
    expect(viaNginx.status).toBe(200);
    expect(viaNginx.headers.get('content-disposition')).toBe(disposition);
    expect(sha256(new Uint8Array(await viaNginx.arrayBuffer()))).toBe(cid);

    // The app's own port, signed and keyed: the same header (its bytes are delivery's to send).
    for (const [target, headers] of [
      [wav.signed_url, {}],
      [keyed, key],
    ] as const) {
      const res = await fetch(`${svc.baseUrl}${target}`, { headers });
      expect(res.status, target).toBe(200);
      expect(res.headers.get('content-disposition'), target).toBe(disposition);
      await res.arrayBuffer();
    }
  });

  it('is in the record of a second submission, born done, and names its download the same', async () => {
    const first = firstJobs.get(source.path)!;
    const again = await svc.submit(media.url(source.path));
    expect(again).toMatchObject({ status: 'done', born_done: true });
    expect(again.media).toEqual(first.media);
    expect(again.result!.content_id).toBe(first.result!.content_id);
    expect(wavOf(again).download_name).toBe(source.downloadName);
    expect((await svc.getJob(again.job_id)).media).toEqual(first.media);
    const res = await fetch(nginx.url(wavOf(again).signed_url));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-disposition')).toBe(contentDisposition(source.downloadName));
    await res.arrayBuffer();
  });
});

describe('the CLI', () => {
  it.each(SOURCES)('saves the WAV under its title when -o is not given, through nginx: $label', async (source) => {
    const folder = await mkdtemp(path.join(work, 'cli-'));
    const child = spawn(process.execPath, [CLI, 'fetch', media.url(source.path)], {
      cwd: folder,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        SOURCE_FETCH_URL: nginx.url(''),
        SOURCE_FETCH_API_KEY: svc.apiKey,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code, output).toBe(0);
    expect(output).toContain(`wrote ${source.downloadName} (`);
    expect(await readdir(folder)).toEqual([source.downloadName]);
    const saved = path.join(folder, source.downloadName);
    expect((await stat(saved)).isFile()).toBe(true);
    expect(sha256(await readFile(saved))).toBe(firstJobs.get(source.path)!.result!.content_id);
  });
});
