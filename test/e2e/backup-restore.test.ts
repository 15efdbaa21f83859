import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DatabaseKind } from '../../src/db/database.js';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { HEAVY_TEST_TIMEOUT_MS, ROOT, startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { readDb } from '../support/store-inspect.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import { until } from '../support/until.js';
import { workLeftovers } from '../support/work-folder.js';

/**
 * docs/backups.md, run as it is written: its "Back up" block for the database in use, taken while
 * jobs run (two downloading, one queued behind them, three done), then the node is lost (kill -9)
 * and its "Restore" block puts the backup into a new DATA_DIR (and, on PostgreSQL, a new empty
 * database). A service started there serves every artifact that the backup's done jobs name, with
 * the same bytes at the same content ids, through the API and through signed URLs made before
 * the backup; the jobs that were running or queued at backup time end done; nothing is dropped
 * and nothing is left over.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const DOC = path.join(ROOT, 'docs/backups.md');
const run = promisify(execFile);

let media: MediaServer;
let tones: MediaFixture[];

beforeAll(async () => {
  // Distinct audio per URL (distinct content ids): three done before the backup, two running during it, one queued.
  tones = await Promise.all(
    [2, 2.5, 3, 6, 6.5, 3.5].map((seconds) =>
      makeTone(FIXTURE_DIR, { seconds, channels: 2, sampleRate: 44100, format: 'wav' }),
    ),
  );
  media = await startMediaServer();
});

afterAll(async () => {
  await media?.close();
});

/** The one sh block under `heading` in docs/backups.md, as written. */
async function docBlock(heading: string): Promise<string> {
  const doc = await readFile(DOC, 'utf8');
  const start = doc.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`docs/backups.md has no heading "${heading}"`);
  // The next heading (## or ###; a single # starts a comment inside the blocks).
  const next = doc.slice(start + 1).search(/\n#{2,3} /);
  const section = doc.slice(start, next < 0 ? undefined : start + 1 + next);
  const blocks = [...section.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((match) => match[1]!);
  if (blocks.length !== 1)
    throw new Error(`"${heading}" in docs/backups.md must hold one sh block; it holds ${blocks.length}`);
  return blocks[0]!;
}

/** Runs a block with sh -eu, from the service's folder, with only these variables (and PATH, HOME) set. */
async function runBlock(heading: string, env: Record<string, string>): Promise<void> {
  const script = await docBlock(heading);
  await run('sh', ['-eu', '-c', script], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', ...env },
  });
}

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

const TITLE: Record<DatabaseKind, string> = { sqlite: 'SQLite', postgres: 'PostgreSQL' };

describe.each(BACKENDS)('a backup taken while jobs run, restored onto a new node, on %s', (kind) => {
  let base: string;
  beforeAll(async () => {
    base = await mkdtemp(path.join(tmpdir(), `sf-backup-${kind}-`));
  });
  afterAll(async () => {
    await rm(base, { recursive: true, force: true });
  });

  it(
    "serves every artifact the backup's done jobs name, and the jobs running at backup time end done",
    async () => {
      const dataDir = path.join(base, 'node');
      const restoredDir = path.join(base, 'restored');
      const backup = path.join(base, 'backup');
      const urlOf = (i: number) => `/${kind}/backup-${i}.wav`;
      const [DONE, RUNNING, QUEUED] = [[0, 1, 2], [3, 4], [5]];
      for (const i of [...DONE, ...QUEUED]) media.serveFile(urlOf(i), tones[i]!.path, { contentType: 'audio/wav' });
      // ~1.1 MB at 64 KiB/s: some 17 s of download, far longer than the backup takes.
      for (const i of RUNNING)
        media.serveFile(urlOf(i), tones[i]!.path, { contentType: 'audio/wav', throttleBytesPerSec: 64 * 1024 });

      const databaseEnv = await serviceEnv(kind);
      const settings = { FETCH_ALLOW_HOSTS: media.hostPort, WORKER_CONCURRENCY: '2', JOB_LEASE_S: '5' };
      const svc = await startService({ dataDir, env: { ...databaseEnv, ...settings } });
      let restored: ServiceHandle | undefined;
      try {
        const ids: string[] = [];
        for (const i of DONE) ids[i] = (await svc.submit(media.url(urlOf(i)))).job_id;
        const done = await Promise.all(DONE.map((i) => svc.waitForJob(ids[i]!, ['done'], 60_000)));
        for (const i of [...RUNNING, ...QUEUED]) ids[i] = (await svc.submit(media.url(urlOf(i)))).job_id;
        const downloading = async () => {
          const jobs = await Promise.all(RUNNING.map((i) => svc.getJob(ids[i]!)));
          return jobs.every((job) => job.status === 'running' && (job.progress?.bytes_done ?? 0) > 0)
            ? jobs
            : undefined;
        };
        await until('both downloads under way', downloading);
        expect((await svc.getJob(ids[QUEUED[0]!]!)).status).toBe('queued');

        // The backup, as docs/backups.md says, with the jobs running before and after it: during it.
        const backupEnv: Record<string, string> =
          kind === 'sqlite'
            ? { DATA_DIR: dataDir, BACKUP: backup }
            : {
                DATABASE_URL: databaseEnv.DATABASE_URL!,
                ARTIFACT_ROOT: path.join(dataDir, 'artifacts'),
                BACKUP: backup,
              };
        await runBlock(`### Back up (${TITLE[kind]})`, backupEnv);
        expect(await downloading(), 'still downloading after the backup').toBeDefined();
        expect((await svc.getJob(ids[QUEUED[0]!]!)).status).toBe('queued');
        // The node is lost.
        await svc.kill();

        const restoredDatabase = await serviceEnv(kind);
        const restoreEnv: Record<string, string> =
          kind === 'sqlite'
            ? { DATA_DIR: restoredDir, BACKUP: backup }
            : {
                DATABASE_URL: restoredDatabase.DATABASE_URL!,
                ARTIFACT_ROOT: path.join(restoredDir, 'artifacts'),
                BACKUP: backup,
              };
        await runBlock(`### Restore (${TITLE[kind]})`, restoreEnv);

        // What the backup holds, read before any node starts on it.
        const held = await readDb(restoredDir, restoredDatabase.DATABASE_URL);
        const statusOf = (id: string) => held.jobs.find((job) => job.id === id)?.status;
        expect(DONE.map((i) => statusOf(ids[i]!))).toEqual(['done', 'done', 'done']);
        expect(RUNNING.map((i) => statusOf(ids[i]!))).toEqual(['running', 'running']);
        expect(statusOf(ids[QUEUED[0]!]!)).toBe('queued');
        const doneInBackup = held.jobs.filter((job) => job.status === 'done');
        expect(doneInBackup.map((job) => job.id).sort()).toEqual(DONE.map((i) => ids[i]!).sort());

        for (const i of RUNNING) media.serveFile(urlOf(i), tones[i]!.path, { contentType: 'audio/wav' });
        restored = await startService({
          dataDir: restoredDir,
          apiKey: svc.apiKey,
          env: { ...restoredDatabase, ...settings },
        });
        const recovery = restored.logs.find((line) => line.msg === 'start-up recovery');
        // Every row of the backup found its file; the copy held nothing else.
        expect(recovery).toMatchObject({ rows_dropped: 0, files_removed: 0, files_adopted: 0 });
        // On SQLite the lock proves the jobs' holder gone: taken back at once.
        if (kind === 'sqlite') expect(recovery).toMatchObject({ leases_expired: RUNNING.length });

        for (const job of doneInBackup) {
          const before = done.find((body) => body.job_id === job.id)!;
          const now = await restored.getJob(job.id);
          expect(now).toMatchObject({ status: 'done', result: { content_id: job.content_id } });
          expect(now.result!.content_id).toBe(before.result!.content_id);
          const viaApi = await restored.request(`/artifacts/${job.content_id}/audio.wav`);
          expect(viaApi.status, job.id).toBe(200);
          const bytes = Buffer.from(await viaApi.arrayBuffer());
          expect(sha256(bytes)).toBe(job.content_id);
          expect(
            bytes.equals(
              await readFile(
                path.join(dataDir, 'artifacts', job.content_id!.slice(0, 2), job.content_id!, 'audio.wav'),
              ),
            ),
          ).toBe(true);
          // A signed URL the lost node made: the restored signing secret still vouches for it.
          const viaSigned = await fetch(`${restored.baseUrl}${before.result!.artifacts[0]!.signed_url}`);
          expect(viaSigned.status, job.id).toBe(200);
          expect(Buffer.from(await viaSigned.arrayBuffer()).equals(bytes)).toBe(true);
        }

        // Running at backup time: taken back and run again. Queued: run. None stuck.
        const ended: JobBody[] = await Promise.all(
          [...RUNNING, ...QUEUED].map((i) => restored!.waitForJob(ids[i]!, ['done', 'failed', 'canceled'], 60_000)),
        );
        expect(ended.map((job) => [job.status, job.attempts])).toEqual([
          ['done', 2],
          ['done', 2],
          ['done', 1],
        ]);

        await until(
          'DATA_DIR/work empty',
          async () => ((await workLeftovers(restoredDir)).length === 0 ? true : undefined),
          5_000,
        );
        expect(
          existsSync(path.join(restoredDir, 'artifacts', '.incoming'))
            ? await readdir(path.join(restoredDir, 'artifacts', '.incoming'))
            : [],
        ).toEqual([]);
        const after = await readDb(restoredDir, restoredDatabase.DATABASE_URL);
        if (after.integrity !== null) expect(after.integrity).toBe('ok');
        expect(after.totalsConsistent).toBe(true);
        // Each job's content: its WAV and its peaks.
        expect(new Set(after.cacheEntries.map((row) => row.content_id)).size).toBe(
          DONE.length + RUNNING.length + QUEUED.length,
        );
        expect(after.cacheEntries.length).toBe(2 * (DONE.length + RUNNING.length + QUEUED.length));
      } finally {
        await svc.kill();
        await restored?.stop();
      }
    },
    HEAVY_TEST_TIMEOUT_MS,
  );
});
