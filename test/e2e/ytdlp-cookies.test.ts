import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type ServiceHandle } from '../support/service.js';

/**
 * YTDLP_COOKIES_FILE with the real service and yt-dlp, confined as always: a media server on
 * loopback that answers only requests carrying the operator's cookie. The cookie must reach it
 * (so the file is readable inside the sandbox), and neither the file's path nor its content may
 * appear in the service's log, in a job record or in a job's error.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const SECRET = `sess-${randomBytes(12).toString('hex')}`;
const PLANTED = `planted-${randomBytes(6).toString('hex')}`;

let media: MediaServer;
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
    res.writeHead(200, { 'content-type': 'audio/mpeg', 'content-length': audio.length, ...(opts.setCookie ? { 'set-cookie': opts.setCookie } : {}) });
    res.end(req.method === 'HEAD' ? undefined : audio);
  };
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-cookies-'));
  cookiesFile = path.join(dir, `operator-cookies-${randomBytes(4).toString('hex')}.txt`);
  cookiesText = `# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\t${SECRET}\n`;
  await writeFile(cookiesFile, cookiesText, { mode: 0o600 });
  audio = await readFile((await makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'mp3' })).path);
  media = await startMediaServer();
  media.route('/members/tone.mp3', membersOnly());
  media.route('/members/sets-cookie.mp3', membersOnly({ setCookie: `planted=${PLANTED}; Path=/` }));
  media.route('/members/gone.mp3', membersOnly({ status: 410 }));
});

afterAll(async () => {
  await media?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Neither the file's path (nor its name) nor anything of its content. */
function expectNoCookieTrace(text: string) {
  expect(text).not.toContain(SECRET);
  expect(text).not.toContain(path.basename(cookiesFile));
  expect(text).not.toContain(dir);
}

it('control: without YTDLP_COOKIES_FILE the media server refuses the download', async () => {
  const svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort } });
  try {
    const job = await svc.waitForJob((await svc.submit(media.url('/members/tone.mp3?control'))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error?.code).toBe('http_error');
  } finally {
    await svc.stop();
  }
});

describe.each(['on', 'off'])('with YTDLP_COOKIES_FILE (RESIDENT_SANDBOX=%s)', (resident) => {
  let svc: ServiceHandle;
  beforeAll(async () => {
    svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, YTDLP_COOKIES_FILE: cookiesFile, RESIDENT_SANDBOX: resident } });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('the confined yt-dlp sends the cookie with the metadata request and the download, and the job is done', async () => {
    const before = media.requestsFor('/members/tone.mp3').length;
    const job = await svc.waitForJob((await svc.submit(media.url(`/members/tone.mp3?${resident}`))).job_id, ['done', 'failed']);
    expect(job.error).toBeNull();
    expect(job.status).toBe('done');
    const requests = media.requestsFor('/members/tone.mp3').slice(before);
    expect(requests.length).toBeGreaterThanOrEqual(2);
    for (const request of requests) expect(request.headers.cookie).toContain(`session=${SECRET}`);
    expectNoCookieTrace(JSON.stringify(await svc.getJob(job.job_id)));
    expectNoCookieTrace(svc.output());
  });

  it('a failed job says nothing of the cookies either', async () => {
    const job = await svc.waitForJob((await svc.submit(media.url(`/members/gone.mp3?${resident}`))).job_id, ['done', 'failed']);
    expect(job.status).toBe('failed');
    expect(job.error?.code).toBe('http_error');
    expectNoCookieTrace(JSON.stringify(job));
    expectNoCookieTrace(svc.output());
  });

  it("a cookie one job's site sets reaches neither the next job nor the operator's file", async () => {
    const planted = await svc.waitForJob((await svc.submit(media.url(`/members/sets-cookie.mp3?${resident}`))).job_id, ['done', 'failed']);
    expect(planted.status).toBe('done');
    // Control: the site's cookie was taken within that job (its download sent it back).
    expect(media.requestsFor('/members/sets-cookie.mp3').some((r) => String(r.headers.cookie).includes(PLANTED))).toBe(true);
    const before = media.requestsFor('/members/tone.mp3').length;
    const next = await svc.waitForJob((await svc.submit(media.url(`/members/tone.mp3?after-${resident}`))).job_id, ['done', 'failed']);
    expect(next.status).toBe('done');
    const requests = media.requestsFor('/members/tone.mp3').slice(before);
    expect(requests.length).toBeGreaterThan(0);
    for (const request of requests) expect(String(request.headers.cookie)).not.toContain(PLANTED);
    expect(await readFile(cookiesFile, 'utf8')).toBe(cookiesText);
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
