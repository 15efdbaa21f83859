import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type ServiceHandle } from '../support/service.js';
import { readDb, storedFiles } from '../support/store-inspect.js';
import { workLeftovers } from '../support/work-folder.js';

/**
 * The artifact root full: a small tmpfs mounted by the test is ARTIFACT_ROOT. A job whose WAV
 * does not fit fails with storage_full; the store and the database stay consistent (no file at
 * any content address, no cache row, no alias, nothing left in .incoming); once space is freed
 * the next submission succeeds. Needs mount(2) (root, as CI runs); skipped with a message otherwise.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const TMPFS_BYTES = 1024 * 1024;

let media: MediaServer;
let base: string;
let root: string;
let mounted = false;
let mountError = '';

beforeAll(async () => {
  media = await startMediaServer();
  base = await mkdtemp(path.join(tmpdir(), 'sf-storage-'));
  root = path.join(base, 'artifacts');
  await mkdir(root);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${TMPFS_BYTES},mode=0755`, 'tmpfs', root], { stdio: 'pipe' });
    mounted = true;
  } catch (err) {
    mountError = String((err as { stderr?: Buffer }).stderr ?? err).trim();
  }
});

afterAll(async () => {
  await media?.close();
  if (mounted) execFileSync('umount', ['-l', root]);
  if (base) await rm(base, { recursive: true, force: true });
});

describe('artifact root full', () => {
  let svc: ServiceHandle | undefined;
  afterAll(async () => {
    await svc?.stop();
  });

  it('fails the job with storage_full, stays consistent, and recovers once space is freed', async (ctx) => {
    if (!mounted) ctx.skip(`cannot mount a tmpfs here (needs root): ${mountError}`);
    // 10 s of mono audio: a 44.1 kHz 16-bit WAV of ~880 KB, more than the room left below.
    const tone = await makeTone(FIXTURE_DIR, { seconds: 10, channels: 1, sampleRate: 22050, format: 'mp3' });
    media.serveFile('/big.mp3', tone.path, { contentType: 'audio/mpeg' });
    media.serveFile('/big-again.mp3', tone.path, { contentType: 'audio/mpeg' });
    const filler = path.join(root, 'filler.bin');
    await writeFile(filler, Buffer.alloc(TMPFS_BYTES - 200 * 1024));

    // No free space kept (STORE_MIN_FREE_BYTES=0): the job is taken and runs into the full volume
    // (test/e2e/store-free-space.test.ts has the node that keeps room and takes no job without it).
    svc = await startService({
      dataDir: path.join(base, 'data'),
      env: { FETCH_ALLOW_HOSTS: media.hostPort, ARTIFACT_ROOT: root, STORE_MIN_FREE_BYTES: '0' },
    });
    const failed = await svc.waitForJob((await svc.submit(media.url('/big.mp3'))).job_id, ['done', 'failed']);
    expect(failed.status).toBe('failed');
    expect(failed.error).toMatchObject({
      code: 'storage_full',
      message: 'The service has no storage space left for this file.',
    });
    expect(failed.error!.message).not.toContain(root);

    // Consistent: nothing at any content address, nothing half-written, no row refers to content.
    expect(await storedFiles(root)).toEqual([]);
    expect(await readdir(path.join(root, '.incoming')).catch(() => [])).toEqual([]);
    expect(await workLeftovers(svc.dataDir)).toEqual([]);
    const afterFailure = await readDb(svc.dataDir);
    expect(afterFailure.integrity).toBe('ok');
    expect(afterFailure.cacheEntries).toEqual([]);
    expect(afterFailure.aliases).toEqual([]);
    // The service itself is still up.
    expect((await svc.request('/healthz', { auth: false })).status).toBe(200);

    // Space freed: the same URL, submitted again, and a new one both succeed.
    await rm(filler);
    const retried = await svc.waitForJob((await svc.submit(media.url('/big.mp3'))).job_id, ['done', 'failed']);
    expect(retried.error).toBeNull();
    expect(retried.status).toBe('done');
    const other = await svc.waitForJob((await svc.submit(media.url('/big-again.mp3'))).job_id, ['done', 'failed']);
    expect(other.status).toBe('done');
    const files = await storedFiles(root);
    expect(files.map((file) => file.name).sort()).toEqual(['audio.wav', 'peaks.json']);
    expect(files.find((file) => file.name === 'audio.wav')!.sha256).toBe(retried.result!.content_id);
    expect((await readDb(svc.dataDir)).cacheEntries).toEqual([
      expect.objectContaining({ content_id: retried.result!.content_id, name: 'audio.wav' }),
      expect.objectContaining({ content_id: retried.result!.content_id, name: 'peaks.json' }),
    ]);
  });
});
