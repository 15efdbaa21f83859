/** Debian's chromium driven by playwright-core (never a downloaded browser), headless. */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser, type Page } from 'playwright-core';

export const CHROMIUM_PATH = '/usr/bin/chromium';

export function launchBrowser(): Promise<Browser> {
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
