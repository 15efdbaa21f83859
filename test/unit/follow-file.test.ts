import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { followFile } from '../../src/jobs/fetch/follow-file.js';

let dir: string;
beforeEach(async () => {
  dir = await fs.mkdtemp(path.join(tmpdir(), 'follow-file-'));
});
afterEach(async () => {
  await fs.rm(dir, { recursive: true, force: true });
});

describe('followFile', () => {
  it('hands on the bytes as a writer appends them, in order, to the length finish() names', async () => {
    const file = path.join(dir, 'growing');
    const seen: Buffer[] = [];
    const follower = followFile(file, (bytes) => seen.push(Buffer.from(bytes)));
    const content = randomBytes(3 * 1024 * 1024 + 123);
    await sleep(30); // the file does not exist yet: the follower waits for it
    const handle = await fs.open(file, 'w');
    for (let at = 0; at < content.length; at += 200_000) {
      await handle.write(content, at, Math.min(200_000, content.length - at), at);
      // It reads while the file is written: the first bytes are seen before the rest is there.
      if (at === 0) while (seen.length === 0) await sleep(2);
    }
    // Bytes written over the start (a header rewritten at the end, as ffmpeg does a WAV's) are not
    // read again.
    await handle.write(Buffer.from('HEAD'), 0, 4, 0);
    await handle.close();
    await follower.finish(content.length);
    const all = Buffer.concat(seen);
    expect(all.length).toBe(content.length);
    expect(all.equals(content)).toBe(true);
    expect(seen.every((bytes) => bytes.length <= 1024 * 1024)).toBe(true);
  });

  it('stops at the end of a file shorter than finish() says', async () => {
    const file = path.join(dir, 'short');
    await fs.writeFile(file, Buffer.alloc(1000, 1));
    let length = 0;
    const follower = followFile(file, (bytes) => (length += bytes.length));
    await follower.finish(5000);
    expect(length).toBe(1000);
  });

  it('stops when abandoned, whether the file exists or not', async () => {
    const never = followFile(path.join(dir, 'never'), () => {});
    await never.abandon();
    const file = path.join(dir, 'stalled');
    await fs.writeFile(file, Buffer.alloc(10));
    let length = 0;
    const stalled = followFile(file, (bytes) => (length += bytes.length));
    while (length < 10) await sleep(5);
    await stalled.abandon();
    expect(length).toBe(10);
  });

  it('rejects finish() when the file never appeared', async () => {
    const follower = followFile(path.join(dir, 'missing'), () => {});
    await expect(follower.finish(10)).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
