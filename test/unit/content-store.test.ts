import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import fs, { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, vi } from 'vitest';
import { createContentStore, INCOMING_DIR, sha256File, type ContentPins } from '../../src/store/content-store.js';
import { storedFiles } from '../support/store-inspect.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const PUT_LOOP = path.join(import.meta.dirname, 'content-store-put-loop.ts');
/** Rounds of the crash test; each kills two writers. */
const ROUNDS = 16;

/** Pins kept in memory (the service keeps them in the database: test/unit/store-eviction.test.ts). */
function memoryPins(): ContentPins & { held: Map<string, number> } {
  const held = new Map<string, number>();
  return {
    held,
    pin(contentId) {
      held.set(contentId, (held.get(contentId) ?? 0) + 1);
      return Promise.resolve({
        holder: 'memory',
        unpin: () => {
          const left = held.get(contentId)! - 1;
          if (left === 0) held.delete(contentId);
          else held.set(contentId, left);
          return Promise.resolve();
        },
      });
    },
  };
}

/** Far enough ahead that every staged file counts as abandoned. */
const LATER = () => Date.now() + 2 * 60 * 60 * 1000;

async function setup() {
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-content-'));
  const pins = memoryPins();
  const store = createContentStore(path.join(dir, 'artifacts'), pins, 'this-node');
  const write = async (name: string, data: Buffer) => {
    const file = path.join(dir, name);
    await writeFile(file, data);
    return file;
  };
  return { dir, store, write, pins };
}

/** Runs the put loop in a child process, SIGKILLs it at a random moment, and returns its last line. */
async function putUntilKilled(root: string, workDir: string, files: string[]): Promise<string | undefined> {
  const child = spawn(process.execPath, ['--import', 'tsx', PUT_LOOP, root, workDir, ...files], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const closed = once(child, 'close');
  while (!stdout.includes('ready\n')) {
    if (child.exitCode !== null) throw new Error(`put loop exited early: ${stderr}`);
    await sleep(5);
  }
  await sleep(Math.random() * 250);
  child.kill('SIGKILL');
  await closed;
  if (child.signalCode !== 'SIGKILL') throw new Error(`put loop ended on its own: ${stderr}`);
  return stdout.trimEnd().split('\n').at(-1);
}

describe('content store', () => {
  it('stores a file under the SHA-256 of its bytes, sharded, and moves it out of the source path', async () => {
    const { dir, store, write, pins } = await setup();
    const data = randomBytes(100_000);
    const source = await write('a.wav', data);
    const stored = await store.put(source, 'audio.wav');
    const expected = createHash('sha256').update(data).digest('hex');
    expect(stored).toMatchObject({ contentId: expected, bytes: data.length, reused: false });
    // Held from eviction until the caller has recorded it.
    expect(pins.held.get(expected)).toBe(1);
    await stored.release();
    expect(pins.held.has(expected)).toBe(false);
    const target = path.join(store.root, expected.slice(0, 2), expected, 'audio.wav');
    expect(store.pathOf(expected, 'audio.wav')).toBe(target);
    expect((await readFile(target)).equals(data)).toBe(true);
    expect(await readdir(dir)).toEqual(['artifacts']);
    expect(await readdir(path.join(store.root, INCOMING_DIR))).toEqual([]);
  });

  it('shows the observer every byte it hashes, in order, in the one read; stores a derived file beside the content, once', async () => {
    const { store, write } = await setup();
    const data = randomBytes(3 * 1024 * 1024 + 17);
    const seen: Buffer[] = [];
    const stored = await store.put(await write('a', data), 'audio.wav', {
      update: (chunk) => seen.push(Buffer.from(chunk)),
    });
    expect(Buffer.concat(seen).equals(data)).toBe(true);
    expect(seen.length).toBeGreaterThan(1);

    const derived = Buffer.from('{"version":2}');
    expect(await store.putDerived(stored.contentId, 'peaks.json', derived)).toBe(derived.length);
    expect((await readFile(store.pathOf(stored.contentId, 'peaks.json'))).equals(derived)).toBe(true);
    // Already there: left as it is, its size returned.
    expect(await store.putDerived(stored.contentId, 'peaks.json', Buffer.from('{"version":2,"other":1}'))).toBe(
      derived.length,
    );
    expect((await readFile(store.pathOf(stored.contentId, 'peaks.json'))).equals(derived)).toBe(true);
    expect(await readdir(path.join(store.root, INCOMING_DIR))).toEqual([]);
    await stored.release();
  });

  it('hashes files of every length around its 1 MiB reads (each read while the one before is hashed) to their SHA-256, the observer seeing each byte once, in order', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'sf-hash-'));
    const MiB = 1024 * 1024;
    try {
      for (const length of [0, 1, MiB - 1, MiB, MiB + 1, 2 * MiB, 3 * MiB + 17]) {
        const data = randomBytes(length);
        const file = path.join(dir, `f${length}`);
        await writeFile(file, data);
        const seen: Buffer[] = [];
        const result = await sha256File(file, { update: (chunk) => seen.push(Buffer.from(chunk)) });
        expect(result).toEqual({ hex: createHash('sha256').update(data).digest('hex'), bytes: length });
        expect(Buffer.concat(seen).equals(data)).toBe(true);
        expect(seen.every((chunk) => chunk.length > 0 && chunk.length <= MiB)).toBe(true);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('stores identical bytes once and leaves the second source to its owner', async () => {
    const { store, write, pins } = await setup();
    const data = randomBytes(5000);
    const first = await store.put(await write('a', data), 'audio.wav');
    const secondSource = await write('b', data);
    const second = await store.put(secondSource, 'audio.wav');
    expect(second).toMatchObject({ contentId: first.contentId, bytes: first.bytes, reused: true });
    // Both puts hold it; it stays held until the last one lets go.
    await first.release();
    await first.release();
    expect(pins.held.get(first.contentId)).toBe(1);
    await second.release();
    expect(pins.held.has(first.contentId)).toBe(false);
    expect((await readFile(secondSource)).equals(data)).toBe(true);
  });

  it('never shows a partial file at a content address: an interrupted write stays in .incoming and is cleared', async () => {
    const { store } = await setup();
    const incoming = path.join(store.root, INCOMING_DIR);
    await mkdir(incoming, { recursive: true });
    // What a crash between staging and rename leaves behind: named by its writer, or by nobody known.
    const staged = (writer: string) => `${writer}.${Date.now()}.${randomBytes(12).toString('hex')}`;
    const [dead, live] = [staged('host-1-4242-a1b2c3'), staged('host-1-4343-d4e5f6')];
    for (const name of [dead, live, 'crashed-write']) await writeFile(path.join(incoming, name), randomBytes(10));
    // Just staged: only the dead writer's goes; a live one may be writing right now.
    expect(await store.clearIncoming(Date.now(), (writer) => writer === 'host-1-4242-a1b2c3')).toBe(1);
    expect((await readdir(incoming)).sort()).toEqual(['crashed-write', live].sort());
    expect(await store.clearIncoming(LATER(), () => false)).toBe(2);
    expect(await readdir(incoming)).toEqual([]);
    expect((await readdir(store.root)).filter((entry) => entry !== INCOMING_DIR)).toEqual([]);
  });

  it('a put SIGKILLed at any moment leaves the whole file at its address or nothing, and clearIncoming removes the rest', async () => {
    const { dir, store } = await setup();
    const sizes = [
      4 * 1024 * 1024,
      3 * 1024 * 1024 + 17,
      5 * 1024 * 1024 - 3,
      4 * 1024 * 1024 + 1,
      3 * 1024 * 1024,
      5 * 1024 * 1024,
    ];
    const expected = new Map<string, number>();
    const files: string[] = [];
    for (const [i, size] of sizes.entries()) {
      const data = randomBytes(size);
      files.push(path.join(dir, `file-${i}`));
      await writeFile(files[i]!, data);
      expected.set(createHash('sha256').update(data).digest('hex'), size);
    }
    // Sources on the store's own file system are renamed in; from another one (tmpfs), copied in.
    const sameDevice = path.join(dir, 'work');
    await mkdir(sameDevice);
    const otherDevice = await mkdtemp('/dev/shm/sf-put-').catch(() => undefined);
    const crossesDevices = otherDevice !== undefined && (await stat(otherDevice)).dev !== (await stat(dir)).dev;

    let killedInPut = 0;
    let leftovers = 0;
    try {
      for (let round = 0; round < ROUNDS; round++) {
        const workDir = crossesDevices && round % 2 === 1 ? otherDevice : sameDevice;
        // Two writers on the same store, each with its own files, each killed at its own moment.
        const lastLines = await Promise.all(
          [0, 1].map((writer) => putUntilKilled(store.root, workDir, files.slice(writer * 3, writer * 3 + 3))),
        );
        killedInPut += lastLines.filter((line) => line === 'put').length;

        for (const file of await storedFiles(store.root)) {
          expect({ round, file: `${file.contentId}/${file.name}`, sha256: file.sha256, bytes: file.bytes }).toEqual({
            round,
            file: `${file.contentId}/audio.wav`,
            sha256: file.contentId,
            bytes: expected.get(file.contentId),
          });
        }
        // Both writers are dead: their leftovers go at once, however fresh.
        leftovers += await store.clearIncoming(Date.now(), (writer) => writer.startsWith('put-loop-'));
        expect(await readdir(path.join(store.root, INCOMING_DIR)).catch(() => [])).toEqual([]);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
      if (otherDevice) await rm(otherDevice, { recursive: true, force: true });
    }
    // Most kills land inside a put (hashing, staging, syncing, renaming); a few between staging
    // and the rename, which leave a file in .incoming (too few to assert on).
    expect(killedInPut).toBeGreaterThan(ROUNDS / 2);
    console.info(
      `content store crash test: ${killedInPut} of ${ROUNDS * 2} kills inside a put, ${leftovers} leftovers cleared`,
    );
  }, 120_000);

  it('a put whose copy from another file system fails (a full volume) leaves no partial file in .incoming, and its source in place', async () => {
    const { store, write, pins } = await setup();
    const data = randomBytes(100_000);
    const source = await write('a.wav', data);
    const noSpace = Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' });
    // The source is on another file system (rename: EXDEV), and the volume fills half-way through the copy.
    const rename = vi
      .spyOn(fs, 'rename')
      .mockRejectedValueOnce(Object.assign(new Error('EXDEV: cross-device link not permitted'), { code: 'EXDEV' }));
    const copyFile = vi.spyOn(fs, 'copyFile').mockImplementationOnce(async (_from, to) => {
      await writeFile(to, data.subarray(0, data.length / 2));
      throw noSpace;
    });
    try {
      await expect(store.put(source, 'audio.wav')).rejects.toBe(noSpace);
      expect(copyFile).toHaveBeenCalledOnce();
    } finally {
      rename.mockRestore();
      copyFile.mockRestore();
    }
    expect(await readdir(path.join(store.root, INCOMING_DIR))).toEqual([]);
    expect((await readFile(source)).equals(data)).toBe(true);
    expect(pins.held.size).toBe(0);
  });

  it('removes content while keeping others', async () => {
    const { store, write } = await setup();
    const a = await store.put(await write('a', randomBytes(10)), 'audio.wav');
    const b = await store.put(await write('b', randomBytes(10)), 'audio.wav');
    store.removeSync(a.contentId);
    expect(store.hasSync(a.contentId, 'audio.wav')).toBe(false);
    expect(store.hasSync(b.contentId, 'audio.wav')).toBe(true);
  });
});
