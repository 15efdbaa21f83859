/**
 * The web page at `/` as a person uses it, in each of Debian's Chromium and Firefox ESR (driven by
 * playwright-core: test/support/browser.ts), one after the other, against the built service with the real yt-dlp and ffmpeg, behind a real nginx rendering
 * nginx/templates, fetching from a media server on loopback: the API key asked once and a wrong
 * one refused, two URLs pasted and followed live to done over the job event stream (through
 * nginx, all on one stream), one played and seeked by clicking its waveform and with the keyboard,
 * a slow one canceled, a failing one showing its error and retried, a born-done one marked and
 * removed, the list kept across a reload, what the record carries shown (title, download name,
 * the error's detail, the phases), the peaks artifact and loudness used when a job lists them,
 * Cancel all and Clear finished, the key forgotten with its jobs, and an accessibility check
 * (axe-core, WCAG 2.2 AA rules) of the page with a finished job, whose screenshot is saved for
 * people to look at. test/e2e/web-page-many-jobs.test.ts has the page with a hundred jobs.
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

/** A job record as a test changes it before the page sees it. */
interface EditableRecord {
  url: string;
  status: string;
  media: Record<string, unknown> | null;
  result: { artifacts: Array<{ name: string; download_name?: string }>; loudness?: unknown } | null;
  error: { code: string; message: string; detail?: string } | null;
  [field: string]: unknown;
}

const KEY = 'web-page-key-one-0123456789abcdef';
/** Another key of the same service, entered after the first is forgotten. */
const OTHER_KEY = 'web-page-key-two-0123456789abcdef';

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
  ({ svc, nginx } = await startServiceBehindNginx({
    apiKey: KEY,
    env: { FETCH_ALLOW_HOSTS: media.hostPort, API_KEYS: `${KEY},${OTHER_KEY}` },
  }));
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

      // The favicon the page names is served, so no browser asks for a /favicon.ico that 404s.
      expect(html).toContain('<link rel="icon" href="/web/favicon.svg" type="image/svg+xml" />');
      const icon = await fetch(`${origin}/web/favicon.svg`);
      expect(icon.status).toBe(200);
      expect(icon.headers.get('content-type')).toBe('image/svg+xml');
      expect(await icon.text()).toMatch(/^<svg /);

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
  /** Every answer of 400 or more the page got: path and status. */
  const failedAnswers: string[] = [];
  /** The event streams the page asked for (path and query). */
  const streamRequests: string[] = [];
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
    page.on('response', (response) => {
      if (response.status() >= 400) failedAnswers.push(`${new URL(response.url()).pathname} ${response.status()}`);
    });
    page.on('request', (request) => {
      const { pathname, search } = new URL(request.url());
      if (pathname === '/events' || pathname.endsWith('/events')) streamRequests.push(pathname + search);
    });
  });

  afterAll(async () => {
    await browser?.close();
  });

  const jobItems = () => page.locator('#jobs > li');
  const jobFor = (url: string) => page.locator('#jobs > li', { has: page.locator('.job-url', { hasText: url }) });
  const urlsField = () => page.getByLabel('Media URLs, one per line');
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
  const focused = () => page.evaluate<string>('document.activeElement.id || document.activeElement.className');

  /** currentTime of `url`'s <audio>, once `holds` is true of it. */
  async function waitForTime(url: string, holds: (time: number) => boolean, what: string): Promise<number> {
    await expect.poll(() => audioTime(url), { timeout: 20_000, message: what }).toSatisfy(holds);
    return audioTime(url);
  }

  /** Types `urls` into the box and submits them with Ctrl+Enter, as a keyboard user does. */
  async function submitByKeyboard(urls: string[]): Promise<void> {
    await urlsField().fill(urls.join('\n'));
    await urlsField().press('Control+Enter');
    await expect.poll(() => urlsField().inputValue()).toBe('');
  }

  /**
   * Until `undo` is called, every record the page's event streams carry goes through `edit`
   * first: what the page shows of fields this service may not send. The streams asked for while
   * it holds are answered whole, so the jobs they name must all have ended.
   */
  async function editStreamedRecords(edit: (record: EditableRecord) => void): Promise<() => Promise<void>> {
    const handler = async (route: import('playwright-core').Route) => {
      const response = await route.fetch();
      const body = (await response.text()).replace(/^data: (.*)$/gm, (_line, json: string) => {
        const record = JSON.parse(json) as EditableRecord;
        edit(record);
        return `data: ${JSON.stringify(record)}`;
      });
      await route.fulfill({ response, body });
    };
    await page.route('**/events?*', handler);
    return () => page.unroute('**/events?*', handler);
  }

  /**
   * What the page shows of a job, by the record the service gives now: its name (the media's
   * title when there is one, else its URL), whether the URL is shown under it, the download's
   * file name, and the error's secondary line (its code and the tool's detail, when there is one).
   */
  async function shownFor(id: string) {
    const record = (await svc.getJob(id)) as unknown as EditableRecord;
    const title = typeof record.media?.title === 'string' ? record.media.title.trim() : '';
    const wav = record.result?.artifacts.find((artifact) => artifact.name === 'audio.wav');
    return {
      name: title || record.url,
      urlShown: title !== '' && title !== record.url,
      downloadName: wav?.download_name?.trim() || 'audio.wav',
      errorLine: record.error ? [record.error.code, record.error.detail].filter(Boolean).join(': ') : '',
      record,
    };
  }

  it('says where the key comes from, refuses a wrong API key, then takes the right one', async () => {
    await page.goto(nginx.url('/'));
    const source = (await page.locator('#key-source').textContent())!.replace(/\s+/g, ' ');
    expect(source).toContain('data/api-key');
    expect(source).toContain('API_KEYS');
    // Said to screen readers with the field.
    expect(await page.getByLabel('API key of this service').getAttribute('aria-describedby')).toContain('key-source');
    await page.getByLabel('API key of this service').fill('wrong-key-0123456789abcdef');
    await page.getByRole('button', { name: 'Use key' }).click();
    await expect.poll(() => page.locator('#key-error').textContent()).toContain('Wrong API key');
    expect(await page.locator('#submit-section').isHidden()).toBe(true);

    await page.getByLabel('API key of this service').fill(svc.apiKey);
    // Enter in the key's field submits it.
    await page.getByLabel('API key of this service').press('Enter');
    await page.locator('#submit-section').waitFor({ state: 'visible' });
    expect(await page.locator('#key-section').isHidden()).toBe(true);
    // Kept for this tab only, and nowhere else.
    const storage = await page.evaluate<{ session: string; local: string; cookies: string; url: string }>(
      '({ session: JSON.stringify({ ...sessionStorage }), local: JSON.stringify({ ...localStorage }), cookies: document.cookie, url: location.href })',
    );
    expect(storage.session).toContain(svc.apiKey);
    expect(storage.local + storage.cookies + storage.url).not.toContain(svc.apiKey);
  });

  it('takes two pasted URLs with Ctrl+Enter as a batch, keeps the focus in the box, and follows both jobs live to done over one event stream', async () => {
    const urls = [mediaUrl('/first.m4a'), mediaUrl('/second.m4a')];
    const isStream = (line: Record<string, string>) => line.route === '/events' || line.route === '/jobs/{id}/events';
    const streamsBefore = nginx.wholeAccessLines().filter(isStream).length;
    // Every state and phase each job's item shows, as it shows it.
    await page.evaluate(`{
      const seen = (window.seenStates = {});
      const phases = (window.seenPhases = {});
      new MutationObserver(() => {
        for (const item of document.querySelectorAll('#jobs > li')) {
          const states = (seen[item.dataset.jobId] ??= []);
          const state = item.dataset.status;
          if (state && states.at(-1) !== state) states.push(state);
          const shown = (phases[item.dataset.jobId] ??= []);
          const phase = item.dataset.phase;
          if (phase && shown.at(-1) !== phase) shown.push(phase);
        }
      }).observe(document.getElementById('jobs'), { subtree: true, attributes: true, childList: true });
    }`);
    // The label says how to submit from the box.
    expect(
      await urlsField().evaluate(
        (box) => (box as unknown as { labels: Array<{ textContent: string }> }).labels[0]!.textContent,
      ),
    ).toContain('Ctrl+Enter');
    await submitByKeyboard(urls);
    expect(await focused()).toBe('urls');
    await expect.poll(() => jobItems().count()).toBe(2);
    for (const url of urls) await jobFor(url).locator('audio').waitFor({ state: 'attached', timeout: 90_000 });
    const seen = await page.evaluate<Record<string, string[]>>('window.seenStates');
    const phases = await page.evaluate<Record<string, string[]>>('window.seenPhases');
    expect(Object.keys(seen)).toHaveLength(2);
    for (const states of Object.values(seen)) expect(states.at(-1)).toBe('done');
    for (const shown of Object.values(phases)) {
      expect(shown.at(-1)).toBe('done');
      expect(shown.every((phase) => ['queued', 'downloading', 'converting', 'done'].includes(phase))).toBe(true);
    }
    // The page learnt each state from one event stream through nginx, naming both jobs.
    const jobIds = Object.keys(seen);
    const streams = await nginx.accessLines(isStream, (lines) => lines.length >= streamsBefore + 1, 10_000);
    expect(streams.slice(streamsBefore).map((line) => [line.route, line.status])).toEqual([['/events', '200']]);
    expect(streamRequests).toHaveLength(1);
    expect(streamRequests[0]!.replace('/events?jobs=', '').split(',').sort()).toEqual([...jobIds].sort());
    for (const url of urls) {
      const item = jobFor(url);
      expect(await item.locator('.badge').first().textContent()).toBe('done');
      expect(await item.locator('.facts').textContent()).toContain('44100 Hz');
      const download = item.getByRole('link', { name: 'Download WAV' });
      expect(await download.getAttribute('href')).toMatch(/^\/artifacts\/[0-9a-f]{64}\/audio\.wav\?expires=\d+&sig=/);
      const shown = await shownFor((await item.getAttribute('data-job-id'))!);
      // The record's download_name, else audio.wav.
      expect(await download.getAttribute('download')).toBe(shown.downloadName);
      expect(await item.locator('.cancel').isHidden()).toBe(true);
      // When it was submitted and how long it took.
      expect(await item.locator('.job-times').textContent()).toMatch(/^Submitted .+, took \d+ s$/);
      expect(await item.locator('.job-times time').getAttribute('datetime')).toMatch(/^\d{4}-\d\d-\d\dT/);
      // The media's title when the record has one, the URL under it; else the URL, said once.
      expect(await item.locator('.job-title').textContent()).toBe(shown.name);
      expect(await item.locator('.job-url').isVisible()).toBe(shown.urlShown);
      expect(await item.locator('.born-done').isHidden()).toBe(true);
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

  it('shows a failing URL’s error in words, with its code as a secondary line, and retries it: its URL submitted again, the new job in its place', async () => {
    const url = mediaUrl('/missing.m4a');
    await page.getByLabel('Media URLs, one per line').fill(url);
    await page.getByRole('button', { name: 'Fetch' }).click();
    // The focus stays in the form after submitting with the button.
    await expect.poll(() => urlsField().inputValue()).toBe('');
    expect(await focused()).toBe('submit-button');
    const item = jobFor(url);
    await expect.poll(() => item.getAttribute('data-status'), { timeout: 60_000 }).toBe('failed');
    const id = (await item.getAttribute('data-job-id'))!;
    const record = await svc.getJob(id);
    const error = (record as unknown as { error: { code: string; message: string } }).error;
    expect(error.message.length).toBeGreaterThan(0);
    expect(await item.locator('.problem').textContent()).toBe(error.message);
    const shown = await shownFor(id);
    expect(await item.locator('.error-detail').textContent()).toBe(shown.errorLine);
    expect(shown.errorLine.startsWith(error.code)).toBe(true);
    expect(await item.locator('audio').count()).toBe(0);
    // Said in the live region too, for screen readers.
    await expect.poll(() => page.locator('#status').textContent()).toBe(`${shown.name}: failed: ${error.message}`);
    expect(await page.locator('#status').getAttribute('role')).toBe('status');

    // Retry: a new job of the same URL, in the failed one's place in the list.
    const place = (await ids()).indexOf(id);
    const count = await jobItems().count();
    await item.getByRole('button', { name: 'Retry' }).click();
    await expect.poll(async () => (await ids())[place]).not.toBe(id);
    const retried = (await ids())[place]!;
    expect(await jobItems().count()).toBe(count);
    expect((await svc.getJob(retried)).url).toBe(url);
    await expect.poll(() => jobFor(url).getAttribute('data-status'), { timeout: 60_000 }).toBe('failed');
    // The keyboard's focus, on the Retry button, went to the new job's title.
    expect(await focused()).toBe(`job-${retried}-title`);
  });

  it('cancels a slow job while it runs, its download shown with size, speed and time left', async () => {
    const url = mediaUrl('/slow.wav');
    await submitByKeyboard([url]);
    const item = jobFor(url);
    // Running, with its progress shown, before the cancel: the control that it could have ended otherwise.
    await expect.poll(() => item.getAttribute('data-status'), { timeout: 60_000 }).toBe('running');
    await item.locator('progress').waitFor({ state: 'visible', timeout: 60_000 });
    expect(await item.locator('.badge').first().textContent()).toBe('downloading');
    // 23 MB at 64 KiB/s: what has arrived of the whole, the speed over the last seconds, minutes left.
    await expect
      .poll(() => item.locator('[data-field="detail"]').textContent(), { timeout: 30_000 })
      .toMatch(/^[\d.]+ (KiB|MiB) of 22\.\d MiB · [\d.]+ KiB\/s · \d+ min \d+ s left$/);
    await item.getByRole('button', { name: 'Cancel' }).click();
    await expect.poll(() => item.getAttribute('data-status'), { timeout: 30_000 }).toBe('canceled');
    expect(await item.getByRole('button', { name: 'Cancel' }).isHidden()).toBe(true);
    expect(await item.getByRole('button', { name: 'Remove' }).isVisible()).toBe(true);
    const id = (await item.getAttribute('data-job-id'))!;
    expect((await svc.getJob(id)).status).toBe('canceled');
    expect(media.downloadsOf(`/${browserName}/slow.wav`)).toBe(0);
  });

  it('marks a born-done job, and removes a job from the list when asked', async () => {
    const url = mediaUrl('/first.m4a');
    const before = await ids();
    await submitByKeyboard([url]);
    await expect.poll(() => jobItems().count()).toBe(before.length + 1);
    const born = jobItems().first();
    expect(await born.getAttribute('data-born-done')).toBe('true');
    expect(await born.locator('.born-done').isVisible()).toBe(true);
    expect(await born.locator('.born-done').textContent()).toBe('already stored');
    expect(await born.locator('.job-times').textContent()).toMatch(
      /^Submitted .+, already stored: nothing downloaded$/,
    );
    // The control: the job that downloaded it is not marked.
    expect(await page.locator(`#jobs > li[data-job-id="${before.at(-1)}"]`).getAttribute('data-born-done')).toBe(
      'false',
    );

    await born.getByRole('button', { name: 'Remove' }).click();
    await expect.poll(ids).toEqual(before);
    // Gone from what the browser remembers too, and the focus on the next job's title.
    expect(JSON.parse(await page.evaluate<string>("localStorage.getItem('source-fetch.jobs')"))).toEqual(before);
    expect(await focused()).toBe(`job-${before[0]}-title`);
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
    const editRecords = (edit: (result: NonNullable<EditableRecord['result']>) => void) =>
      editStreamedRecords((record) => {
        if (record.result) edit(record.result);
      });
    let undo = await editRecords((result) => {
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
      await undo();
    }
    // The control: without peaks.json the page fetches the WAV to decode it.
    undo = await editRecords((result) => {
      result.artifacts = result.artifacts.filter((artifact) => artifact.name !== 'peaks.json');
      result.loudness = null;
    });
    try {
      await page.reload();
      await jobFor(mediaUrl('/first.m4a')).locator('.waveform[data-ready="true"]').waitFor({ state: 'attached' });
      await expect.poll(() => wavFetched.length).toBeGreaterThanOrEqual(2);
      expect(await jobFor(mediaUrl('/first.m4a')).locator('.facts').textContent()).toContain('Loudnessnot measured');
    } finally {
      await undo();
    }
  });

  it("shows what the record carries: the media's title before its URL, the download's name, the error's detail, a conversion under way (the control: without them, the URL, audio.wav, the code alone)", async () => {
    const first = mediaUrl('/first.m4a');
    const second = mediaUrl('/second.m4a');
    const missing = mediaUrl('/missing.m4a');
    const title = 'Ein „Lied“ / with slashes: עברית 🎵';
    const undo = await editStreamedRecords((record) => {
      if (record.url === first) {
        record.media = { ...(record.media ?? {}), title };
        for (const artifact of record.result!.artifacts) artifact.download_name = `${title}.wav`;
      }
      if (record.url === missing) record.error!.detail = 'the tool said: not found (7f3c)';
      // The second as its record reads while its WAV is being made: running, the download whole.
      if (record.url === second) {
        Object.assign(record, {
          status: 'running',
          finished_at: null,
          result: null,
          progress: { bytes_done: 300_000, bytes_total: 300_000, percent: 100 },
        });
      }
    });
    try {
      await page.reload();
      const item = jobFor(first);
      await expect.poll(() => item.locator('.job-title').textContent()).toBe(title);
      // The URL, second.
      expect(await item.locator('.job-url').isVisible()).toBe(true);
      expect(await item.locator('.job-url').textContent()).toBe(first);
      expect(await item.getByRole('link', { name: 'Download WAV' }).getAttribute('download')).toBe(`${title}.wav`);
      // Its player is named by the title.
      expect(await item.locator('audio').getAttribute('aria-labelledby')).toBe(
        await item.locator('.job-title').getAttribute('id'),
      );

      const failed = jobFor(missing);
      await expect
        .poll(() => failed.locator('.error-detail').textContent())
        .toMatch(/^[a-z_]+: the tool said: not found \(7f3c\)$/);
      expect(await failed.locator('.problem').textContent()).not.toContain('7f3c');

      const converting = jobFor(second);
      await expect.poll(() => converting.getAttribute('data-phase')).toBe('converting');
      expect(await converting.locator('.badge').first().textContent()).toBe('converting');
      expect(await converting.locator('[data-field="detail"]').textContent()).toBe('293.0 KiB downloaded');
      expect(await converting.locator('progress').isVisible()).toBe(true);
      expect(await converting.getByRole('button', { name: 'Cancel' }).isVisible()).toBe(true);
    } finally {
      await undo();
    }
    // The control: the records as this service sends them. The second job's stream, which ended
    // with the job still "running", is opened again and brings its real state.
    await expect.poll(() => jobFor(second).getAttribute('data-status'), { timeout: 20_000 }).toBe('done');
    await page.reload();
    await expect.poll(() => jobFor(first).getAttribute('data-status')).toBe('done');
    const firstShown = await shownFor((await jobFor(first).getAttribute('data-job-id'))!);
    expect(firstShown.name).not.toBe(title);
    expect(await jobFor(first).locator('.job-title').textContent()).toBe(firstShown.name);
    expect(await jobFor(first).locator('.job-url').isVisible()).toBe(firstShown.urlShown);
    await jobFor(first).getByRole('link', { name: 'Download WAV' }).waitFor();
    expect(await jobFor(first).getByRole('link', { name: 'Download WAV' }).getAttribute('download')).toBe(
      firstShown.downloadName,
    );
    const missingShown = await shownFor((await jobFor(missing).getAttribute('data-job-id'))!);
    expect(await jobFor(missing).locator('.error-detail').textContent()).toBe(missingShown.errorLine);
    expect(missingShown.errorLine).not.toContain('7f3c');
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

  it('cancels every running job with Cancel all, leaving the finished ones, then clears the finished ones from the list', async () => {
    const slow = [mediaUrl('/slow.wav?all=1'), mediaUrl('/slow.wav?all=2')];
    const finishedBefore = await ids();
    await submitByKeyboard(slow);
    for (const url of slow)
      await expect.poll(() => jobFor(url).getAttribute('data-status'), { timeout: 60_000 }).not.toBe('queued');
    const cancelAll = page.getByRole('button', { name: 'Cancel all (2)' });
    await cancelAll.click();
    for (const url of slow)
      await expect.poll(() => jobFor(url).getAttribute('data-status'), { timeout: 30_000 }).toBe('canceled');
    // The finished jobs are as they were.
    expect((await states()).slice(2)).toEqual(['canceled', 'failed', 'done', 'done']);
    expect(await cancelAll.isHidden()).toBe(true);
    for (const url of slow) {
      const id = (await jobFor(url).getAttribute('data-job-id'))!;
      expect((await svc.getJob(id)).status).toBe('canceled');
    }

    await page.getByRole('button', { name: `Clear finished (${finishedBefore.length + 2})` }).click();
    await expect.poll(() => jobItems().count()).toBe(0);
    expect(await page.locator('#no-jobs').isVisible()).toBe(true);
    expect(await page.evaluate<string>("localStorage.getItem('source-fetch.jobs')")).toBe('[]');
    expect(await focused()).toBe('jobs-heading');
    // Cleared from the list only: the service still has them.
    expect((await svc.getJob(finishedBefore[0]!)).status).toBe('canceled');
  });

  it("forgets the key and its jobs when asked: another key's holder sees none of them (the control: they were shown)", async () => {
    // A job of the first key, shown: born done, listed with its URL.
    const url = mediaUrl('/first.m4a');
    await submitByKeyboard([url]);
    await expect.poll(() => jobFor(url).getAttribute('data-status')).toBe('done');
    expect(await jobItems().count()).toBe(1);
    expect(await page.locator('#jobs').textContent()).toContain(url);

    // And a URL typed, not submitted yet.
    await urlsField().fill(mediaUrl('/typed-not-sent.m4a'));
    await page.getByRole('button', { name: 'Forget API key' }).click();
    await page.locator('#key-section').waitFor({ state: 'visible' });
    expect(await page.locator('#submit-section').isHidden()).toBe(true);
    expect(await page.evaluate<string>('JSON.stringify({ ...sessionStorage })')).not.toContain(svc.apiKey);
    // Focus moves to the key's field, for a keyboard user.
    expect(await page.evaluate<string>('document.activeElement.id')).toBe('key-input');
    await page.keyboard.type(OTHER_KEY);
    await page.keyboard.press('Enter');
    await page.locator('#submit-section').waitFor({ state: 'visible' });
    expect(await jobItems().count()).toBe(0);
    expect(await page.locator('#no-jobs').isVisible()).toBe(true);
    expect(await page.content()).not.toContain(url);
    expect(await urlsField().inputValue()).toBe('');
    expect(await page.evaluate<string>('JSON.stringify({ ...localStorage })')).not.toContain('-');
    // Nor after a reload.
    await page.reload();
    await page.locator('#submit-section').waitFor({ state: 'visible' });
    expect(await jobItems().count()).toBe(0);
    expect(await page.content()).not.toContain(url);
  });

  it('asked for nothing that failed but the key checks (no favicon 404), and for job states on /events only', async () => {
    // GET /jobs/00000000-… checks a key: 401 for the wrong one, 404 for a right one.
    expect(new Set(failedAnswers)).toEqual(
      new Set(['/jobs/00000000-0000-0000-0000-000000000000 401', '/jobs/00000000-0000-0000-0000-000000000000 404']),
    );
    expect(streamRequests.length).toBeGreaterThan(0);
    expect(streamRequests.every((request) => request.startsWith('/events?jobs='))).toBe(true);
    // The browser asked for the page's icon, and not for /favicon.ico, which would be 404 (as it
    // would have been without the page's link: both browsers ask for it then).
    const mine = nginx
      .wholeAccessLines()
      .filter((line) => line.user_agent!.includes(browserName === 'chromium' ? 'Chrome/' : 'Firefox/'));
    expect(mine.filter((line) => line.uri === '/web/favicon.svg').map((line) => line.status)).toContain('200');
    expect(mine.filter((line) => line.uri === '/favicon.ico')).toEqual([]);
    expect((await fetch(nginx.url('/favicon.ico'))).status).toBe(404);
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
