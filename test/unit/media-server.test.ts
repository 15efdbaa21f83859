import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startMediaServer, type MediaServer } from '../support/media-server.js';

describe('media server', () => {
  let dir: string;
  let file: string;
  const bytes = Buffer.from(Array.from({ length: 100_000 }, (_, i) => i % 251));
  let server: MediaServer;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'media-server-'));
    file = join(dir, 'a.bin');
    await writeFile(file, bytes);
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  beforeEach(async () => {
    server = await startMediaServer();
    server.serveFile('/a.m4a', file, { contentType: 'audio/mp4' });
  });
  afterEach(async () => {
    await server.close();
  });

  it('serves a file on 127.0.0.1 and logs the request', async () => {
    expect(server.hostPort).toMatch(/^127\.0\.0\.1:\d+$/);
    const res = await fetch(server.url('/a.m4a?x=1'), { headers: { 'user-agent': 'test-agent' } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('audio/mp4');
    expect(res.headers.get('accept-ranges')).toBe('bytes');
    expect(Buffer.from(await res.arrayBuffer()).equals(bytes)).toBe(true);
    const [logged] = server.requestsFor('/a.m4a');
    expect(logged).toMatchObject({ method: 'GET', path: '/a.m4a?x=1', headers: { 'user-agent': 'test-agent' } });
    expect(server.requests).toHaveLength(1);
  });

  it('answers single ranges', async () => {
    const part = await fetch(server.url('/a.m4a'), { headers: { range: 'bytes=10-19' } });
    expect(part.status).toBe(206);
    expect(part.headers.get('content-range')).toBe('bytes 10-19/100000');
    expect(Buffer.from(await part.arrayBuffer()).equals(bytes.subarray(10, 20))).toBe(true);

    const suffix = await fetch(server.url('/a.m4a'), { headers: { range: 'bytes=-5' } });
    expect(Buffer.from(await suffix.arrayBuffer()).equals(bytes.subarray(-5))).toBe(true);

    const open = await fetch(server.url('/a.m4a'), { headers: { range: 'bytes=99990-' } });
    expect(open.headers.get('content-length')).toBe('10');
    await open.arrayBuffer();

    const beyond = await fetch(server.url('/a.m4a'), { headers: { range: 'bytes=100000-' } });
    expect(beyond.status).toBe(416);
    expect(beyond.headers.get('content-range')).toBe('bytes */100000');
  });

  it('answers HEAD without a body', async () => {
    const res = await fetch(server.url('/a.m4a'), { method: 'HEAD' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-length')).toBe('100000');
  });

  it('redirects, serves custom routes and answers 404 otherwise', async () => {
    server.redirect('/r', '/a.m4a', 301);
    server.route('/list.m3u8', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/vnd.apple.mpegurl' }).end('#EXTM3U\n');
    });
    const redirected = await fetch(server.url('/r'), { redirect: 'manual' });
    expect(redirected.status).toBe(301);
    expect(redirected.headers.get('location')).toBe('/a.m4a');
    const followed = await fetch(server.url('/r'));
    expect(followed.url).toBe(server.url('/a.m4a'));
    await followed.arrayBuffer();
    expect(await (await fetch(server.url('/list.m3u8'))).text()).toBe('#EXTM3U\n');
    expect((await fetch(server.url('/missing'))).status).toBe(404);
    expect(server.requestsFor('/r')).toHaveLength(2);
  });

  it('can answer with another status or without a Content-Length', async () => {
    server.serveFile('/gone', file, { contentType: 'text/html', status: 410 });
    server.serveFile('/chunked', file, { contentType: 'audio/mpeg', unknownLength: true });
    const gone = await fetch(server.url('/gone'), { headers: { range: 'bytes=0-1' } });
    expect(gone.status).toBe(410);
    await gone.arrayBuffer();
    const chunked = await fetch(server.url('/chunked'));
    expect(chunked.headers.get('content-length')).toBeNull();
    expect(chunked.headers.get('transfer-encoding')).toBe('chunked');
    expect((await chunked.arrayBuffer()).byteLength).toBe(100_000);
  });

  it('throttles: the first bytes come at once, the whole file takes size/rate', async () => {
    server.serveFile('/slow', file, { contentType: 'audio/mp4', throttleBytesPerSec: 200_000 });
    const started = Date.now();
    const res = await fetch(server.url('/slow'));
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const first = await reader.read();
    expect(first.value?.length).toBeGreaterThan(0);
    expect(Date.now() - started).toBeLessThan(300);
    let total = first.value!.length;
    for (let r = await reader.read(); !r.done; r = await reader.read()) total += r.value.length;
    expect(total).toBe(100_000);
    // 100 kB at 200 kB/s: about 0.5 s (the last tick is not waited for).
    expect(Date.now() - started).toBeGreaterThanOrEqual(400);
  });

  it('close() cuts a throttled download in flight', async () => {
    server.serveFile('/slow', file, { contentType: 'audio/mp4', throttleBytesPerSec: 1000 });
    const ended = new Promise<string>((resolve) => {
      request(server.url('/slow'), (res) => {
        res.once('data', () => void server.close());
        res.on('error', () => resolve('error'));
        res.on('close', () => resolve(res.complete ? 'complete' : 'cut'));
      }).end();
    });
    const started = Date.now();
    expect(['cut', 'error']).toContain(await ended);
    expect(Date.now() - started).toBeLessThan(2000);
  });
});
