/**
 * A real browser plays and seeks a stored WAV from a signed URL: Debian's chromium, driven by
 * playwright-core, loads a page served on loopback whose <audio> points at the artifact, once
 * through nginx (X-Accel-Redirect) and once through the app's fallback.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createArtifactStore, startDeliveryApp, type ArtifactStore, type DeliveryApp } from '../../bench/delivery/stack.js';
import { launchBrowser } from '../support/browser.js';
import { startNginx, type RunningNginx } from '../support/nginx.js';

const SECONDS = 30;

interface PlayerElement {
  readyState: number;
  duration: number;
  currentTime: number;
  error: { code: number } | null;
  addEventListener(event: string, listener: () => void, options: { once: boolean }): void;
  play(): Promise<void>;
  pause(): void;
}

let store: ArtifactStore;
let wav: { cid: string; bytes: Buffer };
let accelApp: DeliveryApp;
let fallbackApp: DeliveryApp;
let nginx: RunningNginx;
let browser: Browser;
let pages: Server;
let pagesPort: number;

beforeAll(async () => {
  store = await createArtifactStore();
  wav = await store.addWav(SECONDS);
  accelApp = await startDeliveryApp({ root: store.root, accelRedirectPrefix: '/_artifacts/' });
  fallbackApp = await startDeliveryApp({ root: store.root, accelRedirectPrefix: null });
  nginx = await startNginx({ appPort: accelApp.port, artifactRoot: store.root });
  // The page with the player, on its own origin: /?src=<audio URL>.
  pages = createServer((req, res) => {
    const src = new URL(req.url ?? '/', 'http://localhost').searchParams.get('src') ?? '';
    const escaped = src.replace(/&/g, '&amp;').replace(/"/g, '&quot;');
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(`<!doctype html><html><body><audio id="player" preload="metadata" src="${escaped}"></audio></body></html>`);
  });
  await new Promise<void>((resolve) => pages.listen(0, '127.0.0.1', resolve));
  pagesPort = (pages.address() as AddressInfo).port;
  browser = await launchBrowser();
});

afterAll(async () => {
  await browser?.close();
  await new Promise((resolve) => pages?.close(resolve));
  await nginx?.stop();
  await accelApp?.close();
  await fallbackApp?.close();
  await store?.remove();
});

describe.each(['nginx', 'fallback'] as const)('<audio> with a signed URL through %s', (mode) => {
  it('loads metadata with the WAV duration, seeks to the middle and plays from there with a Range request', async () => {
    const app = mode === 'nginx' ? accelApp : fallbackApp;
    const origin = mode === 'nginx' ? nginx.url('') : `http://127.0.0.1:${fallbackApp.port}`;
    const src = origin + app.signedPath(wav.cid);
    app.seen.length = 0;

    const page = await browser.newPage();
    try {
      await page.goto(`http://127.0.0.1:${pagesPort}/?src=${encodeURIComponent(src)}`);
      const result = await page.evaluate(async () => {
        // The project's TypeScript has no DOM library: the little of it used here, typed by hand.
        const audio = (globalThis as unknown as { document: { getElementById(id: string): PlayerElement } }).document.getElementById('player');
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
      expect(Math.abs(result.duration - SECONDS)).toBeLessThanOrEqual(0.05);
      expect(result.reached).toBeGreaterThan(result.middle + 0.5);
      expect(result.reached).toBeLessThan(result.middle + 10);
    } finally {
      await page.close();
    }
    // The seek made the browser ask with a Range that starts inside the file (nginx forwards the
    // request headers to the app as they came, so the app sees them in both modes).
    const starts = app.seen.map((r) => /^bytes=(\d+)-\d*$/.exec(r.range ?? '')?.[1]).filter((s) => s !== undefined).map(Number);
    expect(starts.some((start) => start > 0 && start < wav.bytes.length)).toBe(true);
  });
});
