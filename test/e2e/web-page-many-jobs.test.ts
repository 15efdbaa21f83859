/**
 * The web page with a hundred jobs, in Debian's Chromium against the app's own port and in
 * Firefox ESR through the real nginx (nginx/templates), both on one service with the real yt-dlp
 * and ffmpeg and a media server on loopback whose file is throttled so that the jobs overlap: a
 * hundred URLs pasted, every job followed over one event stream (the service's
 * source_fetch_event_streams gauge reads 1, and the page asks for no stream of one job), a
 * running job canceled, a new URL submitted and a finished job played while the others still
 * stream, then every job done. A browser opens six HTTP/1.1 connections to a host: with a
 * stream per job, the Cancel, the submission and the audio would wait behind them.
 *
 * How long the Cancel, the submission and the start of the audio took is printed, not asserted
 * (speed belongs in bench/): what is asserted is that they happened while other jobs streamed.
 */
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BROWSERS, launchBrowser, type BrowserName } from '../support/browser.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { SHARED_URL_SIGNING_SECRET, startNginx, type RunningNginx } from '../support/nginx.js';
import { HEAVY_TEST_TIMEOUT_MS, startService, type ServiceHandle } from '../support/service.js';

const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const JOBS = 100;
const FINAL = ['done', 'failed', 'canceled'];

let media: MediaServer;
let svc: ServiceHandle;
let nginx: RunningNginx;

beforeAll(async () => {
  media = await startMediaServer();
  // 2 s of mono WAV (176 KB) at 96 KiB/s: each download takes some 2 s, so that eight workers
  // keep a hundred jobs running, queued and done at once for half a minute.
  const tone = await makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'wav' });
  media.serveFile('/many.wav', tone.path, { contentType: 'audio/wav', throttleBytesPerSec: 96 * 1024 });
  // The job to cancel: the same file at 4 KiB/s, running for some 40 s unless canceled.
  media.serveFile('/long.wav', tone.path, { contentType: 'audio/wav', throttleBytesPerSec: 4 * 1024 });
  // Without ACCEL_REDIRECT_PREFIX, so that the app's own port serves the WAVs; nginx, which
  // shares the signing secret, answers signed URLs alone from the artifact root.
  svc = await startService({
    env: {
      FETCH_ALLOW_HOSTS: media.hostPort,
      WORKER_CONCURRENCY: '8',
      URL_SIGNING_SECRET: SHARED_URL_SIGNING_SECRET,
    },
  });
  nginx = await startNginx({
    appPort: svc.port,
    artifactRoot: path.join(svc.dataDir, 'artifacts'),
    urlSigningSecret: SHARED_URL_SIGNING_SECRET,
  });
});

afterAll(async () => {
  await nginx?.stop();
  await svc?.stop();
  await media?.close();
});

/** The service's count of open event streams. */
async function openStreams(): Promise<number> {
  const text = await (await svc.request('/metrics')).text();
  return Number(/^source_fetch_event_streams (\S+)$/m.exec(text)![1]);
}

const PATHS: Record<BrowserName, { name: string; origin: () => string }> = {
  chromium: { name: 'the app directly', origin: () => svc.baseUrl },
  firefox: { name: 'nginx', origin: () => nginx.url('') },
};

describe.each(Object.keys(BROWSERS) as BrowserName[])('a hundred jobs on the page, in %s', (browserName) => {
  const via = PATHS[browserName];
  let browser: Browser;
  let page: Page;
  const streamRequests: string[] = [];

  beforeAll(async () => {
    browser = await launchBrowser(browserName);
    page = await (await browser.newContext({ viewport: { width: 1000, height: 900 } })).newPage();
    page.on('request', (request) => {
      const { pathname, search } = new URL(request.url());
      if (pathname.endsWith('/events')) streamRequests.push(pathname + search);
    });
  });
  afterAll(async () => {
    await browser?.close();
  });

  const items = () => page.locator('#jobs > li');
  const statuses = () =>
    items().evaluateAll((list) =>
      (list as unknown as Array<{ dataset: Record<string, string> }>).map((item) => item.dataset.status ?? ''),
    );
  const underWay = async () => (await statuses()).filter((status) => !FINAL.includes(status)).length;

  it(
    `through ${via.name}: every job on one stream; Cancel, a new submission and the audio answer while the others stream; all done`,
    async () => {
      await page.goto(`${via.origin()}/`);
      await page.getByLabel('API key of this service').fill(svc.apiKey);
      await page.getByLabel('API key of this service').press('Enter');
      const box = page.getByLabel('Media URLs, one per line');
      await box.waitFor();
      // First in the list, so that a worker takes it among the first: the job to cancel.
      const long = media.url(`/long.wav?browser=${browserName}`);
      const urls = [
        long,
        ...Array.from({ length: JOBS - 1 }, (_, i) => media.url(`/many.wav?browser=${browserName}&n=${i}`)),
      ];
      await box.fill(urls.join('\n'));
      await box.press('Control+Enter');
      await expect.poll(() => items().count(), { timeout: 30_000 }).toBe(JOBS);

      // One stream for the hundred jobs.
      await expect.poll(openStreams, { timeout: 10_000 }).toBe(1);
      expect(streamRequests).toHaveLength(1);
      expect(streamRequests[0]!.split(',')).toHaveLength(JOBS);

      // Cancel a running job while the others stream.
      const item = page.locator('#jobs > li', { has: page.locator('.job-url', { hasText: long }) });
      await expect.poll(() => item.getAttribute('data-status'), { timeout: 60_000 }).toBe('running');
      const targetId = (await item.getAttribute('data-job-id'))!;
      const canceledAnswer = page.waitForResponse((response) => response.url().endsWith(`/jobs/${targetId}/cancel`));
      const cancelStarted = Date.now();
      await item.getByRole('button', { name: 'Cancel' }).click();
      const cancelResponse = await canceledAnswer;
      expect(cancelResponse.status()).toBe(200);
      const answeredMs = Date.now() - cancelStarted;
      // Where that time went: before the request was sent (a connection to wait for), and the service's answer.
      const timing = cancelResponse.request().timing();
      await expect.poll(() => item.getAttribute('data-status')).toBe('canceled');
      const cancelMs = Date.now() - cancelStarted;
      const othersUnderWay = await underWay();
      expect(othersUnderWay).toBeGreaterThan(0);
      expect((await svc.getJob(targetId)).status).toBe('canceled');

      // A new submission while they stream: its job is listed, and the page still holds one stream.
      const extra = media.url(`/many.wav?browser=${browserName}&n=extra`);
      const submitStarted = Date.now();
      await box.fill(extra);
      await box.press('Control+Enter');
      await expect.poll(() => items().count()).toBe(JOBS + 1);
      const submitMs = Date.now() - submitStarted;
      expect(await underWay()).toBeGreaterThan(1);
      await expect.poll(openStreams, { timeout: 10_000 }).toBe(1);
      expect(streamRequests).toHaveLength(2);

      // The audio of a finished job plays while others stream.
      const firstDone = page.locator('#jobs > li[data-status="done"]').first();
      await firstDone.waitFor({ timeout: 60_000 });
      // That one, whatever ends after it.
      const finished = page.locator(`#jobs > li[data-job-id="${await firstDone.getAttribute('data-job-id')}"]`);
      await finished.scrollIntoViewIfNeeded();
      await finished.locator('.waveform[data-ready="true"]').waitFor({ state: 'attached', timeout: 20_000 });
      const playStarted = Date.now();
      const audio = finished.locator('audio');
      await audio.evaluate((element) => (element as unknown as { play(): Promise<void> }).play());
      await expect
        .poll(() => audio.evaluate((element) => (element as unknown as { currentTime: number }).currentTime))
        .toBeGreaterThan(0.2);
      const playMs = Date.now() - playStarted;
      const underWayWhilePlaying = await underWay();
      await audio.evaluate((element) => (element as unknown as { pause(): void }).pause());
      console.log(
        `${browserName} via ${via.name}: cancel answered after ${answeredMs} ms (sent ${Math.round(timing.requestStart)} ms ` +
          `after the fetch began, answered ${Math.round(timing.responseStart - timing.requestStart)} ms later), ` +
          `shown after ${cancelMs} ms (${othersUnderWay} jobs under way), ` +
          `new job listed after ${submitMs} ms, audio playing after ${playMs} ms (${underWayWhilePlaying} under way)`,
      );

      // Every job but the canceled one done, the new one too.
      await expect
        .poll(async () => (await statuses()).filter((status) => status === 'done').length, {
          timeout: HEAVY_TEST_TIMEOUT_MS - 60_000,
          interval: 1000,
        })
        .toBe(JOBS);
      expect((await statuses()).filter((status) => status === 'canceled')).toHaveLength(1);
      // No stream of one job was asked for; the hundred jobs' stream ended with its last job.
      expect(streamRequests.every((request) => request.startsWith('/events?jobs='))).toBe(true);
      await expect.poll(openStreams, { timeout: 10_000 }).toBe(0);
      if (browserName === 'firefox') {
        const lines = nginx.wholeAccessLines();
        expect(lines.filter((line) => line.route === '/jobs/{id}/events')).toEqual([]);
        expect(lines.filter((line) => line.route === '/events').length).toBeGreaterThanOrEqual(2);
      }
    },
    HEAVY_TEST_TIMEOUT_MS,
  );
});
