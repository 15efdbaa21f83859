/**
 * Debian's browsers driven by playwright-core (never a downloaded browser), headless: chromium
 * over the Chrome DevTools Protocol, and stock Firefox ESR over WebDriver BiDi (playwright's
 * `moz-firefox` channel, which needs no patched Firefox build).
 */
import { existsSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { chromium, firefox, type Browser, type Page } from 'playwright-core';

export const CHROMIUM_PATH = '/usr/bin/chromium';
export const FIREFOX_PATH = '/usr/bin/firefox-esr';

/** The browsers the page is tested in, each with the Debian package that installs it. */
export const BROWSERS = {
  chromium: { path: CHROMIUM_PATH, debianPackage: 'chromium' },
  firefox: { path: FIREFOX_PATH, debianPackage: 'firefox-esr' },
} as const;
export type BrowserName = keyof typeof BROWSERS;

/**
 * Launches `name`. A browser that is not installed is an error that says which package to
 * install (.ci/run installs both), never a skipped test.
 */
export async function launchBrowser(name: BrowserName = 'chromium'): Promise<Browser> {
  const { path, debianPackage } = BROWSERS[name];
  if (!existsSync(path)) {
    throw new Error(`${name} is not installed at ${path}: apt-get install ${debianPackage} (bash .ci/run does)`);
  }
  return await (name === 'chromium' ? launchChromium() : launchFirefox());
}

function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      // This machine's network is closed: without these, chromium keeps trying Google's hosts.
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--autoplay-policy=no-user-gesture-required',
    ],
  });
}

function launchFirefox(): Promise<Browser> {
  answerUnsupportedBidiCommands();
  return firefox.launch({
    channel: 'moz-firefox',
    executablePath: FIREFOX_PATH,
    headless: true,
    // Without it, Firefox ignores services.settings.server below and asks Mozilla's server.
    env: { ...process.env, MOZ_REMOTE_SETTINGS_DEVTOOLS: '1' },
    firefoxUserPrefs: {
      // Tests talk only to loopback. playwright's profile turns off most of Firefox's own traffic;
      // these turn off the rest it was seen to try (remote settings) or may try (captive portal
      // check, push, DNS prefetch), and anything left goes to a proxy at 127.0.0.1:9 (the discard
      // port, which nothing serves here), so it fails on this machine. Loopback addresses never
      // go through a proxy.
      'services.settings.server': 'data:,#remote-settings-dummy/v1',
      'network.captive-portal-service.enabled': false,
      'dom.push.connection.enabled': false,
      'network.dns.disablePrefetch': true,
      'network.proxy.type': 1,
      'network.proxy.share_proxy_settings': true,
      'network.proxy.http': '127.0.0.1',
      'network.proxy.http_port': 9,
      'network.proxy.ssl': '127.0.0.1',
      'network.proxy.ssl_port': 9,
      // Audio plays without a click on the page, as chromium's --autoplay-policy allows.
      'media.autoplay.default': 0,
      'media.autoplay.blocking_policy': 0,
      // No sound device here: with no audio backend at all, Firefox plays on its own clock, as
      // it does on a machine without one, instead of through whatever backend it finds.
      'media.cubeb.force_null_context': true,
      // Scrollbars drawn over the page, taking none of its width, as in headless chromium and on
      // a phone.
      'ui.useOverlayScrollbars': 1,
    },
  });
}

/**
 * WebDriver BiDi commands playwright-core sends on every new browser context that Firefox ESR
 * does not implement yet. Each only overrides an emulated media feature the tests leave at its
 * default, so it is answered as done without reaching Firefox, whose answer (`unknown command`)
 * would fail `browser.newContext()`.
 */
const UNSUPPORTED_BIDI_COMMANDS = new Set(['emulation.setMediaFeaturesOverride']);

interface BidiTransport {
  onmessage?: (message: unknown) => void;
  send: (this: BidiTransport, message: { id?: number; method?: string }) => void;
}

let bidiShimInstalled = false;

function answerUnsupportedBidiCommands(): void {
  if (bidiShimInstalled) return;
  bidiShimInstalled = true;
  // The same module instance `playwright-core` itself loads (its index.js requires it).
  const core = createRequire(import.meta.url)('playwright-core/lib/coreBundle') as {
    server: { WebSocketTransport: { prototype: BidiTransport } };
  };
  const transport = core.server.WebSocketTransport.prototype;
  const send = transport.send;
  transport.send = function (message) {
    if (message.method && UNSUPPORTED_BIDI_COMMANDS.has(message.method)) {
      // Answered on a later turn, as a reply from the browser would be.
      setImmediate(() => this.onmessage?.({ type: 'success', id: message.id, result: {} }));
      return;
    }
    send.call(this, message);
  };
}

/** A page with one <audio preload="metadata"> on its own loopback origin: `${origin}/?src=<audio URL>`. */
export async function startPlayerPages(): Promise<{ origin: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    const src = new URL(req.url ?? '/', 'http://localhost').searchParams.get('src') ?? '';
    const escaped = src.replace(/&/g, '&amp;').replace(/"/g, '&quot;');
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(`<!doctype html><html><body><audio id="player" preload="metadata" src="${escaped}"></audio></body></html>`);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

interface PlayerElement {
  readyState: number;
  duration: number;
  currentTime: number;
  error: { code: number } | null;
  addEventListener(event: string, listener: () => void, options: { once: boolean }): void;
  play(): Promise<void>;
  pause(): void;
}

/**
 * Opens the player page for `src` in a new tab: waits for the metadata, seeks to the middle, plays
 * until half a second past it (10 s at most), pauses and closes the tab. Returns the duration the
 * browser found, the middle, and where playback got to.
 */
export async function playFromMiddle(
  browser: Browser,
  pages: { origin: string },
  src: string,
): Promise<{ duration: number; middle: number; reached: number }> {
  const page = await browser.newPage();
  try {
    await page.goto(`${pages.origin}/?src=${encodeURIComponent(src)}`);
    return await playOnPage(page);
  } finally {
    await page.close();
  }
}

function playOnPage(page: Page): Promise<{ duration: number; middle: number; reached: number }> {
  return page.evaluate(async () => {
    // The project's TypeScript has no DOM library: the little of it used here, typed by hand.
    const audio = (
      globalThis as unknown as { document: { getElementById(id: string): PlayerElement } }
    ).document.getElementById('player');
    const waitFor = (event: string) =>
      new Promise<void>((resolve, reject) => {
        audio.addEventListener(event, () => resolve(), { once: true });
        audio.addEventListener('error', () => reject(new Error(`media error ${audio.error?.code}`)), { once: true });
      });
    if (audio.readyState < 1) await waitFor('loadedmetadata');
    const duration = audio.duration;
    const middle = duration / 2;
    const seeked = waitFor('seeked');
    audio.currentTime = middle;
    await seeked;
    await audio.play();
    const started = performance.now();
    while (audio.currentTime < middle + 0.5 && performance.now() - started < 10_000) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    audio.pause();
    return { duration, middle, reached: audio.currentTime };
  });
}
