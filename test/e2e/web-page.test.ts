/**
 * The web page at `/` as a person uses it, in each of Debian's Chromium and Firefox ESR (driven by
 * playwright-core: test/support/browser.ts), one after the other, against the built service with the real yt-dlp and ffmpeg, behind a real nginx rendering
 * nginx/templates, fetching from a media server on loopback: the API key asked once and a wrong
 * one refused, two URLs pasted and followed live to done over the job event stream (through
 * nginx), one played and seeked by clicking its waveform and with the keyboard, a slow one
 * canceled, a failing one showing its error, the list kept across a reload, the peaks artifact
 * and loudness used when a job lists them, and an accessibility check (axe-core, WCAG 2.2 AA
 * rules) of the page with a finished job, whose screenshot is saved for people to look at.
 * Both browsers use the same service, nginx and media server, each with URLs of its own, so that
 * each follows its own jobs from queued to done.
 */
import { mkdir, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WEB_PAGE_CSP } from '../../src/http/web-page.js';
import { BROWSERS, launchBrowser, type BrowserName } from '../support/browser.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import type { RunningNginx } from '../support/nginx.js';
import { startServiceBehindNginx } from '../support/behind-nginx.js';
import { ROOT, type ServiceHandle } from '../support/service.js';

const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
/** Saved by the run for people to look at (test-results/ is not committed), one per browser. */
const screenshotPath = (browserName: BrowserName, view: '' | '-phone') =>
  path.join(ROOT, 'test-results', `web-page${browserName === 'chromium' ? '' : `-${browserName}`}${view}.png`);
const AXE_SCRIPT = path.join(ROOT, 'node_modules', 'axe-core', 'axe.min.js');

const BROWSER_NAMES = Object.keys(BROWSERS) as BrowserName[];

let media: MediaServer;
let svc: ServiceHandle;
let nginx: RunningNginx;

beforeAll(async () => {
  media = await startMediaServer();
  const [first, second, slow] = await Promise.all([
    makeTone(FIXTURE_DIR, { seconds: 20, channels: 2, sampleRate: 48000, format: 'm4a' }),
    makeTone(FIXTURE_DIR, { seconds: 12, channels: 1, sampleRate: 44100, format: 'm4a' }),
    makeTone(FIXTURE_DIR, { seconds: 120, channels: 2, sampleRate: 48000, format: 'wav' }),
  ]);
  for (const name of BROWSER_NAMES) {
    media.serveFile(`/${name}/first.m4a`, first.path, { contentType: 'audio/mp4' });
    media.serveFile(`/${name}/second.m4a`, second.path, { contentType: 'audio/mp4' });
    // 23 MB at 64 KiB/s: running for minutes unless canceled.
    media.serveFile(`/${name}/slow.wav`, slow.path, { contentType: 'audio/wav', throttleBytesPerSec: 64 * 1024 });
  }
  ({ svc, nginx } = await startServiceBehindNginx({ env: { FETCH_ALLOW_HOSTS: media.hostPort } }));
});

afterAll(async () => {
  await nginx?.stop();
  await svc?.stop();
  await media?.close();
});

describe('the page and its files', () => {
  it('are served without a key, with their content types, ETags, caching and a strict CSP, by the app and through nginx', async () => {
    for (const origin of [svc.baseUrl, nginx.url('')]) {
      const index = await fetch(`${origin}/`);
      expect(index.status).toBe(200);
      expect(index.headers.get('content-type')).toBe('text/html; charset=utf-8');
      expect(index.headers.get('content-security-policy')).toBe(WEB_PAGE_CSP);
      expect(index.headers.get('cache-control')).toBe('no-cache');
      const html = await index.text();
      expect(html).toContain('<script type="module" src="/web/app.js"></script>');
      const again = await fetch(`${origin}/`, { headers: { 'if-none-match': index.headers.get('etag')! } });
      expect(again.status).toBe(304);

      const app = await fetch(`${origin}/web/app.js`);
      expect(app.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
      const vendorPath = /from '(\/vendor\/[^']+)'/.exec(await app.text())![1]!;
      const vendor = await fetch(origin + vendorPath);
      expect(vendor.status).toBe(200);
      expect(vendor.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
      expect(vendor.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
      expect(vendor.headers.get('etag')).toMatch(/^"[A-Za-z0-9_-]{32}"$/);
      // The installed package's own file, not a copy.
      const installed = JSON.parse(
        await readFile(path.join(ROOT, 'node_modules/wavesurfer.js/package.json'), 'utf8'),
      ) as { version: string };
      expect(vendorPath).toBe(`/vendor/wavesurfer.js@${installed.version}/wavesurfer.esm.js`);
      expect(await vendor.text()).toBe(
        await readFile(path.join(ROOT, 'node_modules/wavesurfer.js/dist/wavesurfer.esm.js'), 'utf8'),
      );

      const css = await fetch(`${origin}/web/style.css`);
      expect(css.headers.get('content-type')).toBe('text/css; charset=utf-8');

      // Everything else is the API's as before: unmatched routes are its 404, jobs need the key.
      for (const missing of ['/web/nope.js', '/web/', '/index.html', '/vendor/wavesurfer.js@0.0.0/wavesurfer.esm.js']) {
        const answer = await fetch(origin + missing);
        expect([missing, answer.status]).toEqual([missing, 404]);
        expect(((await answer.json()) as { code: string }).code).toBe('route_not_found');
      }
      expect((await fetch(`${origin}/jobs/00000000-0000-0000-0000-000000000000`)).status).toBe(401);
    }
  });
});

describe.each(BROWSER_NAMES)('a person using the page through nginx, in %s', (browserName) => {
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  /** What the page's console said about the Content-Security-Policy, and uncaught errors. */
  const pageProblems: string[] = [];
  /** This browser's own copy of a media file, so that its jobs are fetched, not born done. */
  const mediaUrl = (file: string) => media.url(`/${browserName}${file}`);

  beforeAll(async () => {
    browser = await launchBrowser(browserName);
    context = await browser.newContext({ viewport: { width: 1000, height: 900 } });
    page = await context.newPage();
    page.on('console', (message) => {
      if (/Content.Security.Policy|Refused to/i.test(message.text())) pageProblems.push(message.text());
    });
    page.on('pageerror', (error) => pageProblems.push(String(error)));
  });

  afterAll(async () => {
    await browser?.close();
  });

  const jobItems = () => page.locator('#jobs > li');
  const jobFor = (url: string) => page.locator('#jobs > li', { has: page.locator('.job-url', { hasText: url }) });
  // The project's TypeScript has no DOM library: what runs in the page is typed by hand.
  const audioTime = (url: string) =>
    jobFor(url)
      .locator('audio')
      .evaluate((audio) => (audio as unknown as { currentTime: number }).currentTime);
  const itemData = (name: 'jobId' | 'status') =>
    jobItems().evaluateAll(
      (items, field) =>
        (items as unknown as Array<{ dataset: Record<string, string> }>).map((item) => item.dataset[field]!),
      name,
    );
  const ids = () => itemData('jobId');
  const states = () => itemData('status');

  /** currentTime of `url`'s <audio>, once `holds` is true of it. */
  async function waitForTime(url: string, holds: (time: number) => boolean, what: string): Promise<number> {
    await expect.poll(() => audioTime(url), { timeout: 20_000, message: what }).toSatisfy(holds);
    return audioTime(url);
  }

  it('refuses a wrong API key, then takes the right one', async () => {
    await page.goto(nginx.url('/'));
    await page.getByLabel('API key of this service').fill('wrong-key-0123456789abcdef');
    await page.getByRole('button', { name: 'Use key' }).click();
    await expect.poll(() => page.locator('#key-error').textContent()).toContain('Wrong API key');
    expect(await page.locator('#submit-section').isHidden()).toBe(true);

    await page.getByLabel('API key of this service').fill(svc.apiKey);
    await page.getByRole('button', { name: 'Use key' }).click();
    await page.locator('#submit-section').waitFor({ state: 'visible' });
    expect(await page.locator('#key-section').isHidden()).toBe(true);
    // Kept for this tab only, and nowhere else.
    const storage = await page.evaluate<{ session: string; local: string; cookies: string; url: string }>(
      '({ session: JSON.stringify({ ...sessionStorage }), local: JSON.stringify({ ...localStorage }), cookies: document.cookie, url: location.href })',
    );
    expect(storage.session).toContain(svc.apiKey);
    expect(storage.local + storage.cookies + storage.url).not.toContain(svc.apiKey);
  });

  it('takes two pasted URLs as a batch, and follows both jobs live to done', async () => {
    const urls = [mediaUrl('/first.m4a'), mediaUrl('/second.m4a')];
    // Every state each job's item shows, as it shows it.
    await page.evaluate(`{
      const seen = (window.seenStates = {});
      new MutationObserver(() => {
        for (const item of document.querySelectorAll('#jobs > li')) {
          const states = (seen[item.dataset.jobId] ??= []);
          const state = item.dataset.status;
          if (state && states.at(-1) !== state) states.push(state);
        }
      }).observe(document.getElementById('jobs'), { subtree: true, attributes: true, childList: true });
    }`);
    await page.getByLabel('Media URLs, one per line').fill(urls.join('\n'));
    await page.getByRole('button', { name: 'Fetch' }).click();
    await expect.poll(() => jobItems().count()).toBe(2);
    for (const url of urls) await jobFor(url).locator('audio').waitFor({ state: 'attached', timeout: 90_000 });
    const seen = await page.evaluate<Record<string, string[]>>('window.seenStates');
    expect(Object.keys(seen)).toHaveLength(2);
    for (const states of Object.values(seen)) expect(states.at(-1)).toBe('done');
    // The page learnt each state from the event stream through nginx, not from one answer.
    const jobIds = Object.keys(seen);
    const streams = await nginx.accessLines(
      (line) => line.route === '/jobs/{id}/events' && jobIds.some((id) => line.uri!.includes(id)),
      (lines) => jobIds.every((id) => lines.some((line) => line.uri!.includes(id))),
      10_000,
    );
    expect(streams.every((line) => line.status === '200')).toBe(true);
    for (const url of urls) {
      const item = jobFor(url);
      expect(await item.locator('.badge').textContent()).toBe('done');
      expect(await item.locator('.facts').textContent()).toContain('44100 Hz');
      expect(await item.getByRole('link', { name: 'Download WAV' }).getAttribute('href')).toMatch(
        /^\/artifacts\/[0-9a-f]{64}\/audio\.wav\?expires=\d+&sig=/,
      );
      expect(await item.locator('.cancel').isHidden()).toBe(true);
    }
    expect(await jobFor(urls[0]!).locator('.facts').textContent()).toMatch(/Duration0:20.*Channels2/);
  });

  it('plays a finished job, and seeks by clicking its waveform and with the keyboard', async () => {
    const url = mediaUrl('/first.m4a');
    const item = jobFor(url);
    await item.locator('.waveform[data-ready="true"]').waitFor({ state: 'attached' });
    await item.locator('audio').evaluate((audio) => (audio as unknown as { play(): Promise<void> }).play());
    const played = await waitForTime(url, (t) => t > 0.5, 'playback did not advance');
    expect(played).toBeGreaterThan(0.5);
    await item.locator('audio').evaluate((audio) => (audio as unknown as { pause(): void }).pause());

    // A click at three quarters of the waveform's width seeks to about 15 s of 20.
    const waveform = item.getByRole('slider', { name: 'Waveform: position in the audio' });
    const box = (await waveform.boundingBox())!;
    await waveform.click({ position: { x: box.width * 0.75, y: box.height / 2 } });
    const clicked = await waitForTime(url, (t) => t > 13 && t < 17, 'a click on the waveform did not seek');
    expect(clicked).toBeGreaterThan(13);

    await waveform.focus();
    await page.keyboard.press('Home');
    await waitForTime(url, (t) => t < 0.1, 'Home did not seek to the start');
    await page.keyboard.press('ArrowRight');
    const stepped = await waitForTime(url, (t) => t > 4.9 && t < 5.1, 'ArrowRight did not seek 5 s on');
    expect(stepped).toBeCloseTo(5, 1);
    await expect.poll(() => waveform.getAttribute('aria-valuenow'), { timeout: 20_000 }).toBe('5');
    expect(await waveform.getAttribute('aria-valuetext')).toBe('0:05 of 0:20');
    // The focus ring is drawn (a visible outline) while the slider has the keyboard's focus.
    expect(await page.evaluate('getComputedStyle(document.activeElement).outlineStyle')).toBe('solid');
    expect(
      await waveform.evaluate(
        (node) =>
          node === (node as unknown as { ownerDocument: { activeElement: unknown } }).ownerDocument.activeElement,
      ),
    ).toBe(true);

    const screenshot = screenshotPath(browserName, '');
    await mkdir(path.dirname(screenshot), { recursive: true });
    await page.screenshot({ path: screenshot, fullPage: true });
    console.log(`web page screenshot: ${screenshot}`);
  });

  it('shows each player at the height of its controls, with no empty box above them', async () => {
    // Beside a bare <audio controls> on the same page: the height this browser gives its controls.
    const heights = await page.evaluate<{ bare: number; players: number[] }>(`(() => {
      const bare = document.body.appendChild(Object.assign(document.createElement('audio'), { controls: true }));
      const height = bare.getBoundingClientRect().height;
      bare.remove();
      const players = [...document.querySelectorAll('#jobs audio')].map((audio) => audio.getBoundingClientRect().height);
      return { bare: height, players };
    })()`);
    expect(heights.bare).toBeGreaterThan(0);
    expect(heights.players).toEqual([heights.bare, heights.bare]);
  });

  it('shows a failing URL’s error in words', async () => {
    const url = mediaUrl('/missing.m4a');
    await page.getByLabel('Media URLs, one per line').fill(url);
    await page.getByRole('button', { name: 'Fetch' }).click();
    const item = jobFor(url);
    await expect.poll(() => item.getAttribute('data-status'), { timeout: 60_000 }).toBe('failed');
    const id = (await item.getAttribute('data-job-id'))!;
    const record = await svc.getJob(id);
    const error = (record as unknown as { error: { code: string; message: string } }).error;
    expect(error.message.length).toBeGreaterThan(0);
    expect(await item.locator('.problem').textContent()).toBe(`${error.message} (${error.code})`);
    expect(await item.locator('audio').count()).toBe(0);
    // Said in the live region too, for screen readers.
    await expect.poll(() => page.locator('#status').textContent()).toBe(`${url}: failed: ${error.message}`);
    expect(await page.locator('#status').getAttribute('role')).toBe('status');
  });

  it('cancels a slow job while it runs', async () => {
    const url = mediaUrl('/slow.wav');
    await page.getByLabel('Media URLs, one per line').fill(url);
    await page.getByRole('button', { name: 'Fetch' }).click();
    const item = jobFor(url);
    // Running, with its progress shown, before the cancel: the control that it could have ended otherwise.
    await expect.poll(() => item.getAttribute('data-status'), { timeout: 60_000 }).toBe('running');
    await item.locator('progress').waitFor({ state: 'visible', timeout: 60_000 });
    await item.getByRole('button', { name: 'Cancel' }).click();
    await expect.poll(() => item.getAttribute('data-status'), { timeout: 30_000 }).toBe('canceled');
    expect(await item.getByRole('button', { name: 'Cancel' }).isHidden()).toBe(true);
    const id = (await item.getAttribute('data-job-id'))!;
    expect((await svc.getJob(id)).status).toBe('canceled');
    expect(media.downloadsOf(`/${browserName}/slow.wav`)).toBe(0);
  });

  it('lists this browser’s jobs again after a reload, newest first', async () => {
    const before = await ids();
    expect(before).toHaveLength(4);
    await page.reload();
    await expect.poll(() => jobItems().count()).toBe(4);
    expect(await ids()).toEqual(before);
    await expect.poll(states).toEqual(['canceled', 'failed', 'done', 'done']);
  });

  it('meets the WCAG 2.2 AA rules axe-core checks, with finished, failed and canceled jobs shown', async () => {
    await jobFor(mediaUrl('/first.m4a')).locator('.waveform[data-ready="true"]').waitFor({ state: 'attached' });
    // Evaluated by the browser's debugging protocol, which the page's CSP does not govern.
    const axe = await readFile(AXE_SCRIPT, 'utf8');
    const violations = await page.evaluate<Array<{ id: string; nodes: string[] }>>(
      `${axe}\n;axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa'] } }).then((r) => r.violations.map((v) => ({ id: v.id, nodes: v.nodes.map((n) => n.target.join(' ')) })))`,
    );
    expect(violations).toEqual([]);
  });

  it('draws the waveform from peaks.json, not from the WAV, and shows loudness, when the job lists them', async () => {
    const peaksFetched: string[] = [];
    const wavFetched: string[] = [];
    page.on('request', (request) => {
      if (request.resourceType() !== 'fetch') return;
      if (request.url().includes('/peaks.json')) peaksFetched.push(request.url());
      if (request.url().includes('/audio.wav')) wavFetched.push(request.url());
    });
    // The records as the service gives them, changed by `edit`: a known loudness here, to read its
    // figures back; the control takes peaks.json and the loudness out, as for content stored
    // before either was kept.
    const editRecords = (edit: (result: { artifacts: Array<{ name: string }>; loudness?: unknown }) => void) =>
      page.route('**/jobs/*', async (route) => {
        const response = await route.fetch();
        const record = (await response.json()) as {
          result: null | { artifacts: Array<{ name: string }>; loudness?: unknown };
        };
        if (record.result) edit(record.result);
        await route.fulfill({ response, json: record });
      });
    await editRecords((result) => {
      result.loudness = { integrated_lufs: -23.04, range_lu: 4.2, true_peak_dbtp: -1.5 };
    });
    try {
      await page.reload();
      const item = jobFor(mediaUrl('/first.m4a'));
      await item.locator('.waveform[data-ready="true"]').waitFor({ state: 'attached' });
      // The two finished jobs' peaks.json, as the service stored and signed them.
      await expect.poll(() => peaksFetched.length).toBe(2);
      expect(wavFetched).toEqual([]);
      expect(await item.locator('.facts').textContent()).toContain('-23.0 LUFS, range 4.2 LU, true peak -1.5 dBTP');
    } finally {
      await page.unrouteAll();
    }
    // The control: without peaks.json the page fetches the WAV to decode it.
    await editRecords((result) => {
      result.artifacts = result.artifacts.filter((artifact) => artifact.name !== 'peaks.json');
      result.loudness = null;
    });
    try {
      await page.reload();
      await jobFor(mediaUrl('/first.m4a')).locator('.waveform[data-ready="true"]').waitFor({ state: 'attached' });
      await expect.poll(() => wavFetched.length).toBeGreaterThanOrEqual(2);
      expect(await jobFor(mediaUrl('/first.m4a')).locator('.facts').textContent()).toContain('Loudnessnot measured');
    } finally {
      await page.unrouteAll();
    }
  });

  it('fits a phone’s screen without scrolling sideways', async () => {
    await page.setViewportSize({ width: 375, height: 812 });
    try {
      await jobFor(mediaUrl('/first.m4a')).locator('.waveform[data-ready="true"]').waitFor({ state: 'attached' });
      const widths = await page.evaluate<{ scroll: number; client: number }>(
        '({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth })',
      );
      expect(widths.client).toBe(375);
      expect(widths.scroll).toBeLessThanOrEqual(widths.client);
      await page.screenshot({ path: screenshotPath(browserName, '-phone') });
    } finally {
      await page.setViewportSize({ width: 1000, height: 900 });
    }
  });

  it('forgets the key when asked, and asks for it again, keeping the list of jobs', async () => {
    const before = await ids();
    await page.getByRole('button', { name: 'Forget API key' }).click();
    await page.locator('#key-section').waitFor({ state: 'visible' });
    expect(await page.locator('#submit-section').isHidden()).toBe(true);
    expect(await page.evaluate<string>('JSON.stringify({ ...sessionStorage })')).not.toContain(svc.apiKey);
    // Focus moves to the key's field, for a keyboard user.
    expect(await page.evaluate<string>('document.activeElement.id')).toBe('key-input');
    await page.keyboard.type(svc.apiKey);
    await page.keyboard.press('Enter');
    await page.locator('#submit-section').waitFor({ state: 'visible' });
    await expect.poll(ids).toEqual(before);
  });

  it('ran without a Content-Security-Policy violation or an uncaught error', async () => {
    expect(pageProblems).toEqual([]);
    // The controls, that this browser reports both: an image from another origin (the media
    // server's, on loopback), which img-src 'self' refuses before any request; an uncaught error.
    await page.evaluate(
      `document.body.append(Object.assign(document.createElement('img'), { alt: '', src: ${JSON.stringify(media.url('/refused.png'))} }))`,
    );
    await expect.poll(() => pageProblems.join('\n')).toContain('img-src');
    await page.evaluate(`setTimeout(() => { throw new Error('the control error') })`);
    await expect.poll(() => pageProblems.join('\n')).toContain('the control error');
  });
});
