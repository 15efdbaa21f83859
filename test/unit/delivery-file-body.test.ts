import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readlink, rename, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { createServer, get, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHUNK_BYTES, createFileBodies, SYNC_READ_BYTES, type FileBodies } from '../../src/delivery/file-body.js';

/** The fallback's file reader: exact bytes, nothing left open, refusals where the file is wrong. */
let dir: string;
let file: string;
let link: string;
const data = randomBytes(3 * CHUNK_BYTES + 12_345);
// Closed as soon as the last request is done, as far as these checks are concerned.
const fileBody = createFileBodies({ lingerMs: 0 }).body;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-file-body-'));
  file = path.join(dir, 'audio.wav');
  await writeFile(file, data);
  link = path.join(dir, 'link.wav');
  await symlink(file, link);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function openDescriptorsOn(target: string): Promise<number> {
  let count = 0;
  for (const fd of await readdir('/proc/self/fd')) {
    if ((await readlink(`/proc/self/fd/${fd}`).catch(() => '')) === target) count++;
  }
  return count;
}

async function collect(body: Uint8Array | ReadableStream<Uint8Array>): Promise<Buffer> {
  if (body instanceof Uint8Array) return Buffer.from(body);
  const chunks: Uint8Array[] = [];
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) chunks.push(chunk);
  return Buffer.concat(chunks);
}

describe('fileBody', () => {
  it.each([
    ['a small range, read at once', 100, 65_635],
    ['exactly one chunk', 0, CHUNK_BYTES - 1],
    ['one byte more than a chunk, streamed', 1, CHUNK_BYTES + 1],
    ['the whole file, streamed', 0, data.length - 1],
    ['the last byte', data.length - 1, data.length - 1],
  ])('%s: exactly bytes start..end, and the file is closed after', async (_label, start, end) => {
    const body = await fileBody(file, start, end);
    expect(body instanceof Uint8Array).toBe(end - start + 1 <= CHUNK_BYTES);
    expect((await collect(body)).equals(data.subarray(start, end + 1))).toBe(true);
    expect(await openDescriptorsOn(file)).toBe(0);
  });

  it('a stream canceled after its first chunk closes the file at once', async () => {
    const body = (await fileBody(file, 0, data.length - 1)) as ReadableStream<Uint8Array>;
    const reader = body.getReader();
    expect((await reader.read()).value?.byteLength).toBe(CHUNK_BYTES);
    expect(await openDescriptorsOn(file)).toBe(1);
    await reader.cancel();
    expect(await openDescriptorsOn(file)).toBe(0);
  });

  it('fails, rather than answer short, when the file is shorter than the range', async () => {
    await expect(fileBody(file, data.length - 10, data.length + 10)).rejects.toThrow(/shorter than its recorded size/);
    const stream = (await fileBody(file, 0, data.length + CHUNK_BYTES)) as ReadableStream<Uint8Array>;
    await expect(collect(stream)).rejects.toThrow(/shorter than its recorded size/);
    expect(await openDescriptorsOn(file)).toBe(0);
  });

  it('never follows a symlink swapped in for the file, on either path', async () => {
    await expect(fileBody(link, 0, 10)).rejects.toMatchObject({ code: 'ELOOP' });
    await expect(fileBody(link, 0, data.length - 1)).rejects.toMatchObject({ code: 'ELOOP' });
  });

  it('a missing file is ENOENT (the handler answers 404), on either path', async () => {
    await expect(fileBody(path.join(dir, 'gone.wav'), 0, 10)).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(fileBody(path.join(dir, 'gone.wav'), 0, data.length - 1)).rejects.toMatchObject({ code: 'ENOENT' });
  });
  it('requests in flight for the same file share one descriptor, closed when the last one ends', async () => {
    const first = ((await fileBody(file, 0, data.length - 1)) as ReadableStream<Uint8Array>).getReader();
    const second = ((await fileBody(file, CHUNK_BYTES, data.length - 1)) as ReadableStream<Uint8Array>).getReader();
    expect(await openDescriptorsOn(file)).toBe(1);
    // A small read meanwhile uses it too, and leaves it open for the streams.
    expect(Buffer.from((await fileBody(file, 10, 19)) as Uint8Array).equals(data.subarray(10, 20))).toBe(true);
    expect(Buffer.from((await first.read()).value!).equals(data.subarray(0, CHUNK_BYTES))).toBe(true);
    await first.cancel();
    expect(await openDescriptorsOn(file)).toBe(1);
    expect(Buffer.from((await second.read()).value!).equals(data.subarray(CHUNK_BYTES, 2 * CHUNK_BYTES))).toBe(true);
    await second.cancel();
    // Closed once a read-ahead the stream may have in flight is over.
    await expect.poll(() => openDescriptorsOn(file)).toBe(0);
    // Opened afresh by the next request.
    expect(Buffer.from((await fileBody(file, 0, 3)) as Uint8Array).equals(data.subarray(0, 4))).toBe(true);
    expect(await openDescriptorsOn(file)).toBe(0);
  });

  it('a cancel while a read is in flight closes the file only once the read is over', async () => {
    for (let i = 0; i < 20; i++) {
      const reader = ((await fileBody(file, 0, data.length - 1)) as ReadableStream<Uint8Array>).getReader();
      const pending = reader.read(); // starts a read
      await reader.cancel();
      await pending.catch(() => undefined);
      await expect.poll(() => openDescriptorsOn(file)).toBe(0);
    }
  });
});

async function eventually(check: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return check();
}

describe('the linger', () => {
  it('keeps a file open between requests that follow each other, and closes it once idle', async () => {
    const bodies = createFileBodies({ lingerMs: 100 });
    expect(Buffer.from((await bodies.body(file, 0, 3)) as Uint8Array).equals(data.subarray(0, 4))).toBe(true);
    // Still open: the next request needs no open.
    expect(await openDescriptorsOn(file)).toBe(1);
    expect(Buffer.from((await bodies.body(file, 4, 7)) as Uint8Array).equals(data.subarray(4, 8))).toBe(true);
    expect(await openDescriptorsOn(file)).toBe(1);
    const closedAt = Date.now();
    expect(await eventually(async () => (await openDescriptorsOn(file)) === 0, 2000)).toBe(true);
    // Not before the linger (the sweep runs every lingerMs).
    expect(Date.now() - closedAt).toBeGreaterThanOrEqual(90);
  });

  it('reads small ranges on the spot from the open descriptor, exact bytes, the descriptor still shared', async () => {
    // A file of its own: its descriptor stays open after the test.
    const spot = path.join(dir, 'read-on-the-spot.wav');
    await writeFile(spot, data);
    const bodies = createFileBodies({ lingerMs: 60_000 });
    // The first request opens the file through the thread pool; the next ones find it open.
    expect(Buffer.from((await bodies.body(spot, 0, 3)) as Uint8Array).equals(data.subarray(0, 4))).toBe(true);
    for (const [start, end] of [
      [100, 100 + SYNC_READ_BYTES - 1],
      [data.length - 10, data.length - 1],
      [CHUNK_BYTES - 5, CHUNK_BYTES + 5],
    ] as const) {
      const body = await bodies.body(spot, start, end);
      expect(body instanceof Uint8Array).toBe(true);
      expect(Buffer.from(body as Uint8Array).equals(data.subarray(start, end + 1))).toBe(true);
    }
    expect(await openDescriptorsOn(spot)).toBe(1);
    // Past the end: refused, never answered short.
    await expect(bodies.body(spot, data.length - 4, data.length + 4)).rejects.toThrow(/shorter than its recorded size/);
  });

  it.each(['body', 'send'] as const)(
    'a file removed while its descriptor lingers is not served again (%s): the next request finds it gone',
    async (via) => {
      const gone = path.join(dir, `removed-by-${via}.wav`);
      await writeFile(gone, data);
      // Linked or not is asked before every use here (the interval is the next test's).
      const bodies = createFileBodies({ lingerMs: 60_000, linkCheckMs: 0 });
      const read = async (start: number, end: number): Promise<Buffer> => {
        if (via === 'body') return collect(await bodies.body(gone, start, end));
        const sink = new PassThrough();
        const chunks: Buffer[] = [];
        sink.on('data', (chunk: Buffer) => chunks.push(chunk));
        const res = Object.assign(sink, { destroyed: false }) as unknown as ServerResponse;
        await bodies.send(res, gone, start, end, () => undefined);
        return Buffer.concat(chunks);
      };
      expect((await read(0, 99)).equals(data.subarray(0, 100))).toBe(true);
      // The control: while the file is there, the next request reads the descriptor kept open.
      expect((await read(100, 199)).equals(data.subarray(100, 200))).toBe(true);
      expect(await openDescriptorsOn(gone)).toBe(1);
      await unlink(gone);
      await expect(read(0, 99)).rejects.toMatchObject({ code: 'ENOENT' });
      await expect(read(0, data.length - 1)).rejects.toMatchObject({ code: 'ENOENT' });
      // And the removed file's descriptor is let go at once, not after the linger.
      expect(await openDescriptorsOn(`${gone} (deleted)`)).toBe(0);
    },
  );

  it('a file moved away (as a scrub quarantines it) is not served from its old address again', async () => {
    const moved = path.join(dir, 'quarantined-soon.wav');
    await writeFile(moved, data);
    const bodies = createFileBodies({ lingerMs: 60_000, linkCheckMs: 0 });
    expect((await collect(await bodies.body(moved, 0, 99))).equals(data.subarray(0, 100))).toBe(true);
    // The control: still at its path, it is read from the descriptor kept open.
    expect((await collect(await bodies.body(moved, 100, 199))).equals(data.subarray(100, 200))).toBe(true);
    await rename(moved, `${moved}.quarantined`);
    await expect(bodies.body(moved, 0, 99)).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(bodies.body(moved, 0, data.length - 1)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('by default finds a removed file gone soon after (it asks at most every 100 ms)', async () => {
    const gone = path.join(dir, 'removed-while-hot.wav');
    await writeFile(gone, data);
    const bodies = createFileBodies({ lingerMs: 60_000 });
    const read = async () => collect(await bodies.body(gone, 0, 99));
    expect((await read()).equals(data.subarray(0, 100))).toBe(true);
    await unlink(gone);
    // Within 2 s, not after the 60 s a descriptor may linger.
    let error: unknown;
    expect(
      await eventually(async () => {
        error = await read().then(
          () => undefined,
          (err: unknown) => err,
        );
        return error !== undefined;
      }, 2000),
    ).toBe(true);
    expect(error).toMatchObject({ code: 'ENOENT' });
  });
});

describe('send, straight to a node response', () => {
  let server: Server;
  let handle: (req: IncomingMessage, res: ServerResponse) => void;
  let port: number;

  beforeAll(async () => {
    server = createServer((req, res) => handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });

  /** GETs from the server, whose handler sends bytes start..end of `target` with `bodies`. */
  function fetchSent(bodies: FileBodies, target: string, start: number, end: number) {
    const heads: number[] = [];
    const failures: unknown[] = [];
    handle = (_req, res) => {
      bodies
        .send(res, target, start, end, () => {
          heads.push(Date.now());
          res.writeHead(200, { 'content-length': String(end - start + 1) });
        })
        .catch((err: unknown) => {
          failures.push(err);
          res.writeHead(404).end();
        });
    };
    return { heads, failures, response: fetch(`http://127.0.0.1:${port}/`) };
  }

  it.each([
    ['a small range', 100, 65_635],
    ['exactly one chunk', 0, CHUNK_BYTES - 1],
    ['one byte more than a chunk', 1, CHUNK_BYTES + 1],
    ['the whole file', 0, data.length - 1],
  ])('%s: exactly bytes start..end, and the file is closed after', async (_label, start, end) => {
    const bodies = createFileBodies({ lingerMs: 0 });
    const sent = fetchSent(bodies, file, start, end);
    const res = await sent.response;
    expect(res.status).toBe(200);
    expect(Buffer.from(await res.arrayBuffer()).equals(data.subarray(start, end + 1))).toBe(true);
    expect(sent.heads.length).toBe(1);
    expect(await eventually(async () => (await openDescriptorsOn(file)) === 0, 1000)).toBe(true);
  });

  it('reuses its chunk buffers: many sends of the whole file give the same bytes every time', async () => {
    const bodies = createFileBodies({ lingerMs: 0 });
    const answers = await Promise.all(
      Array.from({ length: 6 }, async () => {
        const sent = fetchSent(bodies, file, 0, data.length - 1);
        return Buffer.from(await (await sent.response).arrayBuffer());
      }),
    );
    for (const answer of answers) expect(answer.equals(data)).toBe(true);
  });

  it('rejects before writing a head when the file is missing or a symlink', async () => {
    for (const target of [path.join(dir, 'gone.wav'), link]) {
      const sent = fetchSent(createFileBodies({ lingerMs: 0 }), target, 0, 10);
      expect((await sent.response).status).toBe(404);
      expect(sent.heads).toEqual([]);
      expect(sent.failures.length).toBe(1);
    }
  });

  it('a client that goes away mid-file releases the file', async () => {
    const bodies = createFileBodies({ lingerMs: 0 });
    handle = (_req, res) => {
      void bodies.send(res, file, 0, data.length - 1, () =>
        res.writeHead(200, { 'content-length': String(data.length) }),
      );
    };
    await new Promise<void>((resolve, reject) => {
      get(`http://127.0.0.1:${port}/`, (res) => {
        res.once('data', () => {
          res.destroy();
          resolve();
        });
      }).on('error', reject);
    });
    expect(await eventually(async () => (await openDescriptorsOn(file)) === 0, 1000)).toBe(true);
  });
});
