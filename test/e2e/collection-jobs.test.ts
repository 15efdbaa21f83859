import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';

/**
 * Collections through the real service and database (each kind): the opt-in per submission and
 * per batch URL, the parent's record, its items' operation and its refusals. FETCH_ALLOW_HOSTS
 * lets the loopback media server in; nothing leaves this machine.
 */
interface CollectionBody extends JobBody {
  kind: string;
  parent_id: string | null;
  collection: {
    title: string | null;
    max_items: number;
    entries_found: number;
    children: number;
    done: number;
    failed: number;
    canceled: number;
    refused: number;
    truncated: boolean;
    listing_error: { code: string } | null;
  } | null;
}

let media: MediaServer;

beforeAll(async () => {
  media = await startMediaServer();
});
afterAll(async () => {
  await media?.close();
});

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
