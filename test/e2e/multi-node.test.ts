import { readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { freshDatabaseUrl } from '../support/postgres.js';
import { processesMatching } from '../support/processes.js';
import { HEAVY_TEST_TIMEOUT_MS, ROOT, startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { readDb, storedFiles } from '../support/store-inspect.js';
import { describeLeftovers, workLeftovers } from '../support/work-folder.js';

/**
 * Many nodes on one PostgreSQL database and one shared artifact root: two worker nodes and one
 * API-only node (WORKER_CONCURRENCY=0), each a real service process with its own data dir.
 * Single flight across nodes (the same URL, or the same media through another URL, at once on
 * several nodes: one download), cancel through the API-only node, and kill -9 of a worker node's
 * whole process group mid-download: its jobs end done on the other node once their lease runs
 * out, every URL downloaded to the end once (counted at the media server), nothing left over.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const PLUGIN_DIR = path.join(ROOT, 'test/support/ytdlp-plugins');
const LEASE_S = 5;
const JOBS = 30;
/** 3 s mono WAVs (~265 KB) at 96 KB/s: each download takes ~3 s, long enough to be killed in. */
const THROTTLE = 96 * 1024;

let media: MediaServer;
let databaseUrl: string;
let sql: postgres.Sql;
const sharedRoot = path.join(tmpdir(), `sf-shared-${process.pid}-${Date.now()}`);
const apiKey = 'multi-node-test-key-0123456789';
let a: ServiceHandle;
let b: ServiceHandle;
let api: ServiceHandle;
let tones: MediaFixture[];

function startNode(workers: number): Promise<ServiceHandle> {
  return startService({
    apiKey,
    detached: true,
    env: {
      DATABASE_URL: databaseUrl,
      ARTIFACT_ROOT: sharedRoot,
      WORKER_CONCURRENCY: String(workers),
      JOB_LEASE_S: String(LEASE_S),
      FETCH_ALLOW_HOSTS: media.hostPort,
      PYTHONPATH: PLUGIN_DIR,
      PYTHONDONTWRITEBYTECODE: '1',
      // The test polls 30 jobs at once, far past the per-key limit meant for clients.
      RATE_LIMIT_PER_MINUTE: '0',
    },
  });
}

const nodeIdOf = (svc: ServiceHandle) => svc.logs.find((line) => line.msg === 'listening')!.node_id as string;

beforeAll(async () => {
  media = await startMediaServer();
  databaseUrl = await freshDatabaseUrl();
  sql = postgres(databaseUrl, { max: 2, onnotice: () => {} });
  tones = await Promise.all(
    Array.from({ length: JOBS }, (_, i) =>
      makeTone(FIXTURE_DIR, { seconds: 3 + i / 100, channels: 1, sampleRate: 44100, format: 'wav' }),
    ),
  );
  tones.forEach((tone, i) =>
    media.serveFile(`/job-${i}.wav`, tone.path, { contentType: 'audio/wav', throttleBytesPerSec: THROTTLE }),
  );
  // Three nodes starting at once: they take turns to migrate the database.
  [a, b, api] = await Promise.all([startNode(3), startNode(3), startNode(0)]);
});

afterAll(async () => {
  await Promise.all([a, b, api].map((svc) => svc?.stop().catch(() => undefined)));
  await sql?.end();
  await media?.close();
  await rm(sharedRoot, { recursive: true, force: true });
});

const nodes = () => [a, b, api];

/**
 * Nothing left in the nodes' work folders but a waiting converter each. A job whose record ended
 * before its task did (a follower, a job canceled or reused) removes its folder a moment later:
 * up to 5 s are given.
 */
async function expectNoLeftovers(svcs: ServiceHandle[]): Promise<void> {
  for (const svc of svcs) {
    const settle = Date.now() + 5_000;
    while ((await workLeftovers(svc.dataDir)).length > 0 && Date.now() < settle) await sleep(50);
    const left = await workLeftovers(svc.dataDir);
    expect(left, await describeLeftovers(svc.dataDir, svc.logs, left)).toEqual([]);
  }
}

describe('many nodes on one PostgreSQL and one shared artifact root', () => {
  it('say who they are and what they share', async () => {
    const reports = await Promise.all(
      nodes().map(
        async (svc) => (await svc.request('/healthz', { auth: false })).json() as Promise<Record<string, unknown>>,
      ),
    );
    for (const report of reports)
      expect(report).toMatchObject({ status: 'ok', database: { ok: true, kind: 'postgres' } });
    expect(new Set(reports.map((report) => report.node_id)).size).toBe(3);
  });

  it('the same URL submitted to all three nodes at once is downloaded once, and reads the same everywhere', async () => {
    const tone = await makeTone(FIXTURE_DIR, { seconds: 4, channels: 2, sampleRate: 44100, format: 'wav' });
    media.serveFile('/same.wav', tone.path, { contentType: 'audio/wav', throttleBytesPerSec: 512 * 1024 });
    const submitted = await Promise.all(nodes().map((svc) => svc.submit(media.url('/same.wav'))));
    const ended = await Promise.all(submitted.map((job, i) => nodes()[i]!.waitForJob(job.job_id, ['done', 'failed'])));
    expect(ended.map((job) => job.status)).toEqual(['done', 'done', 'done']);
    expect(new Set(ended.map((job) => job.result!.content_id)).size).toBe(1);
    expect(media.downloadsOf('/same.wav')).toBe(1);
    // Any node answers for any job, with the same record; their signed URLs are valid on every node.
    const seen = await Promise.all(nodes().map((svc) => svc.getJob(submitted[0]!.job_id)));
    const unsigned = (record: JobBody) => ({
      ...record,
      result: {
        ...record.result!,
        artifacts: record.result!.artifacts.map(({ signed_url: _url, ...rest }) => ({
          ...rest,
          signed_url_expires_at: undefined,
        })),
      },
    });
    for (const record of seen) expect(unsigned(record)).toEqual(unsigned(seen[0]!));
    for (const [i, record] of seen.entries()) {
      const other = nodes()[(i + 1) % 3]!;
      const res = await fetch(`${other.baseUrl}${record.result!.artifacts[0]!.signed_url}`, { method: 'HEAD' });
      expect(res.status).toBe(200);
    }
    await expectNoLeftovers(nodes());
  });

  it('the same media through two URL forms, at once on two nodes, is downloaded once', async () => {
    const tone = await makeTone(FIXTURE_DIR, { seconds: 4, channels: 1, sampleRate: 48000, format: 'flac' });
    media.serveFile('/media/multi.flac', tone.path, { contentType: 'audio/flac', throttleBytesPerSec: 256 * 1024 });
    media.route('/api/media/multiNode01', (_req, res) => {
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ title: 't', audio: '/media/multi.flac', ext: 'flac' }));
    });
    const [one, two] = await Promise.all([
      a.submit(media.url('/watch?v=multiNode01')),
      b.submit(media.url('/v/multiNode01')),
    ]);
    const [doneOne, doneTwo] = await Promise.all([
      a.waitForJob(one.job_id, ['done', 'failed']),
      b.waitForJob(two.job_id, ['done', 'failed']),
    ]);
    expect([doneOne.status, doneTwo.status]).toEqual(['done', 'done']);
    expect(doneOne.result!.content_id).toBe(doneTwo.result!.content_id);
    expect(media.downloadsOf('/media/multi.flac')).toBe(1);
    await expectNoLeftovers(nodes());
  });

  it('cancel through the API-only node stops the tools on the worker node running the job', async () => {
    const tone = await makeTone(FIXTURE_DIR, { seconds: 20, channels: 2, sampleRate: 44100, format: 'wav' });
    media.serveFile('/slow-cancel.wav', tone.path, { contentType: 'audio/wav', throttleBytesPerSec: 64 * 1024 });
    const submitted = await api.submit(media.url('/slow-cancel.wav'));
    const deadline = Date.now() + 30_000;
    let job: JobBody = submitted;
    while (!(job.status === 'running' && (job.progress?.bytes_done ?? 0) > 0) && Date.now() < deadline) {
      await sleep(100);
      job = await api.getJob(submitted.job_id);
    }
    expect(job.status).toBe('running');
    const [row] = await sql`select lock_owner from jobs where id = ${submitted.job_id}`;
    expect([nodeIdOf(a), nodeIdOf(b)]).toContain(row!.lock_owner);
    expect((await processesMatching(submitted.job_id)).length).toBeGreaterThan(0);

    // Throttled, the download alone would take about 55 s: tools gone within 10 s of the cancel
    // were stopped by it (how fast, on a quiet machine, is bench material, not a test's).
    const canceledAt = Date.now();
    const res = await api.request(`/jobs/${submitted.job_id}/cancel`, { method: 'POST' });
    expect(res.status).toBe(200);
    while ((await processesMatching(submitted.job_id)).length > 0 && Date.now() - canceledAt < 10_000) await sleep(20);
    expect(await processesMatching(submitted.job_id)).toEqual([]);
    // Canceled everywhere, and the worker node recorded nothing over it.
    for (const svc of nodes()) expect((await svc.getJob(submitted.job_id)).status).toBe('canceled');
    await expectNoLeftovers(nodes());
  });

  it(
    `${JOBS} jobs over two worker nodes; kill -9 of one mid-download: its jobs end done on the other, each URL downloaded once, nothing left over`,
    async () => {
      const submitted = await Promise.all(tones.map((_, i) => nodes()[i % 3]!.submit(media.url(`/job-${i}.wav`))));
      const ids = submitted.map((job) => job.job_id);
      const victim = nodeIdOf(a);

      // Mid-download on the victim: it runs jobs, and bytes of them have arrived.
      let running: string[] = [];
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline) {
        const rows =
          await sql`select id from jobs where lock_owner = ${victim} and status = 'running' and progress_bytes > 0`;
        running = rows.map((row) => row.id as string);
        if (running.length >= 2) break;
        await sleep(50);
      }
      expect(running.length).toBeGreaterThanOrEqual(1);
      // Every job the victim holds now, whether its bytes have started to arrive or not.
      const held = (await sql`select id from jobs where lock_owner = ${victim} and status = 'running'`).map(
        (row) => row.id as string,
      );
      await a.killGroup();
      const killedAt = Date.now();

      const ended = await Promise.all(
        ids.map((id) => api.waitForJob(id, ['done', 'failed', 'canceled'], HEAVY_TEST_TIMEOUT_MS - 60_000)),
      );
      expect(ended.map((job) => job.status)).toEqual(ids.map(() => 'done'));
      // Distinct audio per URL: distinct content, none lost.
      expect(new Set(ended.map((job) => job.result!.content_id)).size).toBe(JOBS);

      // The victim's jobs were taken back (by a surviving node's sweep) once their lease ran out, and
      // run again by the surviving worker node.
      const tookBack = [...b.logs, ...api.logs].filter((line) => line.msg === 'took back jobs whose lease ran out');
      expect(tookBack.reduce((sum, line) => sum + (line.requeued as number), 0)).toBe(held.length);
      const firstTakeBack = Math.min(...tookBack.map((line) => Date.parse(line.time as string)));
      // Within the lease, plus the sweep's period (half a lease) and a little slack for a busy machine.
      expect(firstTakeBack - killedAt).toBeLessThan((LEASE_S * 1.5 + 3) * 1000);
      for (const id of held) {
        const job = ended[ids.indexOf(id)]!;
        expect(job.attempts, id).toBeGreaterThanOrEqual(2);
        expect(Date.parse(job.started_at as string), id).toBeGreaterThan(killedAt);
      }

      // Every URL was downloaded to the end once: the killed node's downloads were cut off.
      for (let i = 0; i < JOBS; i++) expect(media.downloadsOf(`/job-${i}.wav`), `/job-${i}.wav`).toBe(1);

      // Nothing left over: every file at its address has its row and hashes to it, and back.
      const files = await storedFiles(sharedRoot);
      for (const file of files.filter((f) => f.name === 'audio.wav')) expect(file.sha256).toBe(file.contentId);
      const db = await readDb('', databaseUrl);
      expect(db.totalsConsistent).toBe(true);
      expect(new Set(files.map((file) => file.contentId))).toEqual(
        new Set(db.cacheEntries.map((row) => row.content_id)),
      );
      expect(db.jobs.filter((job) => job.status === 'queued' || job.status === 'running')).toEqual([]);
      expect(await sql`select content_id, holder from store_pins`).toEqual([]);
      await expectNoLeftovers([b, api]);
      for (const id of running) expect(await processesMatching(id), `tools of ${id}`).toEqual([]);

      // The dead node's folder still holds its attempts' leftovers, and the shared root may hold a
      // file it was staging when killed; a new node in its place clears them.
      const leftovers = await readdir(path.join(a.dataDir, 'work'));
      const staged = await readdir(path.join(sharedRoot, '.incoming')).catch(() => []);
      const replacement = await startService({
        apiKey,
        dataDir: a.dataDir,
        env: {
          DATABASE_URL: databaseUrl,
          ARTIFACT_ROOT: sharedRoot,
          WORKER_CONCURRENCY: '1',
          JOB_LEASE_S: String(LEASE_S),
          FETCH_ALLOW_HOSTS: media.hostPort,
        },
      });
      try {
        expect(replacement.logs.find((line) => line.msg === 'start-up recovery')).toMatchObject({
          work_folders_removed: leftovers.length,
          incoming_removed: staged.length,
        });
        expect(await readdir(path.join(a.dataDir, 'work'))).toEqual([]);
        expect(await readdir(path.join(sharedRoot, '.incoming')).catch(() => [])).toEqual([]);
      } finally {
        await replacement.stop();
      }
    },
    HEAVY_TEST_TIMEOUT_MS,
  );
});
