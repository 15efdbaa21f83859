/**
 * The streaming fallback's own promises: a 1 GiB artifact streams in flat memory, a client that
 * disconnects releases the file at once, and the Range corners nginx would otherwise handle.
 * The app runs in this process, so /proc/self/fd shows the server's open files.
 */
import { mkdir, open, readdir, readlink } from 'node:fs/promises';
import { connect } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { artifactRelativePath, artifactUrlPath } from '../../src/store/layout.js';
import {
  API_KEY,
  createArtifactStore,
  startDeliveryApp,
  type ArtifactStore,
  type DeliveryApp,
} from '../../bench/delivery/stack.js';

const BIG_CID = '1'.repeat(64);
const GIB = 1024 ** 3;

let store: ArtifactStore;
let app: DeliveryApp;
let bigFile: string;
let wav: { cid: string; bytes: Buffer };

beforeAll(async () => {
  store = await createArtifactStore();
  wav = await store.addWav(2);
  // Sparse: 1 GiB long, no disk used. resolveArtifactPath checks the cid's form, not the hash.
  bigFile = path.join(store.root, artifactRelativePath(BIG_CID, 'audio.wav'));
  await mkdir(path.dirname(bigFile), { recursive: true });
  const handle = await open(bigFile, 'w');
  await handle.truncate(GIB);
  await handle.close();
  app = await startDeliveryApp({ root: store.root, accelRedirectPrefix: null });
});

afterAll(async () => {
  await app?.close();
  await store?.remove();
});

/** How many of this process's descriptors are open on `file`. */
async function openDescriptorsOn(file: string): Promise<number> {
  let count = 0;
  for (const fd of await readdir('/proc/self/fd')) {
    const target = await readlink(`/proc/self/fd/${fd}`).catch(() => '');
    if (target === file) count++;
  }
  return count;
}

async function eventually(check: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return check();
}

/** Starts a GET of the big file over a raw socket and calls `onBytes` as the body arrives. */
function download(onBytes: (total: number, socket: ReturnType<typeof connect>) => void): Promise<number> {
  return new Promise((resolve, reject) => {
    let total = 0;
    const socket = connect({ host: '127.0.0.1', port: app.port }, () => {
      socket.write(
        `GET ${artifactUrlPath(BIG_CID, 'audio.wav')} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: ${API_KEY}\r\nConnection: close\r\n\r\n`,
      );
    });
    socket.on('data', (chunk: Buffer) => {
      total += chunk.length;
      onBytes(total, socket);
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(total));
  });
}

describe('fallback streaming', () => {
  it('a client that disconnects mid-download releases the file at once', async () => {
    expect(await openDescriptorsOn(bigFile)).toBe(0);
    let openWhileStreaming = -1;
    let probing = false;
    await download((total, socket) => {
      if (total < 16 * 1024 * 1024 || probing) return;
      probing = true;
      socket.pause();
      void openDescriptorsOn(bigFile).then((n) => {
        openWhileStreaming = n;
        socket.destroy();
      });
    });
    expect(openWhileStreaming).toBe(1);
    expect(await eventually(async () => (await openDescriptorsOn(bigFile)) === 0, 1000)).toBe(true);
  });

  it('streams 1 GiB in flat memory and closes the file at the end', async () => {
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
    const received = await download(() => undefined);
    clearInterval(sampler);
    expect(received).toBeGreaterThan(GIB);
    // A buffered file would add 1 GiB; streaming holds a few chunks in flight.
    expect(peak - before).toBeLessThan(128 * 1024 * 1024);
    expect(await eventually(async () => (await openDescriptorsOn(bigFile)) === 0, 1000)).toBe(true);
  });

  it('HEAD never opens the file', async () => {
    const res = await fetch(`http://127.0.0.1:${app.port}${artifactUrlPath(BIG_CID, 'audio.wav')}`, {
      method: 'HEAD',
      headers: { 'x-api-key': API_KEY },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-length')).toBe(String(GIB));
    expect(await openDescriptorsOn(bigFile)).toBe(0);
  });

  it('a range deep in a large file comes from its offset', async () => {
    const res = await fetch(`http://127.0.0.1:${app.port}${artifactUrlPath(BIG_CID, 'audio.wav')}`, {
      headers: { 'x-api-key': API_KEY, range: `bytes=${GIB - 2_000_000}-` },
    });
    expect(res.status).toBe(206);
    expect(res.headers.get('content-range')).toBe(`bytes ${GIB - 2_000_000}-${GIB - 1}/${GIB}`);
    expect((await res.arrayBuffer()).byteLength).toBe(2_000_000);
  });
});

describe('fallback Range corners', () => {
  const url = () => `http://127.0.0.1:${app.port}${artifactUrlPath(wav.cid, 'audio.wav')}`;
  const get = (headers: Record<string, string>) => fetch(url(), { headers: { 'x-api-key': API_KEY, ...headers } });

  it('several ranges at once answer the whole file with 200 (documented choice)', async () => {
    const res = await get({ range: 'bytes=0-9,20-29' });
    expect(res.status).toBe(200);
    expect(Buffer.from(await res.arrayBuffer()).equals(wav.bytes)).toBe(true);
  });

  it('a malformed or reversed Range is ignored', async () => {
    for (const range of ['bytes=9-0', 'bytes=x-y', 'lines=1-2']) {
      const res = await get({ range });
      expect(res.status, range).toBe(200);
      await res.arrayBuffer();
    }
  });

  it('If-Range with the Last-Modified date keeps the Range; an older date does not', async () => {
    const head = await get({});
    const lastModified = head.headers.get('last-modified')!;
    await head.arrayBuffer();
    const same = await get({ range: 'bytes=0-3', 'if-range': lastModified });
    expect(same.status).toBe(206);
    expect(Buffer.from(await same.arrayBuffer()).toString('latin1')).toBe('RIFF');
    const older = await get({
      range: 'bytes=0-3',
      'if-range': new Date(Date.parse(lastModified) - 1000).toUTCString(),
    });
    expect(older.status).toBe(200);
    await older.arrayBuffer();
  });

  it('If-Modified-Since at the file date answers 304', async () => {
    const first = await get({});
    const lastModified = first.headers.get('last-modified')!;
    await first.arrayBuffer();
    const res = await get({ 'if-modified-since': lastModified });
    expect(res.status).toBe(304);
  });

  it('HEAD with a Range answers the 206 headers', async () => {
    const res = await fetch(url(), { method: 'HEAD', headers: { 'x-api-key': API_KEY, range: 'bytes=10-19' } });
    expect(res.status).toBe(206);
    expect(res.headers.get('content-range')).toBe(`bytes 10-19/${wav.bytes.length}`);
    expect(res.headers.get('content-length')).toBe('10');
  });
});
