import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { components } from '../../src/client/openapi-types.js';
import { openEventStream, type EventStreamHandle } from '../support/event-stream.js';
import { rssFeed } from '../support/feeds.js';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { HEAVY_TEST_TIMEOUT_MS, startService, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver.js';
import { documentedVerifyWebhook, type VerifyWebhook } from '../support/webhook-snippets.js';

/**
 * A collection's events and callbacks through the real service and database (each kind), a local
 * RSS feed and a real SSE client: the parent's record at each change of its counts, an `item`
 * event per entry as its child ends (born done, shared by two entries, failed), the parent's one
 * callback, and the children's own callbacks only when asked (`playlist.item_callbacks`).
 */
type Job = components['schemas']['Job'];
type Item = components['schemas']['CollectionItem'];

const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
let media: MediaServer;
let tone: MediaFixture;
let verifyWebhook: VerifyWebhook;

beforeAll(async () => {
  tone = await makeTone(FIXTURE_DIR, { seconds: 1, channels: 2, sampleRate: 44100, format: 'flac' });
  media = await startMediaServer();
  verifyWebhook = await documentedVerifyWebhook();
});
afterAll(async () => {
  await media?.close();
});

const itemsOf = (stream: EventStreamHandle) =>
  stream.events.filter((event) => event.event === 'item').map((event) => JSON.parse(event.data) as Item);
const childOf = (item: Item) => (item.outcome === 'accepted' ? item.job : undefined);
const ended = (job: Job) => job.collection!.done + job.collection!.failed + job.collection!.canceled;

describe.each(BACKENDS)("a collection's events and callbacks on %s", (kind) => {
  let svc: ServiceHandle;
  let receiver: WebhookReceiver;

  beforeAll(async () => {
    receiver = await startWebhookReceiver();
    svc = await startService({
      env: {
        ...(await serviceEnv(kind)),
        FETCH_ALLOW_HOSTS: `${media.hostPort},${receiver.hostPort}`,
        WEBHOOK_SECRET: 'collection-events-webhook-secret-0123456789',
      },
    });
  });
  afterAll(async () => {
    await svc?.stop();
    await receiver?.close();
  });

  const post = async (urlPath: string, body: unknown) => {
    const res = await svc.request(urlPath, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const authorization = () => ({ authorization: `Bearer ${svc.apiKey}` });

  /**
   * A feed of six entries (a stored URL, a URL twice, another, a 404, a refused one) submitted as
   * a collection with `extra`; its feed is held until the stream `streamPath(parent)` has sent its
   * first record, so that every child, the born-done one too, ends while the stream is open.
   */
  async function runFeed(name: string, extra: Record<string, unknown>, streamPath: (id: string) => string) {
    const dir = `/${kind}/${name}`;
    for (const file of ['stored', 'a', 'b'])
      media.serveFile(`${dir}/${file}.flac`, tone.path, { contentType: tone.contentType });
    const stored = await svc.waitForJob((await svc.submit(media.url(`${dir}/stored.flac`))).job_id, ['done']);
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const feed = rssFeed(name, media.url('/'), [
      { title: 'Stored', url: media.url(`${dir}/stored.flac`) },
      { title: 'A', url: media.url(`${dir}/a.flac`) },
      { title: 'A again', url: media.url(`${dir}/a.flac`) },
      { title: 'B', url: media.url(`${dir}/b.flac`) },
      { title: 'Missing', url: media.url(`${dir}/missing.flac`) },
      { title: 'Passwords', url: 'file:///etc/passwd' },
    ]);
    media.route(`${dir}/feed.xml`, (_req, res) => {
      void held.then(() => {
        res.writeHead(200, { 'content-type': 'application/rss+xml' });
        res.end(feed);
      });
    });
    const submitted = await post('/sources', { url: media.url(`${dir}/feed.xml`), playlist: {}, ...extra });
    expect(submitted.status).toBe(202);
    const parent = submitted.body as unknown as Job;
    const stream = await openEventStream(`${svc.baseUrl}${streamPath(parent.job_id)}`, authorization());
    expect(stream.response.status).toBe(200);
    await stream.waitFor(() => stream.records.length > 0, "the parent's first record");
    release();
    await stream.ended;
    const res = await svc.request(`/jobs/${parent.job_id}/items?limit=100`);
    const listed = ((await res.json()) as { items: Item[] }).items;
    return { parent, stream, listed, stored };
  }

  /** What every run shows on its stream: counts at each change, one item event per accepted entry, each after the counts that include it. */
  function expectStream(run: Awaited<ReturnType<typeof runFeed>>) {
    const { parent, stream, listed, stored } = run;
    const records = stream.records as unknown as Job[];
    const last = records.at(-1)!;
    expect(last).toMatchObject({ job_id: parent.job_id, status: 'done' });
    expect(last.collection).toMatchObject({ entries_found: 6, children: 4, done: 3, failed: 1, refused: 1 });
    // The parent's record at each change of its counts: listed one by one, children ending one by one.
    const counts = records.map((record) => JSON.stringify(record.collection));
    expect(new Set(counts).size).toBeGreaterThanOrEqual(4);
    expect(records.map((record) => record.collection!.entries_found)).toEqual(
      records.map((record) => record.collection!.entries_found).sort((x, y) => x - y),
    );

    // One item event per accepted entry, none for the refused one.
    const items = itemsOf(stream);
    expect(items.map((item) => item.index).sort((x, y) => x - y)).toEqual([1, 2, 3, 4, 5]);
    const byIndex = new Map(items.map((item) => [item.index, item]));
    expect(childOf(byIndex.get(1)!)).toMatchObject({ status: 'done', born_done: true, parent_id: parent.job_id });
    expect(childOf(byIndex.get(1)!)?.result?.content_id).toBe(stored.result?.content_id);
    // The shared child: one job, an item event for each of its two entries.
    expect(childOf(byIndex.get(3)!)?.job_id).toBe(childOf(byIndex.get(2)!)?.job_id);
    expect(childOf(byIndex.get(2)!)).toMatchObject({ status: 'done', born_done: false });
    expect(childOf(byIndex.get(4)!)).toMatchObject({ status: 'done' });
    expect(childOf(byIndex.get(5)!)).toMatchObject({ status: 'failed', error: { code: 'http_not_found' } });
    // Each is the item as listJobItems shows it.
    for (const item of items) {
      const listedItem = listed.find((entry) => entry.index === item.index)!;
      expect([item.index, item.title, item.url, item.outcome]).toEqual([
        listedItem.index,
        listedItem.title,
        listedItem.url,
        listedItem.outcome,
      ]);
      expect(childOf(item)).toMatchObject({
        job_id: childOf(listedItem)!.job_id,
        status: childOf(listedItem)!.status,
        result: childOf(listedItem)!.result && { content_id: childOf(listedItem)!.result!.content_id },
        error: childOf(listedItem)!.error,
      });
    }
    // Each item event follows the parent's record that counts its child ended, and carries its id.
    const seen = new Set<string>();
    let latest: { id: string | undefined; record: Job } | undefined;
    for (const event of stream.events) {
      if (event.event === 'job') latest = { id: event.id, record: JSON.parse(event.data) as Job };
      if (event.event !== 'item') continue;
      seen.add(childOf(JSON.parse(event.data) as Item)!.job_id);
      expect(event.id).toBe(latest!.id);
      expect(ended(latest!.record)).toBeGreaterThanOrEqual(seen.size);
    }
    return items;
  }

  it('refuses item_callbacks without a callback_url: 400 callback_url_required (alone and as a batch item)', async () => {
    const url = media.url(`/${kind}/refused/feed.xml`);
    const alone = await post('/sources', { url, playlist: { item_callbacks: true } });
    expect(alone.status).toBe(400);
    expect(alone.body).toMatchObject({ status: 400, code: 'callback_url_required' });
    const batch = await post('/sources/batch', { urls: [{ url, playlist: { item_callbacks: true } }] });
    expect(batch.status).toBe(200);
    expect(batch.body.results).toMatchObject([{ outcome: 'refused', problem: { code: 'callback_url_required' } }]);
    // The control: with its callback_url, accepted.
    const asked = await post('/sources', {
      url,
      playlist: { item_callbacks: true },
      callback_url: receiver.url('/refused'),
    });
    expect(asked.status).toBe(202);
    await svc.request(`/jobs/${(asked.body as unknown as Job).job_id}/cancel`, { method: 'POST' });
  });

  it(
    'item events for every child as it ends; one callback for the parent, and one per child only when asked (the control: asked, they come; not asked, none, on the getEvents stream too)',
    async () => {
      const secretsRes = await svc.request('/webhook-secret');
      const [secret] = ((await secretsRes.json()) as { secrets: string[] }).secrets;

      // Asked: each child gets its own callback, to the same URL, signed as any.
      const asked = await runFeed(
        'asked',
        { callback_url: receiver.url('/asked'), playlist: { item_callbacks: true } },
        (id) => `/jobs/${id}/events`,
      );
      const askedItems = expectStream(asked);
      const children = [...new Set(askedItems.map((item) => childOf(item)!.job_id))];
      expect(children).toHaveLength(4);
      const toAsked = (request: { path: string }) => request.path === '/asked';
      const calls = await receiver.waitForRequests(5, 60_000, toAsked);
      const jobsCalled = calls.map((call) => (JSON.parse(call.body) as Job).job_id);
      expect(jobsCalled.filter((id) => id === asked.parent.job_id)).toHaveLength(1);
      expect(jobsCalled.filter((id) => id !== asked.parent.job_id).sort()).toEqual([...children].sort());
      for (const call of calls) expect(verifyWebhook(secret!, call.headers, call.body)).toBe(true);
      const parentCall = calls.find((call) => (JSON.parse(call.body) as Job).job_id === asked.parent.job_id)!;
      expect(JSON.parse(parentCall.body)).toMatchObject({ status: 'done', collection: { children: 4, done: 3 } });
      for (const call of calls.filter((c) => c !== parentCall))
        expect(JSON.parse(call.body)).toMatchObject({ parent_id: asked.parent.job_id, kind: 'source' });
      // Each child's record shows its own delivery, delivered.
      for (const id of children)
        expect((await svc.getJob(id)) as unknown as Job).toMatchObject({ callback: { status: 'delivered' } });

      // Not asked: the parent's callback only; the stream is getEvents'.
      const plain = await runFeed('plain', { callback_url: receiver.url('/plain') }, (id) => `/events?jobs=${id}`);
      const plainItems = expectStream(plain);
      const toPlain = (request: { path: string }) => request.path === '/plain';
      const [plainCall] = await receiver.waitForRequests(1, 60_000, toPlain);
      expect(JSON.parse(plainCall!.body)).toMatchObject({ job_id: plain.parent.job_id, status: 'done' });
      // The children have no delivery at all (a delivery due would show on their records), and none was received.
      for (const item of plainItems)
        expect((await svc.getJob(childOf(item)!.job_id)) as unknown as Job).toMatchObject({ callback: null });
      expect((await svc.getJob(plain.parent.job_id)) as unknown as Job).toMatchObject({
        callback: { status: 'delivered' },
      });
      expect(receiver.requests.filter(toPlain)).toHaveLength(1);
      expect(receiver.requests.filter(toAsked)).toHaveLength(5);
    },
    HEAVY_TEST_TIMEOUT_MS,
  );
});
