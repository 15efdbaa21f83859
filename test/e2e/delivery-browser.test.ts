/**
 * A real browser plays and seeks a stored WAV from a signed URL: Debian's chromium, driven by
 * playwright-core, loads a page served on loopback whose <audio> points at the artifact, once
 * through nginx (which answers signed URLs alone, once the app has authorized the URL) and once
 * through the app's fallback.
 */
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createArtifactStore,
  SIGNING_SECRET,
  startDeliveryApp,
  type ArtifactStore,
  type DeliveryApp,
} from '../../bench/delivery/stack.js';
import { launchBrowser, playFromMiddle, startPlayerPages } from '../support/browser.js';
import { startNginx, type RunningNginx } from '../support/nginx.js';

const SECONDS = 30;

let store: ArtifactStore;
let wav: { cid: string; bytes: Buffer };
let accelApp: DeliveryApp;
let fallbackApp: DeliveryApp;
let nginx: RunningNginx;
let browser: Browser;
let pages: Awaited<ReturnType<typeof startPlayerPages>>;

beforeAll(async () => {
  store = await createArtifactStore();
  wav = await store.addWav(SECONDS);
  accelApp = await startDeliveryApp({ root: store.root, accelRedirectPrefix: '/_artifacts/' });
  fallbackApp = await startDeliveryApp({ root: store.root, accelRedirectPrefix: null });
  nginx = await startNginx({ appPort: accelApp.port, artifactRoot: store.root, urlSigningSecret: SIGNING_SECRET });
  pages = await startPlayerPages();
  browser = await launchBrowser();
});

afterAll(async () => {
  await browser?.close();
  await pages?.close();
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

    const servedBefore =
      mode === 'nginx'
        ? (
            await nginx.accessLines(
              (line) => line.cid === wav.cid,
              () => true,
            )
          ).length
        : 0;

    const result = await playFromMiddle(browser, pages, src);
    expect(Math.abs(result.duration - SECONDS)).toBeLessThanOrEqual(0.05);
    expect(result.reached).toBeGreaterThan(result.middle + 0.5);
    expect(result.reached).toBeLessThan(result.middle + 10);
    // The seek made the browser ask with a Range that starts inside the file: the app saw it in
    // the fallback; behind nginx only nginx did (its log): the app saw nothing.
    let ranges: Array<string | undefined>;
    if (mode === 'fallback') {
      ranges = app.seen.map((r) => r.range);
    } else {
      expect(app.seen).toEqual([]);
      // nginx writes a line when an answer ends, after the browser has its bytes: wait for the
      // line of an answer that starts inside the file.
      const lines = await nginx.accessLines(
        (line) => line.cid === wav.cid,
        (served) => served.slice(servedBefore).some((line) => Number(/^bytes=(\d+)-/.exec(line.range ?? '')?.[1]) > 0),
        10_000,
      );
      ranges = lines.slice(servedBefore).map((line) => line.range);
    }
    const starts = ranges
      .map((range) => /^bytes=(\d+)-\d*$/.exec(range ?? '')?.[1])
      .filter((s) => s !== undefined)
      .map(Number);
    expect(starts.some((start) => start > 0 && start < wav.bytes.length)).toBe(true);
  });
});
