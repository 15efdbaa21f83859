import { readFile, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ipv6LoopbackAvailable, startCountingListener, type CountingListener } from '../support/counting-listener.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { processesMatching } from '../support/processes.js';
import { startService, type ServiceHandle } from '../support/service.js';

/**
 * The egress guard end to end, on loopback only: the media server is allowed (exactly
 * 127.0.0.1:<its port>), but the places it sends the downloader to are not. The refused targets
 * are listeners run here that count connections: each must see none, and each job must fail
 * with destination_refused naming the host. Off-machine destinations (169.254.169.254, private
 * ranges) are covered by the unit tests with an injected resolver and dialer only.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');

let media: MediaServer;
let svc: ServiceHandle;
let toneBytes: Buffer;
let v4: CountingListener;
let v6: CountingListener | undefined;

beforeAll(async () => {
  media = await startMediaServer();
  v4 = await startCountingListener('127.0.0.1');
  if (await ipv6LoopbackAvailable()) v6 = await startCountingListener('::1');
  const tone = await makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'mp3' });
  media.serveFile('/ok.mp3', tone.path, { contentType: 'audio/mpeg' });
  toneBytes = await readFile(tone.path);
  svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort } });
});

afterAll(async () => {
  await svc?.stop();
  await media?.close();
  await v4?.close();
  await v6?.close();
});

async function expectRefused(url: string, host: string) {
  const job = await svc.waitForJob((await svc.submit(url)).job_id, ['done', 'failed', 'canceled'], 60_000);
  expect(job.status).toBe('failed');
  expect(job.error?.code).toBe('destination_refused');
  expect(job.error?.message).toBe('The source led the downloader to a destination the service does not fetch from.');
  // The guard's reason, naming the host.
  expect(job.error?.detail).toContain(host);
  // The per-job proxy credentials never reach the job record.
  expect(JSON.stringify(job)).not.toMatch(/@127\.0\.0\.1:\d+/);
  return job;
}

/** A slow allowed HLS stream (its one segment takes 1.5 s), to keep yt-dlp running long enough to be looked at. */
let slowRoutes = 0;
function slowHls(): string {
  const n = ++slowRoutes;
  media.route(`/slow.m3u8`, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/vnd.apple.mpegurl' });
    res.end(
      `#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\n${media.url('/slow-seg.mp3')}\n#EXT-X-ENDLIST\n`,
    );
  });
  media.route('/slow-seg.mp3', async (_req, res) => {
    res.writeHead(200, { 'content-type': 'audio/mpeg', 'content-length': toneBytes.length });
    res.write(toneBytes.subarray(0, 100));
    await sleep(1500);
    res.end(toneBytes.subarray(100));
  });
  return `n=${n}`;
}

/** The job's proxy password, from its yt-dlp config file, which only the service's user may read. */
async function proxyPasswordIn(configFile: string): Promise<string> {
  expect((await stat(configFile)).mode & 0o777).toBe(0o600);
  const config = await readFile(configFile, 'utf8');
  const proxy = /^--proxy "(http:\/\/[^"\s]+@127\.0\.0\.1:\d+)"$/m.exec(config)![1]!;
  const password = new URL(proxy).password;
  expect(password.length).toBeGreaterThanOrEqual(32);
  return password;
}

async function waitForResident(service: ServiceHandle): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!service.logs.some((line) => line.msg === 'tool runs' && line.runs === 'resident')) {
    if (Date.now() > deadline) throw new Error('the resident sandbox did not start');
    await sleep(50);
  }
}

describe('egress guard, end to end', () => {
  it('lets the allowed media server through (the guard is in the path and works)', async () => {
    const job = await svc.waitForJob((await svc.submit(media.url('/ok.mp3'))).job_id, ['done', 'failed']);
    expect(job.error).toBeNull();
    expect(job.status).toBe('done');
  });

  it('refuses a redirect to 127.0.0.1 on another port; the target sees no connection', async () => {
    media.redirect('/to-other-port', `http://${v4.authority}/x.mp3`);
    await expectRefused(media.url('/to-other-port'), '127.0.0.1');
    expect(media.requestsFor('/to-other-port').length).toBeGreaterThan(0);
    expect(v4.connections).toBe(0);
  });

  it('refuses a redirect to [::1]; the target sees no connection', async (ctx) => {
    if (!v6) ctx.skip('no IPv6 loopback on this machine');
    media.redirect('/to-v6', `http://${v6!.authority}/`);
    await expectRefused(media.url('/to-v6'), '::1');
    expect(v6!.connections).toBe(0);
  });

  it('refuses a redirect to localhost by name', async () => {
    media.redirect('/to-localhost', `http://localhost:${v4.port}/x.mp3`);
    await expectRefused(media.url('/to-localhost'), 'localhost');
    expect(v4.connections).toBe(0);
  });

  it('refuses HLS segments on a refused loopback port; no segment request arrives', async () => {
    const segments = [0, 1, 2].map((i) => `#EXTINF:2.0,\nhttp://${v4.authority}/seg${i}.ts`).join('\n');
    media.route('/list.m3u8', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/vnd.apple.mpegurl' });
      res.end(
        `#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:0\n${segments}\n#EXT-X-ENDLIST\n`,
      );
    });
    await expectRefused(media.url('/list.m3u8'), '127.0.0.1');
    expect(media.requestsFor('/list.m3u8').length).toBeGreaterThan(0);
    expect(v4.connections).toBe(0);
  });

  it('refuses an HLS variant playlist on a refused loopback port', async () => {
    media.route('/master.m3u8', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/vnd.apple.mpegurl' });
      res.end(`#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=64000,CODECS="mp4a.40.2"\nhttp://${v4.authority}/audio.m3u8\n`);
    });
    await expectRefused(media.url('/master.m3u8'), '127.0.0.1');
    expect(v4.connections).toBe(0);
  });

  it('never hands a non-HTTP format (rtmp, rtsp) to an external tool that would connect around the guard', async () => {
    // rtmpdump (a yt-dlp recommendation, installed with it) would connect to the target directly.
    for (const [route, src] of [
      ['/rtmp.html', `rtmp://${v4.authority}/live/stream`],
      ['/rtsp.html', `rtsp://${v4.authority}/stream`],
    ] as const) {
      media.route(route, (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/html' });
        res.end(`<html><body><audio src="${src}"></audio></body></html>`);
      });
      const job = await svc.waitForJob((await svc.submit(media.url(route))).job_id, ['done', 'failed'], 60_000);
      expect(job.status).toBe('failed');
      expect(job.error?.code).toBe('unsupported_protocol');
    }
    await sleep(300);
    expect(v4.connections).toBe(0);
  });

  it('runs yt-dlp with the guard as its proxy and the native HLS downloader, so segments cannot bypass the guard (RESIDENT_SANDBOX=off)', async () => {
    // Each tool started on its own: yt-dlp's arguments are on its command line, to be read.
    const own = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, RESIDENT_SANDBOX: 'off' } });
    try {
      const submitted = await own.submit(media.url(`/slow.m3u8?${slowHls()}`));
      let cmdline = '';
      const deadline = Date.now() + 20_000;
      while (!cmdline.includes('--hls-prefer-native') && Date.now() < deadline) {
        for (const pid of await processesMatching(submitted.job_id)) {
          const text = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
          if (text.includes('--hls-prefer-native')) cmdline = text.join(' ');
        }
        await sleep(50);
      }
      expect(cmdline).toContain('--hls-prefer-native');
      expect(cmdline).toContain('--no-playlist');
      // The guard's per-job credentials are not on the command line, which every local user can
      // read, but in a file only the service's user can.
      expect(cmdline).not.toContain('--proxy');
      const configFile = /--config-locations (\S+)/.exec(cmdline)![1]!;
      const password = await proxyPasswordIn(configFile);
      expect(cmdline).not.toContain(password);
      const job = await own.waitForJob(submitted.job_id, ['done', 'failed']);
      expect(job.error).toBeNull();
      expect(job.status).toBe('done');
      // The proxy credentials are in no log line.
      expect(own.output()).not.toContain(password);
    } finally {
      await own.stop();
    }
  });

  it("runs yt-dlp in the resident sandbox with no arguments on any command line, the guard's credentials in a 0600 file", async () => {
    await waitForResident(svc);
    const submitted = await svc.submit(media.url(`/slow.m3u8?${slowHls()}`));
    let configFile: string | undefined;
    let cmdlines: string[][] = [];
    const deadline = Date.now() + 20_000;
    // Once the run has made its gate's FIFO, the processes naming the job's folder are the run's
    // leader ("sandbox", folder) and yt-dlp's ("yt-dlp", folder); the gate's shell names none. The
    // job's ffmpeg, started early on its FIFO, has its run's leader too, and its own command line
    // of paths, checked for the password with the rest.
    while (configFile === undefined && Date.now() < deadline) {
      cmdlines = [];
      for (const pid of await processesMatching(submitted.job_id)) {
        const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => ''))
          .split('\0')
          .filter((arg) => arg !== '');
        if (argv.length === 0) continue; // it ended between the listing and the read
        cmdlines.push(argv);
        const folder = argv[0] === 'yt-dlp' ? argv[1] : undefined;
        if (folder && (await stat(path.join(folder, 'gate')).catch(() => null)))
          configFile = path.join(folder, 'yt-dlp.conf');
      }
      await sleep(50);
    }
    expect(configFile).toBeDefined();
    for (const argv of cmdlines.filter(([command]) => command !== 'ffmpeg'))
      expect(argv.length, argv.join(' ')).toBe(2);
    const password = await proxyPasswordIn(configFile!);
    expect(cmdlines.flat().join(' ')).not.toContain(password);
    const job = await svc.waitForJob(submitted.job_id, ['done', 'failed']);
    expect(job.error).toBeNull();
    expect(job.status).toBe('done');
    expect(svc.output()).not.toContain(password);
  });
});

/**
 * A deployment whose environment exempts hosts from proxying (NO_PROXY=169.254.169.254, NO_PROXY=*)
 * must not open a way around the guard. Python's urllib, under yt-dlp, skips `--proxy` for every
 * host `no_proxy`/`NO_PROXY` matches and connects directly; runProcess therefore starts every tool
 * without any *_proxy variable. Here the service runs with both spellings naming the refused
 * loopback target (its own listener, so a leak here is not blamed on the tests above).
 */
describe('egress guard, end to end, with NO_PROXY in the service environment', () => {
  let bypassSvc: ServiceHandle;
  let target: CountingListener;

  beforeAll(async () => {
    target = await startCountingListener('127.0.0.1');
    bypassSvc = await startService({
      env: {
        FETCH_ALLOW_HOSTS: media.hostPort,
        NO_PROXY: `${target.authority},127.0.0.1,169.254.169.254`,
        no_proxy: `${target.authority},127.0.0.1`,
        No_Proxy: '*',
      },
    });
  });

  afterAll(async () => {
    await bypassSvc?.stop();
    await target?.close();
  });

  async function expectRefusedHere(url: string) {
    const job = await bypassSvc.waitForJob(
      (await bypassSvc.submit(url)).job_id,
      ['done', 'failed', 'canceled'],
      60_000,
    );
    expect(job.error?.code).toBe('destination_refused');
    expect(job.status).toBe('failed');
    expect(job.error?.detail).toContain('127.0.0.1');
    return job;
  }

  it('refuses a redirect to the NO_PROXY target; the target sees no connection', async () => {
    media.redirect('/no-proxy-redirect', `http://${target.authority}/x.mp3`);
    await expectRefusedHere(media.url('/no-proxy-redirect'));
    expect(media.requestsFor('/no-proxy-redirect').length).toBeGreaterThan(0);
    expect(target.connections).toBe(0);
  });

  it('refuses a page whose audio is on the NO_PROXY target; the target sees no connection', async () => {
    media.route('/no-proxy-page.html', (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(`<html><body><audio src="http://${target.authority}/x.mp3"></audio></body></html>`);
    });
    await expectRefusedHere(media.url('/no-proxy-page.html'));
    expect(media.requestsFor('/no-proxy-page.html').length).toBeGreaterThan(0);
    expect(target.connections).toBe(0);
  });

  it('still fetches the allowed media server, through the guard', async () => {
    const job = await bypassSvc.waitForJob((await bypassSvc.submit(media.url('/ok.mp3'))).job_id, ['done', 'failed']);
    expect(job.error).toBeNull();
    expect(job.status).toBe('done');
    expect(target.connections).toBe(0);
  });
});
