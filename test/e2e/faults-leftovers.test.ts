import { existsSync } from 'node:fs';
import { mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeRealtimeFfmpeg } from '../support/fake-tools.js';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { processesMatching } from '../support/processes.js';
import {
  HEAVY_TEST_TIMEOUT_MS,
  ROOT,
  startService,
  type JobBody,
  type LogLine,
  type ServiceHandle,
} from '../support/service.js';
import { storedFiles } from '../support/store-inspect.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import { until } from '../support/until.js';
import { workLeftovers } from '../support/work-folder.js';

/**
 * Nothing of a lost attempt is left behind. The service is killed with SIGKILL at three moments
 * of a job, each reached on purpose and seen before the kill: in the middle of the download
 * (bytes arrived, yt-dlp's partial file in the attempt's folder), of the conversion (ffmpeg
 * converting at the audio's own pace, its WAV half written), and of the commit (the WAV staged in
 * ARTIFACT_ROOT/.incoming, the rename onto its address held back by a preloaded hook,
 * test/support/hold-staged-put.mjs). Restarted on the same DATA_DIR, the service has removed the
 * dead attempt's folder and staged file before it listens, and the job ends done on its second
 * attempt, leaving DATA_DIR/work and .incoming empty. On both databases.
 *
 * And a node that loses a job while it lives (its lease taken over by another node after it
 * stalled) stops the job and removes the attempt's folder. Cancel, failure and shutdown are
 * jobs-lifecycle, faults-tools/faults-storage and faults-shutdown's.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const HOLD_STAGED_PUT = path.join(ROOT, 'test/support/hold-staged-put.mjs');
/** 30 s of 44.1 kHz stereo PCM: the WAV a conversion at the audio's pace writes over 30 s. */
const LONG_S = 30;
const LONG_WAV_BYTES = LONG_S * 44100 * 2 * 2;

let media: MediaServer;
let short: MediaFixture;
let long: MediaFixture;
let realtimeFfmpeg: string;
let toolsDir: string;

beforeAll(async () => {
  [short, long] = await Promise.all([
    makeTone(FIXTURE_DIR, { seconds: 6, channels: 2, sampleRate: 44100, format: 'wav' }),
    makeTone(FIXTURE_DIR, { seconds: LONG_S, channels: 2, sampleRate: 44100, format: 'wav' }),
  ]);
  toolsDir = await mkdtemp(path.join(tmpdir(), 'sf-leftovers-tools-'));
  realtimeFfmpeg = await writeRealtimeFfmpeg(toolsDir);
  media = await startMediaServer();
});

afterAll(async () => {
  await media?.close();
  if (toolsDir) await rm(toolsDir, { recursive: true, force: true });
});

/** Live processes named `tool` (argv[0]'s base name) whose command line names `folder`. */
async function toolsIn(folder: string, tool: string): Promise<number[]> {
  const pids: number[] = [];
  for (const pid of await processesMatching(`${folder}/`)) {
    const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (path.basename(argv[0] ?? '') === tool) pids.push(pid);
  }
  return pids;
}

const running = (job: JobBody) => job.status === 'running';

/** Where a job of the first service is: its attempt's folder, its URL, the hook's marker file. */
interface At {
  svc: ServiceHandle;
  jobId: string;
  attempt: string;
  urlPath: string;
  marker: string;
}

interface Moment {
  /** The media at this path, as the moment needs it served. */
  serve(urlPath: string): void;
  /** What the first service needs besides the database and the allowed host. */
  env?(marker: string): Record<string, string>;
  /**
   * Waits until the job is at the moment and asserts that it is; returns the store's staged file
   * of the attempt, if there is one at that moment.
   */
  reached(at: At): Promise<string | undefined>;
}

const MOMENTS: Record<'download' | 'conversion' | 'commit', Moment> = {
  download: {
    // ~1 MB at 64 KiB/s: 16 s of transfer.
    serve: (urlPath) =>
      media.serveFile(urlPath, short.path, { contentType: 'audio/wav', throttleBytesPerSec: 64 * 1024 }),
    async reached({ svc, jobId, attempt, urlPath }) {
      const job = await until('bytes downloaded', async () => {
        const seen = await svc.getJob(jobId);
        return running(seen) && (seen.progress?.bytes_done ?? 0) > 0 ? seen : undefined;
      });
      const size = (await stat(short.path)).size;
      expect(job.progress!.bytes_done).toBeLessThan(size);
      // yt-dlp's partial file in the attempt's folder, the origin still sending, the downloader running.
      const partial = await until('a partial download', async () => {
        for (const name of await readdir(path.join(attempt, 'download')).catch(() => [])) {
          const bytes = (await stat(path.join(attempt, 'download', name)).catch(() => null))?.size ?? 0;
          if (bytes > 0) return bytes;
        }
        return undefined;
      });
      expect(partial).toBeLessThan(size);
      expect(
        media.requestsFor(urlPath).filter((request) => request.method === 'GET' && !request.completed).length,
      ).toBeGreaterThan(0);
      expect((await processesMatching(attempt)).length).toBeGreaterThan(0);
      expect(await readdir(path.join(svc.dataDir, 'artifacts', '.incoming')).catch(() => [])).toEqual([]);
      return undefined;
    },
  },
  conversion: {
    serve: (urlPath) => media.serveFile(urlPath, long.path, { contentType: 'audio/wav' }),
    env: () => ({ FFMPEG_PATH: realtimeFfmpeg }),
    async reached({ svc, jobId, attempt }) {
      // ffmpeg converting in the attempt's folder, its WAV begun and far from whole.
      const ffmpeg = await until('ffmpeg converting', async () => {
        const pids = await toolsIn(attempt, 'ffmpeg');
        return pids.length > 0 ? pids : undefined;
      });
      expect(ffmpeg).toHaveLength(1);
      const wavBytes = await until('the WAV begun', async () => {
        for (const name of (await readdir(attempt).catch(() => [] as string[])).filter((entry) =>
          entry.endsWith('.wav'),
        )) {
          const bytes = (await stat(path.join(attempt, name)).catch(() => null))?.size ?? 0;
          if (bytes > 44) return bytes;
        }
        return undefined;
      });
      expect(wavBytes).toBeLessThan(LONG_WAV_BYTES / 2);
      expect(await toolsIn(attempt, 'ffmpeg')).toEqual(ffmpeg);
      const job = await svc.getJob(jobId);
      expect(job.status).toBe('running');
      // The download is over: its bytes are all in.
      expect(job.progress).toMatchObject({ bytes_done: (await stat(long.path)).size });
      expect(await readdir(path.join(svc.dataDir, 'artifacts', '.incoming')).catch(() => [])).toEqual([]);
      return undefined;
    },
  },
  commit: {
    serve: (urlPath) => media.serveFile(urlPath, short.path, { contentType: 'audio/wav' }),
    env: (marker) => ({ NODE_OPTIONS: `--import=${HOLD_STAGED_PUT}`, SF_HOLD_STAGED_PUT: marker }),
    async reached({ svc, jobId, attempt, marker }) {
      const held = await until('the put held before its rename', async () => {
        const text = await readFile(marker, 'utf8').catch(() => '');
        return text === '' ? undefined : (JSON.parse(text) as { staged: string; target: string });
      });
      // The WAV is staged whole in .incoming; its address is still empty; the job is not done.
      const incoming = path.join(svc.dataDir, 'artifacts', '.incoming');
      expect(path.dirname(held.staged)).toBe(incoming);
      expect(await readdir(incoming)).toEqual([path.basename(held.staged)]);
      expect((await stat(held.staged)).size).toBeGreaterThan((await stat(short.path)).size / 2);
      expect(existsSync(held.target)).toBe(false);
      expect(existsSync(attempt)).toBe(true);
      expect((await svc.getJob(jobId)).status).toBe('running');
      return held.staged;
    },
  },
};

describe.each(BACKENDS)('kill -9 at a known moment of a job leaves nothing behind, on %s', (kind) => {
  const dataDirs: string[] = [];
  afterAll(async () => {
    for (const dir of dataDirs) await rm(dir, { recursive: true, force: true });
  });

  it.each(Object.keys(MOMENTS) as Array<keyof typeof MOMENTS>)(
    'killed mid-%s: after the restart no file of the dead attempt is left, and the job ends done',
    async (name) => {
      const moment = MOMENTS[name];
      const dataDir = await mkdtemp(path.join(tmpdir(), `sf-leftovers-${kind}-${name}-`));
      dataDirs.push(dataDir);
      const urlPath = `/${kind}/${name}.wav`;
      moment.serve(urlPath);
      const env = { ...(await serviceEnv(kind)), FETCH_ALLOW_HOSTS: media.hostPort, WORKER_CONCURRENCY: '1' };
      const marker = path.join(dataDir, 'held-put.json');
      const first = await startService({ dataDir, env: { ...env, ...moment.env?.(marker) } });
      const incoming = path.join(dataDir, 'artifacts', '.incoming');
      let second: ServiceHandle | undefined;
      try {
        const { job_id: jobId } = await first.submit(media.url(urlPath));
        const attempt = path.join(dataDir, 'work', `${jobId}.1`);
        const staged = await moment.reached({ svc: first, jobId, attempt, urlPath, marker });
        await first.kill();

        // What the dead process left: its attempt's folder, and the staged file of a put under way.
        expect(existsSync(attempt)).toBe(true);
        if (staged) expect(existsSync(staged)).toBe(true);
        // The retry runs at full speed: the origin unthrottled, the real ffmpeg, no hook.
        media.serveFile(urlPath, name === 'conversion' ? long.path : short.path, { contentType: 'audio/wav' });
        second = await startService({ dataDir, apiKey: first.apiKey, env });
        // Removed at start, before the service listens (and before the retry begins).
        const recovery = second.logs.find((line) => line.msg === 'start-up recovery');
        expect(recovery).toMatchObject({ work_folders_removed: 1, incoming_removed: staged ? 1 : 0 });
        expect(existsSync(attempt)).toBe(false);
        if (staged) expect(existsSync(staged)).toBe(false);
        // No tool of the dead attempt lives on (killed with the service, or at start: gone once reaped).
        await until(
          'no tool of the dead attempt',
          async () => ((await processesMatching(`${jobId}.1/`)).length === 0 ? true : undefined),
          5_000,
        );

        const done = await second.waitForJob(jobId, ['done', 'failed'], 60_000);
        expect(done, JSON.stringify(done)).toMatchObject({ status: 'done', attempts: 2 });
        const contentId = done.result!.content_id;
        // The commit that was cut short was storing these very bytes.
        if (staged)
          expect(
            path.basename(path.dirname((JSON.parse(await readFile(marker, 'utf8')) as { target: string }).target)),
          ).toBe(contentId);
        // Nothing of either attempt left: the retry's folder goes once its end is recorded.
        await until(
          'DATA_DIR/work empty',
          async () => ((await workLeftovers(dataDir)).length === 0 ? true : undefined),
          5_000,
        );
        expect(await readdir(incoming).catch(() => [])).toEqual([]);
        const files = await storedFiles(path.join(dataDir, 'artifacts'));
        // The WAV, whole (it hashes to its address), and its peaks beside it.
        expect(
          files
            .map((file) => ({ contentId: file.contentId, name: file.name }))
            .sort((a, b) => a.name.localeCompare(b.name)),
        ).toEqual([
          { contentId, name: 'audio.wav' },
          { contentId, name: 'peaks.json' },
        ]);
        expect(files.find((file) => file.name === 'audio.wav')!.sha256).toBe(contentId);
      } finally {
        await first.kill();
        await second?.stop();
      }
    },
    HEAVY_TEST_TIMEOUT_MS,
  );
});

describe('a node whose lease is taken over while it lives, on postgres', () => {
  it(
    'stops the job and removes its attempt folder; the node that took the job over finishes it',
    async () => {
      const sharedRoot = await mkdtemp(path.join(tmpdir(), 'sf-leftovers-shared-'));
      const { DATABASE_URL } = await serviceEnv('postgres');
      const env = {
        DATABASE_URL: DATABASE_URL!,
        ARTIFACT_ROOT: sharedRoot,
        FETCH_ALLOW_HOSTS: media.hostPort,
        WORKER_CONCURRENCY: '1',
        JOB_LEASE_S: '3',
      };
      media.serveFile('/takeover.wav', short.path, { contentType: 'audio/wav', throttleBytesPerSec: 64 * 1024 });
      const a = await startService({ env });
      let b: ServiceHandle | undefined;
      try {
        const { job_id: jobId } = await a.submit(media.url('/takeover.wav'));
        await until('A downloading', async () => {
          const job = await a.getJob(jobId);
          return running(job) && (job.progress?.bytes_done ?? 0) > 0 ? job : undefined;
        });
        const attemptA = path.join(a.dataDir, 'work', `${jobId}.1`);
        expect(existsSync(attemptA)).toBe(true);

        // A stalls (stopped, as a paused VM or a long GC would be) past its lease; B takes the job over.
        b = await startService({ env, apiKey: a.apiKey });
        process.kill(a.process.pid!, 'SIGSTOP');
        try {
          media.serveFile('/takeover.wav', short.path, { contentType: 'audio/wav' });
          await until('B running the job', async () => {
            const job = await b!.getJob(jobId);
            return running(job) && job.attempts === 2 ? job : undefined;
          });
          expect(existsSync(attemptA)).toBe(true);
        } finally {
          process.kill(a.process.pid!, 'SIGCONT');
        }

        // At its next heartbeat A finds the lease gone: it stops the job and removes the attempt's
        // folder, then logs that it gave the job up.
        const givenUp = await until('A giving the job up', () =>
          a.logs.find((line: LogLine) => line.job_id === jobId && /^job (aborted|failed)$/.test(line.msg)),
        );
        expect(givenUp).toMatchObject({ msg: 'job aborted', reason: 'lost' });
        expect(await workLeftovers(a.dataDir)).toEqual([]);
        const done = await b.waitForJob(jobId, ['done', 'failed'], 60_000);
        expect(done, JSON.stringify(done)).toMatchObject({ status: 'done', attempts: 2 });
        await until(
          'no tool of A left',
          async () => ((await processesMatching(`${jobId}.1/`)).length === 0 ? true : undefined),
          10_000,
        );
        await until(
          "B's work folder empty",
          async () => ((await workLeftovers(b!.dataDir)).length === 0 ? true : undefined),
          5_000,
        );
        expect(await readdir(path.join(sharedRoot, '.incoming')).catch(() => [])).toEqual([]);
      } finally {
        await b?.stop();
        await a.stop();
        await rm(sharedRoot, { recursive: true, force: true });
      }
    },
    HEAVY_TEST_TIMEOUT_MS,
  );
});
