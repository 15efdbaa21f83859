import { execFile } from 'node:child_process';
import { createCipheriv, randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { copyFile, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COOKIES_SAFE_SINCE, isAtLeast } from '../../src/tools/ytdlp-version.js';
import { makeTone } from '../support/media.js';
import { hlsPlaylist, startMediaServer, type MediaServer, type RecordedRequest } from '../support/media-server.js';
import { startService, type ServiceHandle } from '../support/service.js';
import { DEBIAN_YTDLP, YTDLP_UNDER_TEST, ytdlpVersion } from '../support/ytdlp-under-test.js';

/**
 * YTDLP_COOKIES_FILE with the real service and yt-dlp, confined as always. What is tested depends
 * on the yt-dlp under test (test/support/ytdlp-under-test.ts):
 *
 * - one that keeps cookies to their own domains (2023.07.06 or later: the projects that run a
 *   current yt-dlp): a media server on 127.0.0.1 that answers only requests carrying the
 *   operator's cookie gets it (so the file is readable inside the sandbox); another host,
 *   127.0.0.2, never does, whether a redirect hop, a page's audio or an HLS playlist's segments
 *   and key lead there; neither the file's path nor its content appears in the service's log, in a
 *   job record or in a job's error;
 * - an older one (Debian stable's 2023.03.04, which the e2e project runs): start-up refuses
 *   YTDLP_COOKIES_FILE and says why (CVE-2023-35934).
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const SECRET = `sess-${randomBytes(12).toString('hex')}`;
const PLANTED = `planted-${randomBytes(6).toString('hex')}`;
const VERSION = ytdlpVersion(YTDLP_UNDER_TEST);
const KEEPS_COOKIES_HOME = isAtLeast(VERSION, COOKIES_SAFE_SINCE);
const HLS_KEY = randomBytes(16);
const HLS_IV = randomBytes(16);

/** The cookie's own host, 127.0.0.1. */
let media: MediaServer;
/** Another host, 127.0.0.2: serves anyone, and must never see the cookie. */
let other: MediaServer;
let dir: string;
let cookiesFile: string;
let cookiesText: string;
let audio: Buffer;

/** Audio for a request with the operator's cookie, 403 for any other; optionally setting a cookie of the site's own. */
function membersOnly(opts: { setCookie?: string; status?: number } = {}) {
  return (req: IncomingMessage, res: ServerResponse) => {
    if (!String(req.headers.cookie ?? '').includes(`session=${SECRET}`)) {
      res.writeHead(403, { 'content-type': 'text/plain' }).end('members only\n');
      return;
    }
    if (opts.status) {
      res.writeHead(opts.status, { 'content-type': 'text/plain' }).end('gone\n');
      return;
    }
    res.writeHead(200, {
      'content-type': 'audio/mpeg',
      'content-length': audio.length,
      ...(opts.setCookie ? { 'set-cookie': opts.setCookie } : {}),
    });
    res.end(req.method === 'HEAD' ? undefined : audio);
  };
}

/** `answer` for a request with the operator's cookie, 403 for any other. */
function membersOnlyAnswer(contentType: string, body: () => string) {
  return (req: IncomingMessage, res: ServerResponse) => {
    if (!String(req.headers.cookie ?? '').includes(`session=${SECRET}`)) {
      res.writeHead(403, { 'content-type': 'text/plain' }).end('members only\n');
      return;
    }
    res.writeHead(200, { 'content-type': contentType }).end(body());
  };
}

/**
 * The routes by which a cookie of 127.0.0.1 could reach 127.0.0.2, each submitted at 127.0.0.1
 * (which answers only with the cookie) and ending at 127.0.0.2 (which answers anyone) on paths of
 * its own. `debianLeaks`: Debian's 2023.03.04 sends the cookie there (the controls below). On a
 * plain redirect hop it does not: it builds the download's Cookie header for the final URL's host,
 * which has no cookie; the page's <audio> leads through the same redirect and does leak.
 */
const CROSS_HOST_ROUTES = [
  { name: 'a redirect hop to another host', submit: '/members/to-other', reaches: ['/tone.mp3'], debianLeaks: false },
  {
    name: "a page whose audio is an open redirect on the cookie's host, to another host",
    submit: '/members/page.html',
    reaches: ['/page-audio.mp3'],
    debianLeaks: true,
  },
  {
    name: "an HLS playlist on the cookie's host, its segments on another host",
    submit: '/members/segments-elsewhere.m3u8',
    reaches: ['/seg0.mp3'],
    debianLeaks: true,
  },
  {
    name: "an AES-128 HLS playlist on the cookie's host, its key and segment on another host",
    submit: '/members/key-elsewhere.m3u8',
    reaches: ['/key.bin', '/enc0.mp3'],
    debianLeaks: true,
  },
] as const;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-cookies-'));
  cookiesFile = path.join(dir, `operator-cookies-${randomBytes(4).toString('hex')}.txt`);
  cookiesText = `# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\t${SECRET}\n`;
  await writeFile(cookiesFile, cookiesText, { mode: 0o600 });
  audio = await readFile(
    (await makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'mp3' })).path,
  );
  media = await startMediaServer();
  other = await startMediaServer({ host: '127.0.0.2' });
  media.route('/members/tone.mp3', membersOnly());
  media.route('/members/sets-cookie.mp3', membersOnly({ setCookie: `planted=${PLANTED}; Path=/` }));
  media.route('/members/gone.mp3', membersOnly({ status: 410 }));

  const plain = (type: string, body: Buffer) => (req: IncomingMessage, res: ServerResponse) => {
    res.writeHead(200, { 'content-type': type, 'content-length': body.length });
    res.end(req.method === 'HEAD' ? undefined : body);
  };
  other.route('/tone.mp3', plain('audio/mpeg', audio));
  other.route('/page-audio.mp3', plain('audio/mpeg', audio));
  other.route('/seg0.mp3', plain('audio/mpeg', audio));
  other.route('/key.bin', plain('application/octet-stream', HLS_KEY));
  const cipher = createCipheriv('aes-128-cbc', HLS_KEY, HLS_IV);
  other.route('/enc0.mp3', plain('audio/mpeg', Buffer.concat([cipher.update(audio), cipher.final()])));

  // An open redirect on the cookie's site (members only, so that the cookie is known to have been sent there).
  media.route('/members/to-other', (req, res) => {
    if (!String(req.headers.cookie ?? '').includes(`session=${SECRET}`)) return void res.writeHead(403).end();
    res
      .writeHead(302, { location: other.url(new URL(req.url!, 'http://x').searchParams.get('to') ?? '/tone.mp3') })
      .end();
  });
  media.route(
    '/members/page.html',
    membersOnlyAnswer(
      'text/html',
      () => `<html><body><audio src="${media.url('/members/to-other?to=/page-audio.mp3')}"></audio></body></html>`,
    ),
  );
  media.route(
    '/members/segments-elsewhere.m3u8',
    membersOnlyAnswer('application/vnd.apple.mpegurl', () => hlsPlaylist(['#EXTINF:2.0,', other.url('/seg0.mp3')])),
  );
  media.route(
    '/members/key-elsewhere.m3u8',
    membersOnlyAnswer('application/vnd.apple.mpegurl', () =>
      hlsPlaylist([
        `#EXT-X-KEY:METHOD=AES-128,URI="${other.url('/key.bin')}",IV=0x${HLS_IV.toString('hex')}`,
        '#EXTINF:2.0,',
        other.url('/enc0.mp3'),
      ]),
    ),
  );
});

afterAll(async () => {
  await media?.close();
  await other?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Neither the file's path (nor its name) nor anything of its content. */
function expectNoCookieTrace(text: string) {
  expect(text).not.toContain(SECRET);
  expect(text).not.toContain(path.basename(cookiesFile));
  expect(text).not.toContain(dir);
}

/** Whether any header of the request carries the operator's cookie. */
const carriesSecret = (request: RecordedRequest) => JSON.stringify(request.headers).includes(SECRET);

/** That the service runs the yt-dlp under test, as its health check reports it. */
async function expectRunsYtDlpUnderTest(svc: ServiceHandle) {
  const health = (await (await fetch(`${svc.baseUrl}/healthz`)).json()) as { downloader: { version: string } };
  expect(health.downloader.version, YTDLP_UNDER_TEST).toBe(VERSION);
}

// Only the tests for the yt-dlp under test are defined: the other kind's would only be skipped.
if (!KEEPS_COOKIES_HOME)
  describe(`a yt-dlp older than ${COOKIES_SAFE_SINCE} (${VERSION})`, () => {
    it('start-up refuses YTDLP_COOKIES_FILE, naming the version and the CVE, and neither the file nor its content', async () => {
      const failure = await startService({ env: { YTDLP_COOKIES_FILE: cookiesFile } }).then(
        async (svc) => {
          await svc.stop();
          return '';
        },
        (err: Error) => err.message,
      );
      expect(failure).toContain(`YTDLP_COOKIES_FILE: yt-dlp ${VERSION} (`);
      expect(failure).toMatch(
        /is older than 2023\.07\.06: it sends a cookies file's cookies to other hosts than theirs, on redirects and to fragments \(CVE-2023-35934\)/,
      );
      expectNoCookieTrace(failure);
    });

    it('control: the same service without YTDLP_COOKIES_FILE starts, runs that yt-dlp, and fetches', async () => {
      media.route(
        '/open/tone.mp3',
        (_req, res) =>
          void res.writeHead(200, { 'content-type': 'audio/mpeg', 'content-length': audio.length }).end(audio),
      );
      const svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort } });
      try {
        await expectRunsYtDlpUnderTest(svc);
        const job = await svc.waitForJob((await svc.submit(media.url('/open/tone.mp3'))).job_id, ['done', 'failed']);
        expect(job.status).toBe('done');
      } finally {
        await svc.stop();
      }
    });
  });

if (KEEPS_COOKIES_HOME)
  describe(`a yt-dlp from ${COOKIES_SAFE_SINCE} on (${VERSION})`, () => {
    it('control: without YTDLP_COOKIES_FILE the media server refuses the download', async () => {
      const svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort } });
      try {
        await expectRunsYtDlpUnderTest(svc);
        const job = await svc.waitForJob((await svc.submit(media.url('/members/tone.mp3?control'))).job_id, [
          'done',
          'failed',
        ]);
        expect(job.status).toBe('failed');
        expect(job.error).toMatchObject({ code: 'http_access_denied', http_status: 403 });
      } finally {
        await svc.stop();
      }
    });

    describe.each(['on', 'off'])('with YTDLP_COOKIES_FILE (RESIDENT_SANDBOX=%s)', (resident) => {
      let svc: ServiceHandle;
      beforeAll(async () => {
        svc = await startService({
          env: {
            FETCH_ALLOW_HOSTS: `${media.hostPort},${other.hostPort}`,
            YTDLP_COOKIES_FILE: cookiesFile,
            RESIDENT_SANDBOX: resident,
          },
        });
      });
      afterAll(async () => {
        await svc?.stop();
      });

      it('the confined yt-dlp sends the cookie with the metadata request and the download, and the job is done', async () => {
        const before = media.requestsFor('/members/tone.mp3').length;
        const job = await svc.waitForJob((await svc.submit(media.url(`/members/tone.mp3?${resident}`))).job_id, [
          'done',
          'failed',
        ]);
        expect(job.error).toBeNull();
        expect(job.status).toBe('done');
        const requests = media.requestsFor('/members/tone.mp3').slice(before);
        expect(requests.length).toBeGreaterThanOrEqual(2);
        for (const request of requests) expect(request.headers.cookie).toContain(`session=${SECRET}`);
        expectNoCookieTrace(JSON.stringify(await svc.getJob(job.job_id)));
        expectNoCookieTrace(svc.output());
      });

      // yt-dlp's own handling of its cookies, the same however it is started: tested in the default mode.
      if (resident === 'on')
        it.each(CROSS_HOST_ROUTES)(
          '$name: the cookie reaches its own host and not the other, and the job is done',
          async ({ submit }) => {
            const [ownBefore, otherBefore] = [media.requests.length, other.requests.length];
            const job = await svc.waitForJob((await svc.submit(media.url(`${submit}?${resident}`))).job_id, [
              'done',
              'failed',
            ]);
            expect(job.error).toBeNull();
            expect(job.status).toBe('done');
            // Control: the cookie's own host answered only because the cookie came, and the other host was asked.
            const own = media.requests.slice(ownBefore);
            expect(own.length).toBeGreaterThan(0);
            expect(own.every(carriesSecret)).toBe(true);
            const elsewhere = other.requests.slice(otherBefore);
            expect(elsewhere.length).toBeGreaterThan(0);
            expect(elsewhere.filter(carriesSecret)).toEqual([]);
            expectNoCookieTrace(svc.output());
          },
        );

      it('a failed job says nothing of the cookies either', async () => {
        const job = await svc.waitForJob((await svc.submit(media.url(`/members/gone.mp3?${resident}`))).job_id, [
          'done',
          'failed',
        ]);
        expect(job.status).toBe('failed');
        expect(job.error).toMatchObject({ code: 'http_gone', http_status: 410 });
        expectNoCookieTrace(JSON.stringify(job));
        expectNoCookieTrace(svc.output());
      });

      it("a cookie one job's site sets reaches neither the next job nor the operator's file", async () => {
        const planted = await svc.waitForJob(
          (await svc.submit(media.url(`/members/sets-cookie.mp3?${resident}`))).job_id,
          ['done', 'failed'],
        );
        expect(planted.status).toBe('done');
        // Control: the site's cookie was taken within that job (its download sent it back).
        expect(
          media.requestsFor('/members/sets-cookie.mp3').some((r) => String(r.headers.cookie).includes(PLANTED)),
        ).toBe(true);
        const before = media.requestsFor('/members/tone.mp3').length;
        const next = await svc.waitForJob((await svc.submit(media.url(`/members/tone.mp3?after-${resident}`))).job_id, [
          'done',
          'failed',
        ]);
        expect(next.status).toBe('done');
        const requests = media.requestsFor('/members/tone.mp3').slice(before);
        expect(requests.length).toBeGreaterThan(0);
        for (const request of requests) expect(String(request.headers.cookie)).not.toContain(PLANTED);
        expect(await readFile(cookiesFile, 'utf8')).toBe(cookiesText);
      });
    });

    it("control: Debian stable's yt-dlp, run on its own with the same cookies, sends the cookie to the other host by the routes that leaked (CVE-2023-35934)", async () => {
      const old = ytdlpVersion(DEBIAN_YTDLP);
      expect(isAtLeast(old, COOKIES_SAFE_SINCE), `${DEBIAN_YTDLP} is ${old}`).toBe(false);
      const leaking = CROSS_HOST_ROUTES.filter((route) => route.debianLeaks);
      const otherBefore = other.requests.length;
      // All at once (each route ends on paths of its own), straight to both hosts with no guard and no
      // sandbox: what it sends is what this is about, not whether its runs end well.
      await Promise.all(
        leaking.map(async ({ submit }) => {
          const run = await mkdtemp(path.join(dir, 'debian-'));
          // A copy: yt-dlp writes its cookie jar back on exit.
          await copyFile(cookiesFile, path.join(run, 'cookies.txt'));
          const args = [
            '--ignore-config',
            '--no-cache-dir',
            '--cookies',
            path.join(run, 'cookies.txt'),
            '-f',
            'bestaudio/best',
            '-o',
            path.join(run, 'out.%(ext)s'),
            media.url(submit),
          ];
          await promisify(execFile)(DEBIAN_YTDLP, args, { timeout: 60_000 }).catch(() => undefined);
        }),
      );
      const elsewhere = other.requests.slice(otherBefore);
      for (const { name, reaches } of leaking) {
        expect(
          elsewhere.some((request) => reaches.includes(request.path.split('?')[0]! as never) && carriesSecret(request)),
          name,
        ).toBe(true);
      }
    });

    it('start-up refuses YTDLP_COOKIES_FILE with that yt-dlp (control: this one starts with it, above)', async () => {
      const old = ytdlpVersion(DEBIAN_YTDLP);
      const failure = await startService({ env: { YTDLP_PATH: DEBIAN_YTDLP, YTDLP_COOKIES_FILE: cookiesFile } }).then(
        async (svc) => {
          await svc.stop();
          return '';
        },
        (err: Error) => err.message,
      );
      expect(failure).toContain(`YTDLP_COOKIES_FILE: yt-dlp ${old} (${DEBIAN_YTDLP}) is older than 2023.07.06`);
      expectNoCookieTrace(failure);
    });
  });

it('start-up refuses a file that is not a Netscape cookies file, naming the variable, and neither the path nor the content', async () => {
  const bad = path.join(dir, 'not-netscape.json');
  await writeFile(bad, `[{"name": "session", "value": "${SECRET}"}]\n`);
  const failure = await startService({ env: { YTDLP_COOKIES_FILE: bad } }).then(
    async (svc) => {
      await svc.stop();
      return '';
    },
    (err: Error) => err.message,
  );
  expect(failure).toMatch(/YTDLP_COOKIES_FILE: its first line is not "# Netscape HTTP Cookie File"/);
  expect(failure).not.toContain(SECRET);
  expect(failure).not.toContain('not-netscape');
});
