/**
 * EGRESS_UPSTREAM_PROXY end to end: the real service, with the real yt-dlp confined to the egress
 * guard, fetches through an upstream proxy on loopback that records what it is asked for. The
 * guard asks it for tunnels to the addresses it checked (never the names the job's URL holds),
 * a destination the guard refuses never reaches it, and neither its address nor its password
 * appears in a log line, a job record, a health report or a metric, even when it cannot be reached.
 */
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { freePort } from '../support/nginx.js';
import { startRecordingProxy, type RecordingProxy } from '../support/recording-proxy.js';
import { startService, type ServiceHandle } from '../support/service.js';

const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const USER = 'fetch-node';
const PASSWORD = 'Upstream-Secret-3c9e';

let media: MediaServer;
let proxy: RecordingProxy;
let svc: ServiceHandle;

beforeAll(async () => {
  media = await startMediaServer();
  proxy = await startRecordingProxy({ user: USER, password: PASSWORD });
  const tone = await makeTone(FIXTURE_DIR, { seconds: 2, channels: 2, sampleRate: 44100, format: 'wav' });
  media.serveFile('/tone.wav', tone.path, { contentType: 'audio/wav' });
  // A redirect the guard must refuse: to a private address.
  media.redirect('/to-intranet.wav', 'http://10.20.30.40/tone.wav');
  const port = media.hostPort.split(':')[1]!;
  svc = await startService({
    env: {
      // A name, so that the guard has something to resolve: the upstream must only ever see addresses.
      FETCH_ALLOW_HOSTS: `localhost:${port}`,
      EGRESS_UPSTREAM_PROXY: proxy.url(USER, PASSWORD),
    },
  });
});

afterAll(async () => {
  await svc?.stop();
  await proxy?.close();
  await media?.close();
});

const mediaPort = () => Number(media.hostPort.split(':')[1]);

/** Neither the proxy's password (plain or as its Basic credentials) nor its address. */
function expectNoTraceOf(text: string, proxyPort: number): void {
  expect(text).not.toContain(PASSWORD);
  expect(text).not.toContain(Buffer.from(`${USER}:${PASSWORD}`).toString('base64'));
  expect(text).not.toContain(`${USER}:`);
  expect(text).not.toContain(`127.0.0.1:${proxyPort}`);
}

describe('the egress guard through an upstream proxy', () => {
  it('fetches a job: the upstream is asked for the checked address, with the credentials, never for the name', async () => {
    const job = await svc.submit(`http://localhost:${mediaPort()}/tone.wav`);
    const done = await svc.waitForJob(job.job_id, ['done', 'failed']);
    expect(done.error).toBeNull();
    expect(done.status).toBe('done');
    const wav = Buffer.from(await (await svc.request(done.result!.artifacts[0]!.path)).arrayBuffer());
    expect(createHash('sha256').update(wav).digest('hex')).toBe(done.result!.content_id);

    expect(proxy.asked.length).toBeGreaterThan(0);
    // localhost resolves to 127.0.0.1 (and ::1, where the media server does not listen).
    for (const asked of proxy.asked) {
      expect(asked.target).toMatch(new RegExp(`^(127\\.0\\.0\\.1|\\[::1\\]):${mediaPort()}$`));
      expect(asked.authorization).toBe(`Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}`);
    }
    expect(proxy.asked.map((asked) => asked.target)).toContain(`127.0.0.1:${mediaPort()}`);
    expect(media.requestsFor('/tone.wav').every((request) => request.headers.host === `localhost:${mediaPort()}`)).toBe(
      true,
    );
  });

  it('a destination the guard refuses (a redirect to a private address) never reaches the upstream', async () => {
    const before = proxy.asked.length;
    const job = await svc.submit(`http://localhost:${mediaPort()}/to-intranet.wav`);
    const failed = await svc.waitForJob(job.job_id, ['done', 'failed']);
    expect(failed.status).toBe('failed');
    expect(failed.error!.code).toBe('destination_refused');
    expect(failed.error!.detail).toContain('10.20.30.40');
    // The upstream saw the way to the redirect (the control: it records), and nothing of 10.20.30.40.
    const asked = proxy.asked.slice(before).map((entry) => entry.target);
    expect(asked).toContain(`127.0.0.1:${mediaPort()}`);
    expect(asked.filter((target) => target.includes('10.20.30.40'))).toEqual([]);
  });

  it('shows the upstream proxy nowhere (its address, its password): logs, job records, health, metrics', async () => {
    const jobs = await Promise.all(
      svc.logs
        .filter((line) => typeof line.job_id === 'string')
        .map((line) => svc.request(`/jobs/${line.job_id as string}`).then((res) => res.text())),
    );
    const health = await (await svc.request('/healthz')).text();
    const metrics = await (await svc.request('/metrics')).text();
    for (const text of [svc.output(), ...jobs, health, metrics]) expectNoTraceOf(text, proxy.port);
    // The start-up line says an upstream is in use (the control that logs are read), and no more.
    const line = svc.logs.find(
      (entry) =>
        entry.msg ===
        'the egress guard reaches checked destinations through the upstream proxy (EGRESS_UPSTREAM_PROXY)',
    );
    expect(line).toBeDefined();
    expect(JSON.stringify(line)).not.toContain(String(proxy.port));
  });

  it('an upstream that cannot be reached fails the job without naming it, in the record or the logs', async () => {
    const deadPort = await freePort();
    const cut = await startService({
      env: {
        FETCH_ALLOW_HOSTS: `localhost:${mediaPort()}`,
        EGRESS_UPSTREAM_PROXY: `http://${USER}:${PASSWORD}@127.0.0.1:${deadPort}`,
      },
    });
    try {
      const job = await cut.submit(`http://localhost:${mediaPort()}/tone.wav`);
      const failed = await cut.waitForJob(job.job_id, ['done', 'failed']);
      expect(failed.status).toBe('failed');
      // The guard did try (the control that the failure is the upstream's), and said so without it.
      expect(
        cut.logs.some(
          (entry) =>
            entry.msg === 'egress guard dial failed' &&
            /the upstream proxy could not be reached \(ECONNREFUSED\)/.test(String(entry.err)),
        ),
      ).toBe(true);
      const record = await (await cut.request(`/jobs/${job.job_id}`)).text();
      for (const text of [cut.output(), record]) expectNoTraceOf(text, deadPort);
    } finally {
      await cut.stop();
    }
  });
});
