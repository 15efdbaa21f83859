import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseWavHeader } from '../../src/tools/wav.js';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { ROOT, startService, type JobBody, type ServiceHandle } from '../support/service.js';

/**
 * Media identity end to end: the real service, the real yt-dlp (with a test-only extractor
 * plugin, test/support/ytdlp-plugins/yt_dlp_plugins/extractor/loopback_media.py, loaded through
 * PYTHONPATH) and a fake video site on 127.0.0.1 with two URL forms of one media:
 *   /watch?v=ID and /v/ID  →  API /api/media/ID  →  audio file /media/ID.<ext>
 * A second URL of a media already stored is recognised from yt-dlp's metadata step (extractor
 * key + id) and ends done with the stored content, without requesting the audio file.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const PLUGIN_DIR = path.join(ROOT, 'test/support/ytdlp-plugins');
const EXTRACTOR_KEY = 'LoopbackMedia';
const MEDIA_ID = 'lbVid_0001';
const OTHER_ID = 'lbVid_0002';

let media: MediaServer;
let svc: ServiceHandle;
const audioPath: Record<string, string> = {};
const apiPath = (id: string) => `/api/media/${id}`;

function serveSiteMedia(id: string, title: string, fixture: MediaFixture): void {
  const ext = path.extname(fixture.path).slice(1);
  audioPath[id] = `/media/${id}.${ext}`;
  media.serveFile(audioPath[id], fixture.path, { contentType: fixture.contentType });
  media.route(apiPath(id), (_req, res) => {
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ title, audio: audioPath[id], ext }));
  });
}

beforeAll(async () => {
  const [tone, otherTone] = await Promise.all([
    makeTone(FIXTURE_DIR, { seconds: 2, channels: 2, sampleRate: 48000, format: 'm4a' }),
    makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'flac' }),
  ]);
  media = await startMediaServer();
  serveSiteMedia(MEDIA_ID, 'A loopback video', tone);
  serveSiteMedia(OTHER_ID, 'Another loopback video', otherTone);
  svc = await startService({
    env: {
      FETCH_ALLOW_HOSTS: media.hostPort,
      // yt-dlp imports the yt_dlp_plugins namespace package from sys.path (yt_dlp/plugins.py).
      PYTHONPATH: PLUGIN_DIR,
      // No __pycache__ inside the repository.
      PYTHONDONTWRITEBYTECODE: '1',
    },
  });
});

afterAll(async () => {
  await svc?.stop();
  await media?.close();
});

function storedPath(cid: string): string {
  return path.join(svc.dataDir, 'artifacts', cid.slice(0, 2), cid, 'audio.wav');
}

async function fetchJob(url: string): Promise<JobBody> {
  const submitted = await svc.submit(url);
  return svc.waitForJob(submitted.job_id, ['done', 'failed', 'canceled']);
}

describe('another URL of a media already stored is recognised from the metadata step', () => {
  let formA: string;
  let formB: string;
  let first: JobBody;

  beforeAll(() => {
    formA = media.url(`/watch?v=${MEDIA_ID}`);
    formB = media.url(`/v/${MEDIA_ID}`);
  });

  it('form A downloads, records the media identity the plugin extractor reports, stores content = SHA-256', async () => {
    first = await fetchJob(formA);
    expect(first.error).toBeNull();
    expect(first.status).toBe('done');
    expect(first.born_done).toBe(false);
    // Proves the plugin was loaded in yt-dlp (the env reached it): the generic extractor would say 'Generic'.
    expect(first.media).toEqual({
      extractor: EXTRACTOR_KEY,
      id: MEDIA_ID,
      title: 'A loopback video',
      artist: null,
      album: null,
      track: null,
      duration: null,
      upload_date: null,
      webpage_url: media.url(`/watch?v=${MEDIA_ID}`),
    });
    expect(media.requestsFor(apiPath(MEDIA_ID)).length).toBeGreaterThanOrEqual(1);
    expect(media.requestsFor(audioPath[MEDIA_ID]!).length).toBeGreaterThanOrEqual(1);

    const cid = first.result!.content_id;
    expect(cid).toMatch(/^[0-9a-f]{64}$/);
    const bytes = await readFile(storedPath(cid));
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(cid);
    expect(parseWavHeader(bytes)).toMatchObject({ audioFormat: 1, sampleRate: 44100, bitsPerSample: 16, channels: 2 });
  });

  it('form B (another URL, same media) ends done with the same content, after the metadata step, without requesting the audio', async () => {
    expect(first?.status).toBe('done');
    const requestsBefore = media.requests.length;
    const apiBefore = media.requestsFor(apiPath(MEDIA_ID)).length;

    const second = await fetchJob(formB);
    const duringB = media.requests.slice(requestsBefore).map((r) => r.path);
    expect(second.error).toBeNull();
    expect(second.status).toBe('done');
    expect(second.url).toBe(formB);
    // Not an alias of its URL: a worker ran the downloader's metadata step...
    expect(second.born_done).toBe(false);
    expect(second.media).toEqual(first.media);
    expect(media.requestsFor(apiPath(MEDIA_ID)).length).toBeGreaterThan(apiBefore);
    // ...and no media was downloaded: only the site's API was asked.
    expect(duringB.filter((p) => p.startsWith('/media/'))).toEqual([]);
    expect(duringB.every((p) => p === apiPath(MEDIA_ID))).toBe(true);
    expect(second.result!.content_id).toBe(first.result!.content_id);
  });

  it('form B again is born done: its URL got an alias', async () => {
    const requestsBefore = media.requests.length;
    const again = await svc.submit(formB);
    expect(again.status).toBe('done');
    expect(again.born_done).toBe(true);
    expect(again.result!.content_id).toBe(first.result!.content_id);
    // What form B's own job knew of the media, kept on its URL's alias.
    expect(again.media).toEqual(first.media);
    expect(media.requests.length).toBe(requestsBefore);
  });

  it('a URL of a different media id on the same site downloads its own audio', async () => {
    const audioBefore = media.requestsFor(audioPath[OTHER_ID]!).length;
    const other = await fetchJob(media.url(`/watch?v=${OTHER_ID}`));
    expect(other.error).toBeNull();
    expect(other.status).toBe('done');
    expect(other.born_done).toBe(false);
    expect(other.media).toMatchObject({ extractor: EXTRACTOR_KEY, id: OTHER_ID, title: 'Another loopback video' });
    expect(media.requestsFor(audioPath[OTHER_ID]!).length).toBeGreaterThan(audioBefore);
    const cid = other.result!.content_id;
    expect(cid).not.toBe(first.result!.content_id);
    const bytes = await readFile(storedPath(cid));
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(cid);
  });
});
