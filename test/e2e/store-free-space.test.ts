import { execFileSync } from 'node:child_process';
import { statfsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { storedFiles } from '../support/store-inspect.js';

/**
 * The store on a volume smaller than ARTIFACT_CAP_BYTES (the 50 GiB default): each artifact root
 * is a tmpfs of 8 MiB the test mounts. Eviction keeps STORE_MIN_FREE_BYTES free on it, so every
 * job ends done and the oldest content goes; the control, with no free space kept, runs into
 * storage_full. A node whose volume something else fills takes no job and says degraded in
 * /healthz until there is room again. Needs mount(2) (root, as CI runs); skipped with a message
 * otherwise.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const VOLUME_BYTES = 8 * 1024 * 1024;
const MIN_FREE = 3 * 1024 * 1024;
// 20 s of mono: a 44.1 kHz 16-bit WAV of about 1.76 MB; four are more than the volume keeps.
const SECONDS = [20, 20.01, 20.02, 20.03, 20.04];

let media: MediaServer;
let base: string;
const mounted: string[] = [];
let mountError = '';

async function tmpfs(name: string): Promise<string | undefined> {
  const root = path.join(base, name);
  await mkdir(root);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${VOLUME_BYTES},mode=0755`, 'tmpfs', root], { stdio: 'pipe' });
    mounted.push(root);
    return root;
  } catch (err) {
    mountError = String((err as { stderr?: Buffer }).stderr ?? err).trim();
    return undefined;
  }
}

beforeAll(async () => {
  media = await startMediaServer();
  base = await mkdtemp(path.join(tmpdir(), 'sf-free-space-'));
  for (const [i, seconds] of SECONDS.entries()) {
    const tone = await makeTone(FIXTURE_DIR, { seconds, channels: 1, sampleRate: 44100, format: 'flac' });
    media.serveFile(`/t${i}.flac`, tone.path, { contentType: 'audio/flac' });
  }
  // For the job that waits for room: fetched by no other test.
  media.serveFile(
    '/waits.flac',
    (await makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'flac' })).path,
    { contentType: 'audio/flac' },
  );
});

afterAll(async () => {
  await media?.close();
  for (const root of mounted) execFileSync('umount', ['-l', root]);
  if (base) await rm(base, { recursive: true, force: true });
});

const freeOn = (root: string) => {
  const stats = statfsSync(root);
  return stats.bavail * stats.bsize;
};

async function metric(svc: ServiceHandle, name: string): Promise<number> {
  const text = await (await svc.request('/metrics')).text();
  return Number(
    text
      .split('\n')
      .find((line) => line.startsWith(`${name} `))
      ?.split(' ')[1],
  );
}

/** Polls `check` (every 50 ms, letting the service's output in) until it holds; fails after `timeoutMs`. */
async function waitFor(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

const fetchTone = async (svc: ServiceHandle, i: number): Promise<JobBody> =>
  svc.waitForJob((await svc.submit(media.url(`/t${i}.flac`))).job_id, ['done', 'failed']);

const evictedOf = (job: JobBody) => (job.result as { evicted?: { at: string } | null } | null)?.evicted;

describe('a store on a volume smaller than its cap', () => {
  const services: ServiceHandle[] = [];
  afterAll(async () => {
    for (const svc of services) await svc.stop();
  });
  const start = async (root: string, minFree: number) => {
    const svc = await startService({
      dataDir: await mkdtemp(path.join(base, 'data-')),
      // One key fills the volume on purpose: no allowance per key.
      env: {
        FETCH_ALLOW_HOSTS: media.hostPort,
        ARTIFACT_ROOT: root,
        STORE_MIN_FREE_BYTES: String(minFree),
        STORE_BYTES_PER_KEY_PER_DAY: '0',
      },
    });
    services.push(svc);
    return svc;
  };

  it('evicts the oldest content to keep room for a job: every job ends done, the volume never fills', async (ctx) => {
    const root = await tmpfs('kept');
    if (!root) return ctx.skip(`cannot mount a tmpfs here (needs root): ${mountError}`);
    const svc = await start(root, MIN_FREE);
    const jobs: JobBody[] = [];
    for (const i of [0, 1, 2, 3]) {
      const job = await fetchTone(svc, i);
      expect({ i, status: job.status, error: job.error }).toEqual({ i, status: 'done', error: null });
      expect(job.result!.artifacts[0]!.bytes).toBeGreaterThan(1_760_000);
      jobs.push(job);
      // Stored, then evicted down to the free space to keep, before the next job is taken.
      await waitFor('the free space to keep', () => freeOn(root) >= MIN_FREE);
    }
    // Four do not fit with 3 MiB free: the two oldest went, the two newest are still served.
    // Two contents of two artifacts each (the WAV and its peaks).
    await waitFor('two evictions', async () => (await metric(svc, 'source_fetch_store_evicted_artifacts_total')) === 4);
    expect([...new Set((await storedFiles(root)).map((file) => file.contentId))].sort()).toEqual(
      [jobs[2]!.result!.content_id, jobs[3]!.result!.content_id].sort(),
    );
    for (const job of jobs.slice(2))
      expect((await svc.request(`/artifacts/${job.result!.content_id}/audio.wav`, { method: 'HEAD' })).status).toBe(
        200,
      );
    expect(evictedOf(await svc.getJob(jobs[0]!.job_id))).toMatchObject({ at: expect.any(String) });
    expect(evictedOf(await svc.getJob(jobs[3]!.job_id))).toBeNull();

    // The metric and /healthz show the free space, and that a job fits.
    const free = await metric(svc, 'source_fetch_store_free_bytes');
    expect(free).toBeGreaterThanOrEqual(MIN_FREE);
    expect(Math.abs(free - freeOn(root))).toBeLessThan(64 * 1024);
    const health = (await (await svc.request('/healthz', { auth: false })).json()) as Record<string, unknown>;
    expect(health).toMatchObject({
      status: 'ok',
      artifact_root: { writable: true, min_free_bytes: MIN_FREE, can_store: true },
    });
  });

  it('the control: with no free space kept (STORE_MIN_FREE_BYTES=0), a job runs into storage_full and nothing is evicted', async (ctx) => {
    const root = await tmpfs('unkept');
    if (!root) return ctx.skip(`cannot mount a tmpfs here (needs root): ${mountError}`);
    const svc = await start(root, 0);
    const statuses: string[] = [];
    for (const i of [0, 1, 2, 3, 4]) {
      const job = await fetchTone(svc, i);
      statuses.push(job.status === 'failed' ? job.error!.code : job.status);
    }
    expect(statuses).toEqual(['done', 'done', 'done', 'done', 'storage_full']);
    expect(await metric(svc, 'source_fetch_store_evicted_artifacts_total')).toBe(0);
  });

  it('a node whose volume is filled by something else takes no job and says degraded, until there is room', async (ctx) => {
    const root = await tmpfs('filled');
    if (!root) return ctx.skip(`cannot mount a tmpfs here (needs root): ${mountError}`);
    // Not the store's: eviction cannot free it.
    const filler = path.join(root, 'filler.bin');
    await writeFile(filler, Buffer.alloc(VOLUME_BYTES - 2 * 1024 * 1024));
    const svc = await start(root, MIN_FREE);
    const health = async () =>
      (await (await svc.request('/healthz', { auth: false })).json()) as {
        status: string;
        artifact_root: Record<string, unknown>;
        warnings: Array<{ code: string; message: string }>;
      };
    const short = await health();
    expect(short).toMatchObject({
      status: 'degraded',
      artifact_root: { min_free_bytes: MIN_FREE, can_store: false, stored_bytes: 0 },
    });
    // Why: nothing of the store to evict, so only the operator can make room.
    expect(short.warnings).toContainEqual({
      code: 'store_low_on_space',
      message: expect.stringContaining('Eviction cannot make room: the store holds 0 bytes of content'),
    });
    expect(await metric(svc, 'source_fetch_store_free_bytes')).toBeLessThan(MIN_FREE);

    const noticed = () =>
      svc.logs.filter((line) => line.msg.startsWith("the artifact root's volume has less free than one job can need"))
        .length;
    // Its workers look for jobs once the tools are ready; from then on, each look finds no room.
    await waitFor('the workers to look for a job', () => noticed() > 0, 60_000);
    const before = noticed();
    const { job_id: id } = await svc.submit(media.url('/waits.flac'));
    // The node looked for a job after this one was queued, and took none.
    await waitFor('the node to look and decline', () => noticed() > before);
    expect((await svc.getJob(id)).status).toBe('queued');
    expect(media.requestsFor('/waits.flac')).toHaveLength(0);
    // Its log says why, once: eviction ran and cannot make the room.
    await waitFor('the log to say eviction cannot make room', () =>
      svc.logs.some((line) => line.msg.startsWith('eviction cannot make room for a job')),
    );

    // The control: room again, the same job is taken and ends done, and the node says ok.
    await rm(filler);
    expect((await svc.waitForJob(id, ['done', 'failed'])).status).toBe('done');
    const room = await health();
    expect(room).toMatchObject({ status: 'ok', artifact_root: { can_store: true } });
    expect(room.warnings.map((warning) => warning.code)).not.toContain('store_low_on_space');
    expect(svc.logs.map((line) => line.msg)).toContain(
      "the artifact root's volume has room for a job again: taking jobs",
    );
    expect(svc.logs.filter((line) => line.msg.startsWith('eviction cannot make room for a job')).length).toBe(1);
  });
});
