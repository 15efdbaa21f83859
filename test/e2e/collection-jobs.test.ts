import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { METRIC_PREFIX } from '../../src/metrics.js';
import { startCountingListener, type CountingListener } from '../support/counting-listener.js';
import { openEventStream } from '../support/event-stream.js';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { processesMatching } from '../support/processes.js';
import { HEAVY_TEST_TIMEOUT_MS, startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import { until } from '../support/until.js';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver.js';
import { rssFeed } from '../support/feeds.js';
import type { components } from '../../src/client/openapi-types.js';

/**
 * Collections through the real service and database (each kind): the opt-in per submission and
 * per batch URL, the parent's record, its items' operation and its refusals. FETCH_ALLOW_HOSTS
 * lets the loopback media server in; nothing leaves this machine.
 */
interface CollectionBody extends JobBody {
  kind: string;
  parent_id: string | null;
  collection: components['schemas']['Collection'] | null;
}

interface ItemBody {
  index: number;
  title: string | null;
  url: string;
  outcome: 'accepted' | 'refused';
  job?: CollectionBody;
  problem?: { status: number; code: string };
}

const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
let media: MediaServer;
let trap: CountingListener;
let tone: MediaFixture;
let long: MediaFixture;

beforeAll(async () => {
  tone = await makeTone(FIXTURE_DIR, { seconds: 1, channels: 2, sampleRate: 44100, format: 'flac' });
  long = await makeTone(FIXTURE_DIR, { seconds: 6, channels: 2, sampleRate: 44100, format: 'wav' });
  media = await startMediaServer();
  trap = await startCountingListener('127.0.0.1');
});
afterAll(async () => {
  await media?.close();
  await trap?.close();
});

/** The feed at the media server's root link. */
const rss = (title: string, items: Parameters<typeof rssFeed>[2]) => rssFeed(title, media.url('/'), items);

function serveText(urlPath: string, body: string): void {
  media.route(urlPath, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/rss+xml' });
    res.end(body);
  });
}

describe.each(BACKENDS)('collections on %s', (kind) => {
  let svc: ServiceHandle;

  beforeAll(async () => {
    svc = await startService({
      env: { ...(await serviceEnv(kind)), FETCH_ALLOW_HOSTS: '127.0.0.1', PLAYLIST_MAX_ITEMS: '4' },
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  const post = async (urlPath: string, body: unknown) => {
    const res = await svc.request(urlPath, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const get = async (urlPath: string) => {
    const res = await svc.request(urlPath);
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };

  it('makes a parent job only when asked: kind collection, its max_items bounded by PLAYLIST_MAX_ITEMS', async () => {
    const feed = media.url(`/${kind}/feed.xml`);
    const asked = await post('/sources', { url: feed, playlist: { max_items: 10 } });
    expect(asked.status).toBe(202);
    const parent = asked.body as unknown as CollectionBody;
    expect(parent).toMatchObject({ kind: 'collection', parent_id: null, url: feed, born_done: false });
    expect(parent.collection).toMatchObject({ max_items: 4, entries_found: 0, children: 0, truncated: false });
    // The request's lower number wins.
    const lower = (await post('/sources', { url: feed, playlist: { max_items: 2 } })).body as unknown as CollectionBody;
    expect(lower.collection?.max_items).toBe(2);
    // Control: without playlist, the same URL is an ordinary job.
    const plain = (await svc.submit(feed)) as CollectionBody;
    expect(plain).toMatchObject({ kind: 'source', collection: null });
    expect((await get(`/jobs/${plain.job_id}/items`)).body).toMatchObject({ status: 404, code: 'job_not_collection' });
    // Each parent reaches an end and its items page answers.
    for (const id of [parent.job_id, lower.job_id]) {
      const ended = (await svc.waitForJob(id, ['done', 'failed', 'canceled'])) as CollectionBody;
      expect(ended.kind).toBe('collection');
      const items = await get(`/jobs/${id}/items?limit=100`);
      expect(items.status).toBe(200);
      expect((items.body.items as unknown[]).length).toBe(ended.collection?.entries_found);
    }
  });

  it('takes playlist per URL in a batch, and refuses what is malformed', async () => {
    const batch = await post('/sources/batch', {
      urls: [media.url(`/${kind}/one.m4a`), { url: media.url(`/${kind}/album.xml`), playlist: {} }, 'ftp://x/y'],
    });
    expect(batch.status).toBe(200);
    const results = batch.body.results as Array<{ outcome: string; job?: CollectionBody; problem?: { code: string } }>;
    expect(results.map((result) => result.job?.kind ?? result.problem?.code)).toEqual([
      'source',
      'collection',
      'url_scheme_not_allowed',
    ]);
    expect(results[1]!.job?.collection?.max_items).toBe(4);

    for (const playlist of [{ max_items: 0 }, { max_items: 1.5 }, { max: 3 }, true]) {
      const refused = await post('/sources', { url: media.url(`/${kind}/feed.xml`), playlist });
      expect(refused.status).toBe(400);
      expect(refused.body.code).toBe('validation_failed');
    }
    expect((await get('/jobs/no-such-job/items')).body).toMatchObject({ status: 404, code: 'job_not_found' });
    const some = (await post('/sources', { url: media.url(`/${kind}/feed.xml`), playlist: {} })).body;
    for (const query of ['limit=0', 'limit=101', 'after=-1', 'limit=x']) {
      const page = await get(`/jobs/${some.job_id as string}/items?${query}`);
      expect(page.status).toBe(400);
      expect(page.body.code).toBe('validation_failed');
    }
    // Control: in range, answered.
    expect((await get(`/jobs/${some.job_id as string}/items?after=0&limit=100`)).status).toBe(200);
  });
});

describe.each(BACKENDS)('a feed listed into child jobs on %s', (kind) => {
  let svc: ServiceHandle;
  let receiver: WebhookReceiver;

  beforeAll(async () => {
    receiver = await startWebhookReceiver();
    // Only the media server and the receiver are let in: the trap on 127.0.0.1 stays refused (address_loopback).
    svc = await startService({
      env: {
        ...(await serviceEnv(kind)),
        FETCH_ALLOW_HOSTS: `${media.hostPort},${receiver.hostPort}`,
        WEBHOOK_SECRET: 'collection-test-webhook-secret-0123456789',
      },
    });
  });
  afterAll(async () => {
    await svc?.stop();
    await receiver?.close();
  });

  const items = async (id: string): Promise<ItemBody[]> => {
    const res = await svc.request(`/jobs/${id}/items?limit=100`);
    expect(res.status).toBe(200);
    return ((await res.json()) as { items: ItemBody[] }).items;
  };
  /** jobs_finished_total as /metrics shows it now. */
  const finishedCounts = async () => {
    const lines = (await (await svc.request('/metrics')).text()).split('\n');
    const count = (labels: string) =>
      Number(
        lines.find((line) => line.startsWith(`${METRIC_PREFIX}jobs_finished_total{${labels}}`))?.split(' ')[1] ?? 0,
      );
    return {
      done: count('status="done",born_done="false"'),
      failed: count('status="failed",born_done="false"'),
      bornDone: count('status="done",born_done="true"'),
    };
  };
  const submitCollection = async (url: string, extra: Record<string, unknown> = {}) => {
    const res = await svc.request('/sources', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ url, playlist: {}, ...extra }),
    });
    expect(res.status).toBe(202);
    return (await res.json()) as CollectionBody;
  };

  it(
    'each entry becomes its item: born done, shared, failed with its 404, refused by the policy with no connection; one callback at the end',
    async () => {
      const before = await finishedCounts();
      const stored = media.url(`/${kind}/stored.flac`);
      media.serveFile(`/${kind}/stored.flac`, tone.path, { contentType: tone.contentType });
      // Large enough that the downloader's metadata step reads only its start: a whole GET is a download.
      media.serveFile(`/${kind}/a.wav`, long.path, { contentType: 'audio/wav', throttleBytesPerSec: 512 * 1024 });
      const storedJob = await svc.waitForJob((await svc.submit(stored)).job_id, ['done']);
      serveText(`/${kind}/nested.xml`, rss('Nested', [{ title: 'Inner', url: media.url(`/${kind}/inner.flac`) }]));
      const trapUrl = `http://${trap.authority}/x.mp3`;
      serveText(
        `/${kind}/feed.xml`,
        rss('My Feed', [
          { title: 'Stored', url: stored },
          { title: 'A', url: media.url(`/${kind}/a.wav`) },
          { title: 'A again', url: media.url(`/${kind}/a.wav`) },
          { title: 'Missing', url: media.url(`/${kind}/missing.flac`) },
          { title: 'Metadata', url: 'http://169.254.169.254/x' },
          { title: 'Passwords', url: 'file:///etc/passwd' },
          { title: 'Nested', url: media.url(`/${kind}/nested.xml`), link: true },
          { title: 'Trap', url: trapUrl },
        ]),
      );
      await trap.settle();
      const trapBefore = trap.connections;

      const parent = await submitCollection(media.url(`/${kind}/feed.xml`), { callback_url: receiver.url('/hook') });
      const stream = await openEventStream(`${svc.baseUrl}/jobs/${parent.job_id}/events`, {
        authorization: `Bearer ${svc.apiKey}`,
      });
      const done = (await svc.waitForJob(parent.job_id, ['done', 'failed', 'canceled'], 120_000)) as CollectionBody;
      expect(done.status).toBe('done');
      expect(done.collection).toEqual({
        title: 'My Feed',
        max_items: 500,
        entries_found: 8,
        children: 4,
        done: 2,
        failed: 2,
        canceled: 0,
        refused: 3,
        truncated: false,
        listing_error: null,
      });

      const listed = await items(parent.job_id);
      expect(listed.map((item) => [item.index, item.title, item.outcome])).toEqual([
        [1, 'Stored', 'accepted'],
        [2, 'A', 'accepted'],
        [3, 'A again', 'accepted'],
        [4, 'Missing', 'accepted'],
        [5, 'Metadata', 'refused'],
        [6, 'Passwords', 'refused'],
        [7, 'Nested', 'accepted'],
        [8, 'Trap', 'refused'],
      ]);
      const [born, a, again, missing, metadata, passwords, nested, trapped] = listed as [
        ItemBody,
        ItemBody,
        ItemBody,
        ItemBody,
        ItemBody,
        ItemBody,
        ItemBody,
        ItemBody,
      ];
      // Born done from the stored URL: its own job, the stored content.
      expect(born.job).toMatchObject({ status: 'done', born_done: true, parent_id: parent.job_id, kind: 'source' });
      expect(born.job?.result?.content_id).toBe(storedJob.result?.content_id);
      expect(born.job?.job_id).not.toBe(storedJob.job_id);
      // The duplicate shares the child, downloaded once.
      expect(a.job).toMatchObject({ status: 'done', born_done: false, parent_id: parent.job_id });
      expect(again.job?.job_id).toBe(a.job?.job_id);
      expect(media.downloadsOf(`/${kind}/a.wav`)).toBe(1);
      expect(missing.job).toMatchObject({ status: 'failed', error: { code: 'http_not_found', http_status: 404 } });
      // Refused as a URL submitted alone would be.
      expect(metadata.problem).toMatchObject({ status: 422, code: 'address_link_local' });
      expect(passwords.problem).toMatchObject({ status: 400, code: 'url_scheme_not_allowed' });
      expect(trapped.problem).toMatchObject({ status: 422, code: 'address_loopback' });
      // A feed listed as a <link> is not known to be a feed until fetched, so it is an ordinary
      // child: its fetch (no playlist) is given the feed's first entry by yt-dlp, which is not
      // served here, so it fails as that entry does (served, the child fails collection_nested:
      // collection-fairness.test.ts).
      expect(nested.job).toMatchObject({ status: 'failed', error: { code: 'http_not_found' } });
      await trap.settle();
      expect(trap.connections).toBe(trapBefore);

      // The stream sent the parent's record as its counts changed, and ended with it.
      await stream.ended;
      const counts = stream.records.map((record) => (record as CollectionBody).collection!);
      expect(new Set(counts.map((count) => JSON.stringify(count))).size).toBeGreaterThanOrEqual(2);
      for (const [i, count] of counts.entries())
        if (i > 0)
          expect(count.entries_found + count.done).toBeGreaterThanOrEqual(
            counts[i - 1]!.entries_found + counts[i - 1]!.done,
          );
      expect(stream.records.at(-1)).toMatchObject({ status: 'done', collection: done.collection });
      // One callback: the parent's, when it ended (children have none).
      const [callback] = await receiver.waitForRequests(1, 30_000);
      expect(JSON.parse(callback!.body)).toMatchObject({ job_id: parent.job_id, status: 'done' });
      await svc.waitForJob(a.job!.job_id, ['done']);
      expect(receiver.requests).toHaveLength(1);
      // The ended-jobs metrics count the parent, ended by its last child's transaction, once: done
      // are the stored URL's job, A and the parent; failed the 404 and the feed linked as an entry.
      const expected = { done: before.done + 3, failed: before.failed + 2, bornDone: before.bornDone + 1 };
      await until('the parent counted among ended jobs', async () => {
        const now = await finishedCounts();
        return now.done >= expected.done ? now : undefined;
      });
      expect(await finishedCounts()).toEqual(expected);
    },
    HEAVY_TEST_TIMEOUT_MS,
  );

  it(
    'cancel during the listing stops the listing run: no tool left, no child made',
    async () => {
      // A feed whose server sends its start and holds the rest: the listing waits on it.
      let release: () => void = () => {};
      const held = new Promise<void>((resolve) => (release = resolve));
      media.route(`/${kind}/slow.xml`, (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/rss+xml' });
        res.write('<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel><title>Slow</title>\n');
        void held.then(() => res.end('</channel></rss>\n'));
      });
      const parent = await submitCollection(media.url(`/${kind}/slow.xml`));
      await until('the listing reading the feed', () =>
        media.requestsFor(`/${kind}/slow.xml`).length > 0 ? true : undefined,
      );
      expect((await svc.getJob(parent.job_id)).status).toBe('expanding');
      expect(await processesMatching(parent.job_id)).not.toHaveLength(0);
      const res = await svc.request(`/jobs/${parent.job_id}/cancel`, { method: 'POST' });
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ status: 'canceled', collection: { entries_found: 0, children: 0 } });
      await until('no tool of the listing left', async () =>
        (await processesMatching(parent.job_id)).length === 0 ? true : undefined,
      );
      release();
      expect(await items(parent.job_id)).toEqual([]);
    },
    HEAVY_TEST_TIMEOUT_MS,
  );

  it(
    'cancel during the downloads cancels the running and queued children; the done one stays done',
    async () => {
      const stored = media.url(`/${kind}/stored2.flac`);
      media.serveFile(`/${kind}/stored2.flac`, tone.path, { contentType: tone.contentType });
      await svc.waitForJob((await svc.submit(stored)).job_id, ['done']);
      const slow = { contentType: 'audio/wav', throttleBytesPerSec: 64 * 1024 };
      media.serveFile(`/${kind}/slow1.wav`, long.path, slow);
      media.serveFile(`/${kind}/slow2.wav`, long.path, slow);
      media.serveFile(`/${kind}/slow3.wav`, long.path, slow);
      serveText(
        `/${kind}/downloads.xml`,
        rss('Downloads', [
          { title: 'Stored', url: stored },
          { title: 'Slow 1', url: media.url(`/${kind}/slow1.wav`) },
          { title: 'Slow 2', url: media.url(`/${kind}/slow2.wav`) },
          { title: 'Slow 3', url: media.url(`/${kind}/slow3.wav`) },
        ]),
      );
      const parent = await submitCollection(media.url(`/${kind}/downloads.xml`));
      const running = await until('a child downloading', async () => {
        const child = (await items(parent.job_id)).find((item) => item.job?.status === 'running' && item.job.progress);
        return child?.job;
      });
      const res = await svc.request(`/jobs/${parent.job_id}/cancel`, { method: 'POST' });
      expect(res.status).toBe(200);
      const canceled = (await res.json()) as CollectionBody;
      expect(canceled.status).toBe('canceled');
      const after = await items(parent.job_id);
      expect(after.map((item) => item.job?.status)).toEqual(['done', 'canceled', 'canceled', 'canceled']);
      expect(canceled.collection).toMatchObject({ entries_found: 4, children: 4, done: 1, canceled: 3 });
      await until('no tool of the running child left', async () =>
        (await processesMatching(running.job_id)).length === 0 ? true : undefined,
      );
      // Canceled children stay canceled: nothing stored for them.
      for (const item of after.slice(1)) expect((await svc.getJob(item.job!.job_id)).status).toBe('canceled');
    },
    HEAVY_TEST_TIMEOUT_MS,
  );
});
