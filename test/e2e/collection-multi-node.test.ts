import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { METRIC_PREFIX } from '../../src/metrics.js';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { freshDatabaseUrl } from '../support/postgres.js';
import { HEAVY_TEST_TIMEOUT_MS, startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { until } from '../support/until.js';
import { rssFeed } from '../support/feeds.js';

/**
 * A collection on two worker nodes sharing one PostgreSQL database and one artifact root: the
 * parent is listed on one node, its children run on both, and the parent ends done, with exact
 * counts, however its children are spread: its end is written by the transaction that ends its
 * last child, whichever node that is.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const CHILDREN = 6;
/** 3 s mono WAVs (~265 KB) at 96 KB/s: each download takes ~3 s, so children overlap across nodes. */
const THROTTLE = 96 * 1024;
const apiKey = 'collection-multi-node-key-0123456789';
const sharedRoot = path.join(tmpdir(), `sf-collection-shared-${process.pid}-${Date.now()}`);

let media: MediaServer;
let tones: MediaFixture[];
let a: ServiceHandle;
let b: ServiceHandle;

beforeAll(async () => {
  media = await startMediaServer();
  const databaseUrl = await freshDatabaseUrl();
  tones = await Promise.all(
    Array.from({ length: CHILDREN }, (_, i) =>
      makeTone(FIXTURE_DIR, { seconds: 3 + i / 100, channels: 1, sampleRate: 44100, format: 'wav' }),
    ),
  );
  tones.forEach((tone, i) =>
    media.serveFile(`/c-${i}.wav`, tone.path, { contentType: 'audio/wav', throttleBytesPerSec: THROTTLE }),
  );
  const feed = rssFeed(
    'Spread',
    media.url('/'),
    tones.map((_, i) => ({ title: `C ${i}`, url: media.url(`/c-${i}.wav`) })),
  );
  media.route('/feed.xml', (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/rss+xml' });
    res.end(feed);
  });
  const startNode = () =>
    startService({
      apiKey,
      env: {
        DATABASE_URL: databaseUrl,
        ARTIFACT_ROOT: sharedRoot,
        WORKER_CONCURRENCY: '2',
        FETCH_ALLOW_HOSTS: media.hostPort,
        RATE_LIMIT_PER_MINUTE: '0',
      },
    });
  [a, b] = await Promise.all([startNode(), startNode()]);
}, HEAVY_TEST_TIMEOUT_MS);

afterAll(async () => {
  await Promise.all([a, b].map((svc) => svc?.stop().catch(() => undefined)));
  await media?.close();
  await rm(sharedRoot, { recursive: true, force: true });
});

/** A node's count of jobs that ended done with a download (jobs_finished_total). */
const doneCount = async (svc: ServiceHandle) => {
  const lines = (await (await svc.request('/metrics')).text()).split('\n');
  const line = lines.find((l) => l.startsWith(`${METRIC_PREFIX}jobs_finished_total{status="done",born_done="false"}`));
  return Number(line?.split(' ')[1] ?? 0);
};

/** The job ids a node's workers stored content for ('job done' lines). */
const doneOn = (svc: ServiceHandle) =>
  new Set(svc.logs.filter((line) => line.msg === 'job done').map((line) => line.job_id as string));

describe('a collection on two nodes', () => {
  it(
    'is listed on one node, its children run on both, and it ends done on whichever ends its last child',
    async () => {
      const res = await a.request('/sources', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ url: media.url('/feed.xml'), playlist: {} }),
      });
      expect(res.status).toBe(202);
      const parent = (await res.json()) as JobBody;
      // Read through the other node: the record is the database's.
      const done = await b.waitForJob(parent.job_id, ['done', 'failed', 'canceled'], 120_000);
      expect(done).toMatchObject({
        status: 'done',
        collection: { entries_found: CHILDREN, children: CHILDREN, done: CHILDREN, failed: 0, refused: 0 },
      });
      const page = (await (await a.request(`/jobs/${parent.job_id}/items`)).json()) as {
        items: Array<{ job: JobBody }>;
      };
      const children = page.items.map((item) => item.job.job_id);
      expect(page.items.map((item) => item.job.status)).toEqual(Array(CHILDREN).fill('done'));
      const [onA, onB] = [doneOn(a), doneOn(b)];
      // Every child ran on exactly one node, and each node ran some.
      expect(children.filter((id) => onA.has(id)).length).toBeGreaterThan(0);
      expect(children.filter((id) => onB.has(id)).length).toBeGreaterThan(0);
      expect(children.every((id) => onA.has(id) !== onB.has(id))).toBe(true);
      for (let i = 0; i < CHILDREN; i++) expect(media.downloadsOf(`/c-${i}.wav`)).toBe(1);
      // Each end counted by exactly one node, the parent's too (whichever node ended its last child
      // announced it): the children and the parent, on the two nodes together.
      const ended = await until('the parent counted among ended jobs', async () => {
        const sum = (await doneCount(a)) + (await doneCount(b));
        return sum >= CHILDREN + 1 ? sum : undefined;
      });
      expect(ended).toBe(CHILDREN + 1);
      expect((await doneCount(a)) + (await doneCount(b))).toBe(CHILDREN + 1);
    },
    HEAVY_TEST_TIMEOUT_MS,
  );
});
