import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createContentStore, INCOMING_DIR } from '../../src/store/content-store.js';

async function setup() {
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-content-'));
  const store = createContentStore(path.join(dir, 'artifacts'));
  const write = async (name: string, data: Buffer) => {
    const file = path.join(dir, name);
    await writeFile(file, data);
    return file;
  };
  return { dir, store, write };
}

describe('content store', () => {
  it('stores a file under the SHA-256 of its bytes, sharded, and moves it out of the source path', async () => {
    const { dir, store, write } = await setup();
    const data = randomBytes(100_000);
    const source = await write('a.wav', data);
    const stored = await store.put(source, 'audio.wav');
    const expected = createHash('sha256').update(data).digest('hex');
    expect(stored).toEqual({ contentId: expected, bytes: data.length, reused: false });
    const target = path.join(store.root, expected.slice(0, 2), expected, 'audio.wav');
    expect(store.pathOf(expected, 'audio.wav')).toBe(target);
    expect((await readFile(target)).equals(data)).toBe(true);
    expect(await readdir(dir)).toEqual(['artifacts']);
    expect(await readdir(path.join(store.root, INCOMING_DIR))).toEqual([]);
  });

  it('stores identical bytes once and leaves the second source to its owner', async () => {
    const { store, write } = await setup();
    const data = randomBytes(5000);
    const first = await store.put(await write('a', data), 'audio.wav');
    const secondSource = await write('b', data);
    const second = await store.put(secondSource, 'audio.wav');
    expect(second).toEqual({ ...first, reused: true });
    expect((await readFile(secondSource)).equals(data)).toBe(true);
  });

  it('never shows a partial file at a content address: an interrupted write stays in .incoming and is cleared', async () => {
    const { store } = await setup();
    const incoming = path.join(store.root, INCOMING_DIR);
    await mkdir(incoming, { recursive: true });
    // What a crash between staging and rename leaves behind.
    await writeFile(path.join(incoming, 'crashed-write'), randomBytes(10));
    expect(await store.clearIncoming()).toBe(1);
    expect(await readdir(incoming)).toEqual([]);
    expect((await readdir(store.root)).filter((entry) => entry !== INCOMING_DIR)).toEqual([]);
  });

  it('removes content while keeping others', async () => {
    const { store, write } = await setup();
    const a = await store.put(await write('a', randomBytes(10)), 'audio.wav');
    const b = await store.put(await write('b', randomBytes(10)), 'audio.wav');
    await store.remove(a.contentId);
    expect(await store.has(a.contentId, 'audio.wav')).toBe(false);
    expect(store.hasSync(b.contentId, 'audio.wav')).toBe(true);
  });
});
