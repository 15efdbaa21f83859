import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startCountingListener, type CountingListener } from '../support/counting-listener.js';
import { makeTone } from '../support/media.js';
import { hlsPlaylist, startMediaServer, type MediaServer } from '../support/media-server.js';
import { ROOT, startService, type ServiceHandle } from '../support/service.js';

/**
 * The tools are confined to the egress guard, through the public API with the real yt-dlp and
 * ffmpeg. The media server is allowed (FETCH_ALLOW_HOSTS names it exactly); the trap is a
 * listener on another loopback port, which the policy refuses: it stands in for
 * 169.254.169.254 or an internal host, and counts TCP connections. Every way of reaching it
 * must end with a job failed (or a submission refused) with a code that names the refusal,
 * and the trap must see no connection at all. Controls on the allowed server still end done.
 *
 * test/e2e/sandbox.test.ts shows, with the same inputs run unconfined, that each of them really
 * does reach the trap when nothing stops it.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
/** test/support/ytdlp-plugins: HostileInfoIE answers hostile extractor output for /hostile-info/ URLs. */
const PLUGIN_DIR = path.join(ROOT, 'test/support/ytdlp-plugins');
const NOPROXY = { http_headers: { 'Ytdl-request-proxy': '__noproxy__' } };
const smuggle = (url: string) => `${url}#__youtubedl_smuggle=${encodeURIComponent(JSON.stringify(NOPROXY))}`;

let media: MediaServer;
let trap: CountingListener;
let svc: ServiceHandle;
let segment: Buffer;

function servePlaylist(route: string, lines: string[]): void {
  media.route(route, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/vnd.apple.mpegurl' });
    res.end(hlsPlaylist(lines));
  });
}

beforeAll(async () => {
  media = await startMediaServer();
  trap = await startCountingListener('127.0.0.1');
  const tone = await makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'mp3' });
  segment = await readFile(tone.path);
  media.serveFile('/direct.mp3', tone.path, { contentType: 'audio/mpeg' });
  media.route('/seg0.mp3', (_req, res) => {
    res.writeHead(200, { 'content-type': 'audio/mpeg', 'content-length': segment.length });
    res.end(segment);
  });
  servePlaylist('/local.m3u8', ['#EXTINF:2.0,', media.url('/seg0.mp3')]);
  // The trap's own playlist: what a smuggled, unproxied yt-dlp would fetch its segments from.
  servePlaylist('/trap-segments.m3u8', ['#EXTINF:2.0,', `http://${trap.authority}/seg0.ts`]);
  svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, PYTHONPATH: PLUGIN_DIR } });
});

afterAll(async () => {
  await svc?.stop();
  await media?.close();
  await trap?.close();
});

/** Submits, waits for the end, checks the failure code (one of `codes`), and that the trap has seen nothing. */
async function expectFailed(url: string, ...codes: string[]) {
  const job = await svc.waitForJob((await svc.submit(url)).job_id, ['done', 'failed', 'canceled'], 60_000);
  expect({ status: job.status, code: job.error?.code }, JSON.stringify(job.error)).toEqual({
    status: 'failed',
    code: expect.toBeOneOf(codes),
  });
  await trap.settle();
  expect(trap.connections).toBe(0);
  return job;
}

describe('confinement, through the API', () => {
  it('health reports the tools confined', async () => {
    const res = await fetch(`${svc.baseUrl}/healthz`);
    const body = (await res.json()) as { confinement: unknown; status: string };
    expect(res.status).toBe(200);
    expect(body.status).toBe('ok');
    expect(body.confinement).toEqual({ mode: 'netns', ok: true, reason: null });
  });

  it("imports yt-dlp into the resident sandbox, makes its warm-up run and shares its TLS context and choice of extractors (the yt-dlp under test's)", async () => {
    const ready = await vi.waitFor(
      () => {
        const line = svc.logs.find((logged) => logged.msg === 'tool runs' && logged.runs === 'resident');
        if (!line) throw new Error('the resident sandbox is not ready yet');
        return line;
      },
      { timeout: 60_000, interval: 50 },
    );
    expect(ready).toMatchObject({
      ytdlp: 'imported',
      warm_up: 'done',
      shared_with_runs: ['tls context', 'extractor choice', 'extractor list'],
    });
  });

  it('control: a direct file on the allowed server ends done', async () => {
    const job = await svc.waitForJob((await svc.submit(media.url('/direct.mp3'))).job_id, ['done', 'failed']);
    expect(job.error).toBeNull();
    expect(job.status).toBe('done');
  });

  it('control: a local HLS playlist on the allowed server ends done', async () => {
    const job = await svc.waitForJob((await svc.submit(media.url('/local.m3u8'))).job_id, ['done', 'failed']);
    expect(job.error).toBeNull();
    expect(job.status).toBe('done');
  });

  it('1. a smuggled-options fragment in the submitted URL is refused at submission', async () => {
    const res = await svc.request('/sources', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ url: smuggle(media.url('/trap-segments.m3u8')) }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { code: string }).code).toBe('url_smuggled_data');
    await trap.settle();
    expect(trap.connections).toBe(0);
  });

  it('2. the same fragment in a redirect from the allowed server fails the job', async () => {
    media.redirect('/redirect-smuggle', smuggle(media.url('/trap-segments.m3u8')));
    const job = await expectFailed(media.url('/redirect-smuggle'), 'destination_refused');
    expect(job.error?.detail).toMatch(/smuggled/);
    expect(media.requestsFor('/redirect-smuggle').length).toBeGreaterThan(0);
  });

  it('3. a redirect to ftp:// on the trap fails the job, echoing nothing of the trap', async () => {
    media.redirect('/redirect-ftp', `ftp://${trap.authority}/a.mp3`);
    const job = await expectFailed(media.url('/redirect-ftp'), 'destination_refused');
    expect(job.error?.detail).toMatch(/ftp:/);
    expect(JSON.stringify(job.error)).not.toMatch(/leak|HTTP\/1\.1 200/);
  });

  it('4. an HLS playlist whose segments are ftp:// on the trap fails the job quickly', async () => {
    servePlaylist('/ftp-segments.m3u8', [
      '#EXTINF:2.0,',
      `ftp://${trap.authority}/seg0.ts`,
      '#EXTINF:2.0,',
      `ftp://${trap.authority}/seg1.ts`,
    ]);
    const started = Date.now();
    // Refused by the sandbox when the downloader connects on its own (Debian's 2023.03.04), or by
    // the guard when it asks its proxy for the ftp: URL (a current yt-dlp, test/support/ytdlp-under-test.ts).
    await expectFailed(media.url('/ftp-segments.m3u8'), 'direct_connection_refused', 'destination_refused');
    expect(Date.now() - started).toBeLessThan(30_000);
  });

  it('5. a SAMPLE-AES HLS playlist (handed to ffmpeg) with an httpproxy:// segment on the trap fails the job', async () => {
    servePlaylist('/sample-aes.m3u8', [
      `#EXT-X-KEY:METHOD=SAMPLE-AES,URI="${media.url('/key.bin')}",KEYFORMAT="identity"`,
      '#EXTINF:2.0,',
      `httpproxy://${trap.authority}/127.0.0.1:80/seg.ts`,
    ]);
    const job = await expectFailed(media.url('/sample-aes.m3u8'), 'unsupported_protocol');
    expect(job.error?.detail).toMatch(/ffmpeg/);
  });

  it('a percent-encoded smuggle marker anywhere in the URL is refused too', async () => {
    for (const url of [
      `${media.url('/a.mp3')}?x=%5F%5Fyoutubedl%5Fsmuggle`,
      `${media.url('/__YouTubeDL_Smuggle/a.mp3')}`,
      `${media.url('/a.mp3')}#%255F%255Fyoutubedl_smuggle=x`,
    ]) {
      const res = await svc.request('/sources', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ url }),
      });
      expect(res.status, url).toBe(400);
      expect(((await res.json()) as { code: string }).code).toBe('url_smuggled_data');
    }
  });

  it('a plain fragment is dropped before the URL reaches the job and yt-dlp', async () => {
    const submitted = await svc.submit(`${media.url('/direct.mp3')}#t=10`);
    expect(submitted.url).toBe(media.url('/direct.mp3'));
    const job = await svc.waitForJob(submitted.job_id, ['done', 'failed']);
    expect(job.status).toBe('done');
  });
});

describe('confinement, against hostile extractor output (what the download run would act on)', () => {
  it('a format whose headers turn the proxy off is refused before its download starts', async () => {
    const job = await expectFailed(media.url(`/hostile-info/noproxy/${trap.authority}`), 'direct_connection_refused');
    expect(job.error?.detail).toMatch(/Ytdl-request-proxy/);
  });

  it('an ftp:// format that claims to be http is never chosen', async () => {
    await expectFailed(media.url(`/hostile-info/ftp/${trap.authority}`), 'unsupported_protocol');
  });

  it('a WebSocket format is never chosen', async () => {
    await expectFailed(media.url(`/hostile-info/websocket/${trap.authority}`), 'unsupported_protocol');
  });

  it('an RTMP format (for rtmpdump, an external downloader) is never chosen', async () => {
    await expectFailed(media.url(`/hostile-info/rtmp/${trap.authority}`), 'unsupported_protocol');
  });
});

describe('confinement, against downloads that name network sources for ffmpeg', () => {
  // Served as audio, so yt-dlp downloads the text as it is and ffmpeg gets the file.
  const hostile: Array<[string, () => string]> = [
    [
      'an HLS playlist of tcp: and http: segments on the trap',
      () => hlsPlaylist(['#EXTINF:2.0,', `tcp://${trap.authority}/a`, '#EXTINF:2.0,', `http://${trap.authority}/b.ts`]),
    ],
    [
      'an HLS playlist of rtmp: and httpproxy: segments on the trap',
      () =>
        hlsPlaylist([
          '#EXTINF:2.0,',
          `rtmp://${trap.authority}/live/a`,
          '#EXTINF:2.0,',
          `httpproxy://${trap.authority}/127.0.0.1:80/b.ts`,
        ]),
    ],
    [
      'an HLS playlist of concat:, subfile, and data: segments',
      () =>
        hlsPlaylist([
          '#EXTINF:2.0,',
          `concat:tcp://${trap.authority}|x`,
          '#EXTINF:2.0,',
          `subfile,,start,0,end,9,,:tcp://${trap.authority}`,
          '#EXTINF:2.0,',
          'data:audio/mpeg;base64,AAAA',
        ]),
    ],
    [
      'an ffconcat script naming the trap',
      () => `ffconcat version 1.0\nfile 'tcp://${trap.authority}/a'\nfile 'http://${trap.authority}/b.mp3'\n`,
    ],
  ];
  for (const [name, body] of hostile) {
    it(`${name}: not_audio`, async () => {
      const route = `/hostile-${name.replace(/\W+/g, '-')}.mp3`;
      media.route(route, (_req, res) => {
        res.writeHead(200, { 'content-type': 'audio/mpeg' });
        res.end(body());
      });
      await expectFailed(media.url(route), 'not_audio');
    });
  }
});

describe('fail closed: a host where the tools cannot be confined', () => {
  let blocked: ServiceHandle;
  let dir: string;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'sf-no-userns-'));
    // What util-linux unshare says in a container whose seccomp profile forbids namespaces.
    const unshare = path.join(dir, 'unshare');
    await writeFile(unshare, '#!/bin/sh\necho "unshare: unshare failed: Operation not permitted" >&2\nexit 1\n');
    await chmod(unshare, 0o755);
    blocked = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, UNSHARE_PATH: unshare } });
  });

  afterAll(async () => {
    await blocked?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('health says so, with the reason, and answers 503', async () => {
    const res = await fetch(`${blocked.baseUrl}/healthz`);
    expect(res.status).toBe(503);
    const body = (await res.json()) as { can_fetch: boolean; confinement: unknown };
    expect(body.can_fetch).toBe(false);
    expect(body.confinement).toEqual({
      mode: 'netns',
      ok: false,
      reason: 'unshare: unshare failed: Operation not permitted',
    });
    expect(blocked.logs.some((line) => line.msg.startsWith('the tools cannot be confined'))).toBe(true);
  });

  it('refuses submissions with 503 confinement_unavailable, and downloads nothing', async () => {
    const before = media.requestsFor('/direct.mp3').length;
    const res = await blocked.request('/sources', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ url: media.url('/direct.mp3') }),
    });
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toMatch(/application\/problem\+json/);
    expect(((await res.json()) as { code: string }).code).toBe('confinement_unavailable');
    expect(media.requestsFor('/direct.mp3').length).toBe(before);
  });
});

describe('TOOL_CONFINEMENT=off: the explicit opt-out', () => {
  let unconfined: ServiceHandle;

  beforeAll(async () => {
    unconfined = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, TOOL_CONFINEMENT: 'off' } });
  });

  afterAll(async () => {
    await unconfined?.stop();
  });

  it('fetches, warns at start, and health reports it degraded', async () => {
    expect(unconfined.logs.some((line) => line.level === 40 && line.msg.startsWith('TOOL_CONFINEMENT=off'))).toBe(true);
    const res = await fetch(`${unconfined.baseUrl}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      status: 'degraded',
      can_fetch: true,
      confinement: { mode: 'off', ok: true, reason: 'TOOL_CONFINEMENT=off' },
    });
    const job = await unconfined.waitForJob((await unconfined.submit(media.url('/direct.mp3'))).job_id, [
      'done',
      'failed',
    ]);
    expect(job.status).toBe('done');
  });
});
