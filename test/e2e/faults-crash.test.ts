import { readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { processesMatching } from '../support/processes.js';
import { HEAVY_TEST_TIMEOUT_MS, startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { readDb, storedFiles } from '../support/store-inspect.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import { workLeftovers } from '../support/work-folder.js';

/**
 * kill -9 of the service in the middle of downloads, again and again. Each round submits its own
 * jobs, kills the service while they run, checks the store while it is dead, restarts it and
 * lets it finish the round's jobs. Then, after every restart and not only the last one: every
 * job of the round is done or failed with a code (none still queued or running), no temporary
 * file is left under DATA_DIR/work or ARTIFACT_ROOT/.incoming, no partial artifact is visible
 * (every file at a content address hashes to it), every cache row has its file, no tool process
 * is left, and the database is sound. On both databases; the jobs a dead service held are taken
 * back when their (short, here) lease runs out.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const KILLS = 3;
/** Kill at different points after the first bytes: early in a download, later in it, around conversion and storing. */
const DELAYS_MS = [400, 1000, 1600];
/** Seconds of each round's tones: distinct audio per URL (so distinct content ids); ~0.7–1.4 MB WAVs sent at 1 MB/s. */
const ROUND_SECONDS = [
  [4, 5, 6],
  [7, 4.5, 5.5],
  [8, 6.5, 7.5],
];

let media: MediaServer;
let rounds: MediaFixture[][];

beforeAll(async () => {
  rounds = await Promise.all(
    ROUND_SECONDS.map((secs) =>
      Promise.all(
        secs.map((seconds) => makeTone(FIXTURE_DIR, { seconds, channels: 2, sampleRate: 44100, format: 'wav' })),
      ),
    ),
  );
  media = await startMediaServer();
  rounds.forEach((tones, r) =>
    tones.forEach((tone, i) =>
      media.serveFile(`/crash-${r}-${i}.wav`, tone.path, {
        contentType: 'audio/wav',
        throttleBytesPerSec: 1024 * 1024,
      }),
    ),
  );
});

afterAll(async () => {
  await media?.close();
});

describe.each(BACKENDS)('kill -9 in the middle of downloads, repeated, on %s', (kind) => {
  const dataDir = path.join(tmpdir(), `sf-crash-${kind}-${process.pid}-${Date.now()}`);
  const artifactRoot = path.join(dataDir, 'artifacts');
  let databaseEnv: Record<string, string>;

  beforeAll(async () => {
    databaseEnv = await serviceEnv(kind);
  });

  afterAll(async () => {
    await rm(dataDir, { recursive: true, force: true });
  });

  /** No partial artifact at a content address, every cache row and done job has its file, the database sound. */
  async function expectConsistent(label: string) {
    const files = await storedFiles(artifactRoot);
    // A WAV hashes to its address; its peaks beside it are whole JSON.
    for (const file of files.filter((f) => f.name === 'audio.wav'))
      expect(file.sha256, `${label}: ${file.contentId}/${file.name}`).toBe(file.contentId);
    for (const file of files.filter((f) => f.name !== 'audio.wav')) {
      expect(file.name, `${label}: ${file.contentId}/${file.name}`).toBe('peaks.json');
      const peaks = JSON.parse(
        await readFile(path.join(artifactRoot, file.contentId.slice(0, 2), file.contentId, file.name), 'utf8'),
      ) as { version: number };
      expect(peaks.version, `${label}: ${file.contentId}/${file.name}`).toBe(2);
    }
    const db = await readDb(dataDir, databaseEnv.DATABASE_URL);
    if (db.integrity !== null) expect(db.integrity, label).toBe('ok');
    expect(db.totalsConsistent, `${label}: store totals`).toBe(true);
    const present = new Set(files.map((f) => `${f.contentId}/${f.name}`));
    for (const row of db.cacheEntries)
      expect(present.has(`${row.content_id}/${row.name}`), `${label}: cache row without file`).toBe(true);
    for (const job of db.jobs.filter((j) => j.status === 'done')) {
      expect(present.has(`${job.content_id}/audio.wav`), `${label}: done job without file`).toBe(true);
    }
    return db;
  }

  /** Neither an attempt's working folder nor a staged file in .incoming is left. */
  async function expectNoTemporaryFiles(label: string) {
    // A job's record ends before its folder is removed: give the removal a moment.
    const settle = Date.now() + 5_000;
    while ((await workLeftovers(dataDir)).length > 0 && Date.now() < settle) await sleep(50);
    expect(await workLeftovers(dataDir), `${label}: DATA_DIR/work`).toEqual([]);
    expect(
      await readdir(path.join(artifactRoot, '.incoming')).catch(() => []),
      `${label}: ARTIFACT_ROOT/.incoming`,
    ).toEqual([]);
  }

  /** Every job ended: done with a content id, or failed with a code. Queued or running is not an end. */
  function expectEnded(label: string, jobs: JobBody[]) {
    for (const job of jobs) {
      expect(['done', 'failed'], `${label}: ${JSON.stringify(job)}`).toContain(job.status);
      if (job.status === 'failed')
        expect(job.error?.code ?? '(no code)', `${label}: ${JSON.stringify(job)}`).toMatch(/^[a-z_]+$/);
      else expect(job.result?.content_id, `${label}: ${JSON.stringify(job)}`).toMatch(/^[0-9a-f]{64}$/);
    }
  }

  it(
    `survives ${KILLS} kills: after each restart every job of the round ends with a code, the store and database are consistent, nothing is left over`,
    async () => {
      const env = {
        ...databaseEnv,
        FETCH_ALLOW_HOSTS: media.hostPort,
        WORKER_CONCURRENCY: '2',
        MAX_ATTEMPTS: '5',
        JOB_LEASE_S: '3',
      };
      let svc: ServiceHandle = await startService({ dataDir, env });
      const apiKey = svc.apiKey;
      const allIds: string[] = [];
      try {
        for (let round = 0; round < KILLS; round++) {
          const label = `round ${round + 1}`;
          const ids: string[] = [];
          for (let i = 0; i < rounds[round]!.length; i++)
            ids.push((await svc.submit(media.url(`/crash-${round}-${i}.wav`))).job_id);
          // A second submission of a queued URL follows its leader and must end with it.
          const last = rounds[round]!.length - 1;
          ids.push((await svc.submit(media.url(`/crash-${round}-${last}.wav`))).job_id);
          allIds.push(...ids);

          const deadline = Date.now() + 20_000;
          while (Date.now() < deadline) {
            const jobs = await Promise.all(ids.map((id) => svc.getJob(id)));
            if (jobs.some((j) => j.status === 'running' && (j.progress?.bytes_done ?? 0) > 0)) break;
            await sleep(50);
          }
          await sleep(DELAYS_MS[round % DELAYS_MS.length]);
          await svc.kill();
          await expectConsistent(`${label}, while dead`);

          svc = await startService({ dataDir, apiKey, env });
          expect(
            svc.logs.find((line) => line.msg === 'start-up recovery'),
            label,
          ).toBeDefined();
          // The check point: the restarted service has finished this round's work.
          const ended = await Promise.all(ids.map((id) => svc.waitForJob(id, ['done', 'failed', 'canceled'], 60_000)));
          expectEnded(label, ended);
          // With attempts to spare, every job got through, and the follower has its leader's content.
          expect(
            ended.map((j) => j.status),
            label,
          ).toEqual(ids.map(() => 'done'));
          expect(ended[ids.length - 1]!.result!.content_id, label).toBe(ended[last]!.result!.content_id);
          // The kill did land in the middle of work: a job was taken up again after the crash.
          expect(
            ended.filter((j) => (j.attempts as number) > 1).length,
            `${label}: a job retried`,
          ).toBeGreaterThanOrEqual(1);
          await expectNoTemporaryFiles(label);
          for (const id of ids) expect(await processesMatching(id), `${label}: tools of ${id}`).toEqual([]);
          const db = await expectConsistent(`${label}, after the restart`);
          // Earlier rounds' jobs are still ended; none went back to queued or running.
          const rows = db.jobs.filter((j) => allIds.includes(j.id));
          expect(rows.length, label).toBe(allIds.length);
          for (const row of rows) {
            expect(['done', 'failed'], `${label}: ${JSON.stringify(row)}`).toContain(row.status);
            if (row.status === 'failed')
              expect(row.error_code ?? '(no code)', `${label}: ${JSON.stringify(row)}`).toMatch(/^[a-z_]+$/);
          }
        }
      } finally {
        await svc.stop();
      }
      const db = await expectConsistent('after the last stop');
      expect(new Set(db.cacheEntries.map((r) => r.content_id)).size).toBe(rounds.flat().length);
    },
    HEAVY_TEST_TIMEOUT_MS,
  );
});
