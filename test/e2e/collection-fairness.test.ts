import { stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openEventStream, type StreamedRecord } from '../support/event-stream.js';
import { rssFeed } from '../support/feeds.js';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { HEAVY_TEST_TIMEOUT_MS, startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';

/**
 * A collection's children within the node's shares, by the real service (real yt-dlp and ffmpeg)
 * on each database, against a loopback media server: key A's 500-entry feed does not keep key B's
 * one job from the next free worker (the control: a job of key A's own queued at the same moment
 * waits behind the feed's children); and an entry that turns out to be a feed itself only when
 * its child fetches it fails `collection_nested`.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const KEY_A = 'playlist-key-a-0123456789abcdef';
const KEY_B = 'single-key-b-0123456789abcdef';
const ENTRIES = 500;

let media: MediaServer;
let tone: MediaFixture;
let throttleBytesPerSec: number;

beforeAll(async () => {
  media = await startMediaServer();
  tone = await makeTone(FIXTURE_DIR, { seconds: 3, channels: 1, sampleRate: 44100, format: 'flac' });
  // Each download takes about a second: one job's time is about that, plus its conversion.
  throttleBytesPerSec = Math.ceil((await stat(tone.path)).size / 1);
});
afterAll(async () => {
  await media?.close();
});

interface ItemBody {
  index: number;
  outcome: 'accepted' | 'refused';
  job?: JobBody;
}

const ms = (at: unknown) => Date.parse(at as string);

describe.each(BACKENDS)('collections and the fair share on %s', (kind) => {
  let svc: ServiceHandle;

  beforeAll(async () => {
    svc = await startService({
      apiKey: KEY_A,
      env: {
        ...(await serviceEnv(kind)),
        API_KEYS: `${KEY_A},${KEY_B}`,
        FETCH_ALLOW_HOSTS: media.hostPort,
        WORKER_CONCURRENCY: '2',
      },
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  const auth = (key: string) => ({ authorization: `Bearer ${key}` });
  const submitAs = async (key: string, body: Record<string, unknown>): Promise<JobBody> => {
    const res = await svc.request('/sources', {
      method: 'POST',
      headers: { ...auth(key), 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(202);
    return (await res.json()) as JobBody;
  };
  const items = async (parentId: string): Promise<ItemBody[]> => {
    const all: ItemBody[] = [];
    for (let after = 0; ;) {
      const res = await svc.request(`/jobs/${parentId}/items?after=${after}&limit=100`, { headers: auth(KEY_A) });
      expect(res.status).toBe(200);
      const page = (await res.json()) as { items: ItemBody[]; next_after: number | null };
      all.push(...page.items);
      if (page.next_after === null) return all;
      after = page.next_after;
    }
  };
  const serveFeed = (urlPath: string, body: string) =>
    media.route(urlPath, (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/rss+xml' });
      res.end(body);
    });

  it(
    `a ${ENTRIES}-entry feed of key A does not delay key B's one job by more than one job's time`,
    async () => {
      const entries = Array.from({ length: ENTRIES }, (_, i) => {
        const urlPath = `/${kind}/fair/e-${i + 1}.flac`;
        media.serveFile(urlPath, tone.path, { contentType: 'audio/flac', throttleBytesPerSec });
        return { title: `Entry ${i + 1}`, url: media.url(urlPath) };
      });
      for (const name of ['b', 'a2'])
        media.serveFile(`/${kind}/fair/${name}.flac`, tone.path, { contentType: 'audio/flac', throttleBytesPerSec });
      serveFeed(`/${kind}/fair/feed.xml`, rssFeed('Five hundred', media.url('/'), entries));

      const parent = await submitAs(KEY_A, {
        url: media.url(`/${kind}/fair/feed.xml`),
        playlist: { max_items: ENTRIES },
      });
      const parentStream = await openEventStream(`${svc.baseUrl}/jobs/${parent.job_id}/events`, auth(KEY_A));
      // Listed: every entry is a child, queued (or already run) under key A.
      await parentStream.waitFor(
        () => parentStream.records.some((record) => record.status === 'running'),
        'the feed listed',
        120_000,
      );
      const listed = await items(parent.job_id);
      expect(listed).toHaveLength(ENTRIES);
      expect(listed.every((item) => item.outcome === 'accepted')).toBe(true);
      const queued = listed.filter((item) => item.job!.status === 'queued').map((item) => item.job!.job_id);
      expect(queued.length).toBeGreaterThan(ENTRIES - 50);

      // Key B's one job, and (the control) one of key A's own, queued at the same moment.
      const single = await submitAs(KEY_B, { url: media.url(`/${kind}/fair/b.flac`) });
      const own = await submitAs(KEY_A, { url: media.url(`/${kind}/fair/a2.flac`) });
      // The feed's children next in line: each is older than both.
      const next = queued.slice(0, 10);
      const stream = await openEventStream(
        `${svc.baseUrl}/events?jobs=${[single.job_id, own.job_id, ...next].join(',')}`,
        auth(KEY_A),
      );
      const latest = (id: string): StreamedRecord | undefined => stream.records.findLast((r) => r.job_id === id);
      const startedAt = (id: string) => {
        const at = latest(id)?.started_at;
        return typeof at === 'string' ? ms(at) : undefined;
      };
      const ended = (id: string) => ['done', 'failed', 'canceled'].includes(latest(id)?.status ?? '');
      const childrenStartedAfter = (at: number) => next.filter((id) => (startedAt(id) ?? -1) > at);
      await stream.waitFor(
        () =>
          latest(single.job_id)?.status === 'done' &&
          childrenStartedAfter(ms(own.created_at)).length >= 3 &&
          next.some(ended),
        "B's job done, and three of the feed's children started after key A's own job was queued",
        120_000,
      );

      const singleQueued = ms(single.created_at);
      const singleStarted = startedAt(single.job_id)!;
      // One job's time: the longest of the feed's children seen from start to end.
      const oneJob = Math.max(...next.filter(ended).map((id) => ms(latest(id)!.finished_at) - startedAt(id)!));
      const waited = singleStarted - singleQueued;
      console.log(
        `[${kind}] B's job waited ${waited} ms behind ${queued.length} queued children; one child took up to ${oneJob} ms`,
      );
      // Taken at the first free worker: no child of the feed started between its submission and its
      // start (one may have been claimed in the instant it was being written).
      expect(
        next.filter((id) => startedAt(id)! > singleQueued && startedAt(id)! < singleStarted).length,
      ).toBeLessThanOrEqual(1);
      // Within one job's time, with half a second for the claim after that job's end.
      expect(waited).toBeLessThanOrEqual(oneJob + 500);
      // The control: the feed's key's own job, queued with B's, still waits behind the feed's
      // older children; by age alone B's job would wait there too.
      expect(latest(own.job_id)?.status).toBe('queued');

      // Cancel the rest: the parent takes its queued and running children with it.
      for (const [id, key] of [
        [parent.job_id, KEY_A],
        [own.job_id, KEY_A],
      ] as const) {
        const res = await svc.request(`/jobs/${id}/cancel`, { method: 'POST', headers: auth(key) });
        expect(res.status).toBe(200);
      }
      await parentStream.ended;
      expect(parentStream.records.at(-1)?.status).toBe('canceled');
      await stream.close();
    },
    HEAVY_TEST_TIMEOUT_MS,
  );

  it(
    'an entry that is a feed only its child finds out fails collection_nested, counted among the failed children',
    async () => {
      media.serveFile(`/${kind}/nested/inner.flac`, tone.path, { contentType: 'audio/flac' });
      media.serveFile(`/${kind}/nested/plain.flac`, tone.path, { contentType: 'audio/flac' });
      const innerFeed = media.url(`/${kind}/nested/inner.xml`);
      serveFeed(
        `/${kind}/nested/inner.xml`,
        rssFeed('Inner', media.url('/'), [{ title: 'Inner item', url: media.url(`/${kind}/nested/inner.flac`) }]),
      );
      // The inner feed as an enclosure: the listing sees a URL like any other.
      serveFeed(
        `/${kind}/nested/outer.xml`,
        rssFeed('Outer', media.url('/'), [
          { title: 'A feed', url: innerFeed },
          { title: 'Plain', url: media.url(`/${kind}/nested/plain.flac`) },
        ]),
      );
      const parent = await submitAs(KEY_A, { url: media.url(`/${kind}/nested/outer.xml`), playlist: {} });
      const done = await svc.waitForJob(parent.job_id, ['done', 'failed', 'canceled'], 120_000);
      expect(done.status).toBe('done');
      expect(done.collection).toMatchObject({ entries_found: 2, children: 2, done: 1, failed: 1, refused: 0 });
      const [nested, plain] = await items(parent.job_id);
      expect(nested!.outcome).toBe('accepted');
      expect(nested!.job).toMatchObject({
        status: 'failed',
        error: {
          code: 'collection_nested',
          message:
            'This entry of a collection is itself a playlist or feed; collections are not expanded inside collections.',
        },
      });
      expect(plain!.job?.status).toBe('done');
      // Control: the same feed submitted alone, not as an entry, fails as any playlist without `playlist`.
      const alone = await submitAs(KEY_A, { url: innerFeed });
      const failed = await svc.waitForJob(alone.job_id, ['done', 'failed'], 60_000);
      expect(failed.error?.code).toBe('playlist_not_supported');
    },
    HEAVY_TEST_TIMEOUT_MS,
  );
});

/** The rate limiter is each node's memory, the same whatever the database: one run, on SQLite. */
describe("a collection's entries and its key's rate limit", () => {
  const BURST = 20;
  const ENTRIES_RL = 30;
  let svc: ServiceHandle;

  beforeAll(async () => {
    svc = await startService({
      apiKey: KEY_A,
      env: {
        ...(await serviceEnv('sqlite')),
        API_KEYS: `${KEY_A},${KEY_B}`,
        FETCH_ALLOW_HOSTS: media.hostPort,
        // One token a minute after the burst: an entry that finds the bucket spent would wait
        // longer than the listing's time limit, so it is refused at once.
        RATE_LIMIT_PER_MINUTE: '1',
        RATE_LIMIT_BURST: String(BURST),
        PLAYLIST_LISTING_TIMEOUT_S: '20',
      },
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it("takes a token of the key's bucket for each entry, leaves the key's own reserve, and refuses the rest as rate_limited items", async () => {
    // Entries that fail fast (404): the children end soon after they are listed.
    const entries = Array.from({ length: ENTRIES_RL }, (_, i) => ({
      title: `Missing ${i + 1}`,
      url: media.url(`/rl/missing-${i + 1}.flac`),
    }));
    media.route('/rl/feed.xml', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/rss+xml' });
      res.end(rssFeed('Rate', media.url('/'), entries));
    });
    const auth = { authorization: `Bearer ${KEY_A}` };
    // Two requests of the key's: the submission and its event stream.
    const submitted = await svc.request('/sources', {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ url: media.url('/rl/feed.xml'), playlist: {} }),
    });
    expect(submitted.status).toBe(202);
    const parent = (await submitted.json()) as JobBody;
    const stream = await openEventStream(`${svc.baseUrl}/jobs/${parent.job_id}/events`, auth);
    await stream.ended;
    const done = stream.records.at(-1)!;
    expect(done.status).toBe('done');

    // The key's third request: the tenth of the bucket the entries left (two tokens) serves it.
    const page = await svc.request(`/jobs/${parent.job_id}/items?limit=100`, { headers: auth });
    expect(page.status).toBe(200);
    const listed = ((await page.json()) as { items: Array<ItemBody & { problem?: { code: string; status: number } }> })
      .items;
    expect(listed).toHaveLength(ENTRIES_RL);
    const accepted = listed.filter((item) => item.outcome === 'accepted');
    const refused = listed.filter((item) => item.outcome === 'refused');
    // 20 tokens, 2 kept back, 1 or 2 taken by the submission and the stream before the entries.
    expect(accepted.length).toBeGreaterThanOrEqual(BURST - 2 - 2);
    expect(accepted.length).toBeLessThanOrEqual(BURST - 2 - 1);
    // In order: the first entries took the tokens, every later one was refused as its request would be.
    expect(listed.slice(0, accepted.length).every((item) => item.outcome === 'accepted')).toBe(true);
    for (const item of refused) expect(item.problem).toMatchObject({ status: 429, code: 'rate_limited' });
    expect(done.collection).toMatchObject({ entries_found: ENTRIES_RL, refused: refused.length });

    // What is left is the reserve less the key's requests since: the entries took every other
    // token (20: the submission, the stream, the items read and the entries, two kept back).
    let served = 0;
    while (served < 5 && (await svc.request(`/jobs/${parent.job_id}`, { headers: auth })).status === 200) served++;
    expect(served).toBe(BURST - 3 - accepted.length);
    // Another key's bucket is untouched.
    expect(
      (await svc.request(`/jobs/${parent.job_id}`, { headers: { authorization: `Bearer ${KEY_B}` } })).status,
    ).toBe(200);
  });
});
