import { once } from 'node:events';
import net, { type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNameServer, type TestNameServer } from '../support/dns-server.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';

/**
 * Each way a source can fail, caused for real and met by the real service, yt-dlp and the egress
 * guard, on loopback only: a closed port, a name that does not exist and one the name server
 * never answers (on a name server this test runs, the service's only one: DNS_SERVERS), HTTP 404
 * and 500, an HTML page without media, and an origin that takes the request and never answers
 * (with a short METADATA_TIMEOUT_S). Each job fails with its code, the code's sentence as its
 * message, and the downloader's own words as its detail (for the time-out, the limit it ran into,
 * as the downloader said nothing); the job's log line has them too. One service for all of them,
 * submitted at once.
 */
const METADATA_TIMEOUT_S = 8;

let dns: TestNameServer;
let media: MediaServer;
let silent: net.Server;
let svc: ServiceHandle;
let closedPort: number;
let silentPort: number;
/** The submitted URL of each case, by name, and its job once it ended. */
const jobs = new Map<string, Promise<JobBody>>();

beforeAll(async () => {
  dns = await startNameServer((name) => (name.startsWith('silent.') ? 'silent' : 'nxdomain'));
  media = await startMediaServer();
  const [, mediaPort] = media.hostPort.split(':');
  media.route('/server-error.mp3', (_req, res) => {
    res.writeHead(500, { 'content-type': 'text/plain' }).end('boom');
  });
  media.route('/page.html', (_req, res) => {
    res
      .writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
      .end('<!doctype html><html><head><title>A page</title></head><body><p>No media here.</p></body></html>');
  });
  // A short link whose target's name is gone: the name is first resolved by the guard, mid-job.
  media.redirect('/to-gone', `http://gone.errors.test:${mediaPort}/a.mp3`);
  media.redirect('/to-silent', `http://silent.errors.test:${mediaPort}/a.mp3`);

  const probe = net.createServer();
  probe.listen(0, '127.0.0.1');
  await once(probe, 'listening');
  closedPort = (probe.address() as AddressInfo).port;
  await new Promise<void>((resolve) => probe.close(() => resolve()));

  // Accepts, reads the request, and never sends a byte.
  silent = net.createServer((socket) => socket.on('error', () => {}));
  silent.listen(0, '127.0.0.1');
  await once(silent, 'listening');
  silentPort = (silent.address() as AddressInfo).port;

  svc = await startService({
    env: {
      // A bare host allows all its ports: the media server, the closed port, the silent origin.
      FETCH_ALLOW_HOSTS: '127.0.0.1',
      DNS_SERVERS: dns.server,
      DNS_TIMEOUT_S: '1',
      METADATA_TIMEOUT_S: String(METADATA_TIMEOUT_S),
    },
  });
  const cases: Record<string, string> = {
    // The slowest first, so the others run beside it.
    noAnswer: `http://127.0.0.1:${silentPort}/a.mp3`,
    closedPort: `http://127.0.0.1:${closedPort}/a.mp3`,
    nameGone: media.url('/to-gone'),
    nameSilent: media.url('/to-silent'),
    notFound: media.url('/missing.mp3'),
    serverError: media.url('/server-error.mp3'),
    pageWithoutMedia: media.url('/page.html'),
  };
  for (const [name, url] of Object.entries(cases)) {
    const submitted = await svc.submit(url);
    jobs.set(name, svc.waitForJob(submitted.job_id, ['done', 'failed', 'canceled'], 90_000));
  }
}, 120_000);

afterAll(async () => {
  await svc?.stop();
  await media?.close();
  await dns?.close();
  silent?.close();
});

/** The case's job, failed, its error; and the job's log line says the same. */
async function failedJob(name: string): Promise<NonNullable<JobBody['error']>> {
  const job = await jobs.get(name)!;
  expect(job.status, JSON.stringify(job)).toBe('failed');
  const error = job.error!;
  const logged = svc.logs.find((line) => line.msg === 'job failed' && line.job_id === job.job_id);
  expect(logged).toMatchObject({ code: error.code, message: error.message, detail: error.detail });
  // Nothing of the server's paths or the guard's credentials.
  expect(`${error.message}\n${error.detail}`).not.toMatch(/sf-data-|\/tmp\/|http:\/\/[^/\s]+:[^/\s]+@/);
  return error;
}

/** The downloader's own line for the job, in the log, with its words. */
function downloaderSaid(jobId: string): string {
  const line = svc.logs.find((l) => l.msg === 'the downloader failed' && l.job_id === jobId);
  return typeof line?.output === 'string' ? line.output : '';
}

describe('job errors in plain words, from real causes', () => {
  it('a closed port: connection_refused, though yt-dlp only saw the egress guard’s 502', async () => {
    const error = await failedJob('closedPort');
    expect(error).toMatchObject({
      code: 'connection_refused',
      message: `The source 127.0.0.1:${closedPort} refused the connection: no server is listening there.`,
      http_status: null,
    });
    expect(error.detail).toMatch(/^ERROR: .*(HTTP Error 502|Tunnel connection failed: 502)/);
    expect(downloaderSaid((await jobs.get('closedPort')!).job_id)).toContain('HTTP Error 502');
  });

  it('a redirect to a name that does not exist: host_not_found', async () => {
    const error = await failedJob('nameGone');
    expect(error).toMatchObject({
      code: 'host_not_found',
      message: 'The host name gone.errors.test does not exist.',
      http_status: null,
    });
    expect(error.detail).toMatch(/^ERROR: .*HTTP Error 502/);
    expect(dns.queries.some((q) => q.name === 'gone.errors.test' && q.answered)).toBe(true);
  });

  it('a redirect to a name the name server never answers: host_lookup_failed', async () => {
    const error = await failedJob('nameSilent');
    expect(error).toMatchObject({
      code: 'host_lookup_failed',
      message: 'The host name silent.errors.test could not be looked up: the name servers gave no answer in time.',
    });
    expect(error.detail).toMatch(/^ERROR: .*HTTP Error 502/);
    expect(dns.queries.some((q) => q.name === 'silent.errors.test' && !q.answered)).toBe(true);
  });

  it('HTTP 404 at the origin: http_not_found, with the status', async () => {
    const error = await failedJob('notFound');
    expect(error).toMatchObject({
      code: 'http_not_found',
      message: 'Nothing was found at the source (HTTP 404).',
      http_status: 404,
    });
    expect(error.detail).toMatch(/^ERROR: .*HTTP Error 404/);
    expect(error.detail).not.toMatch(/please report/);
  });

  it('HTTP 500 at the origin: http_server_error, with the status', async () => {
    const error = await failedJob('serverError');
    expect(error).toMatchObject({
      code: 'http_server_error',
      message: "The source's server failed to answer the request (HTTP 500).",
      http_status: 500,
    });
    expect(error.detail).toMatch(/^ERROR: .*HTTP Error 500/);
  });

  it('an HTML page without media: not_media', async () => {
    const error = await failedJob('pageWithoutMedia');
    expect(error).toMatchObject({
      code: 'not_media',
      message: 'The page at the URL holds no media the downloader can find.',
      http_status: null,
    });
    expect(error.detail).toMatch(/^ERROR: Unsupported URL: /);
    // The generic extractor's warning that tells this case apart is in the log, not in the detail.
    const jobId = (await jobs.get('pageWithoutMedia')!).job_id;
    expect(downloaderSaid(jobId)).toMatch(/Falling back on generic information extractor/);
  });

  it('an origin that takes the request and never answers: no_answer once the time limit is reached', async () => {
    const error = await failedJob('noAnswer');
    expect(error).toMatchObject({
      code: 'no_answer',
      message: `The source 127.0.0.1:${silentPort} accepted the connection but sent no answer.`,
      detail: `Reading the media's metadata took longer than ${METADATA_TIMEOUT_S} s and was stopped.`,
      http_status: null,
    });
  });
});
