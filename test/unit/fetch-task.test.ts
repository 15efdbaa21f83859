import { createHash } from 'node:crypto';
import fs, { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { eq } from 'drizzle-orm';
import { describe, expect, it, vi } from 'vitest';
import { resolveAlias, setAlias } from '../../src/store/aliases.js';
import { cacheEntryFor, recordCacheEntry, SOURCE_WAV_KIND } from '../../src/store/cache-entries.js';
import type { ContentStore } from '../../src/store/content-store.js';
import { evictToCap } from '../../src/store/eviction.js';
import { AUDIO_ARTIFACT_NAME, PEAKS_ARTIFACT_NAME } from '../../src/store/layout.js';
import { createDatabasePins } from '../../src/store/pins.js';
import { fakeTools, runJob, wav } from '../support/fetch-task-fakes.js';
import { createStoreFixture } from '../support/store-fixture.js';
import { BACKENDS } from '../support/test-database.js';

/**
 * The fetch task on a real database (each kind) and artifact root, with stand-ins for yt-dlp and
 * ffmpeg (../support/fetch-task-fakes.ts).
 */
const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

describe.each(BACKENDS)('fetch task on %s', (kind) => {
  it('a job done through the media alias records the use of that content, in the same transaction', async () => {
    const fx = await createStoreFixture(kind);
    const known = await fx.addArtifact(1000, 1000, 'https://media.example/watch?v=abc');
    await setAlias(fx.database, 'media', 'youtube:www.youtube.com:abc', known, 1000);
    const other = await fx.addArtifact(1000, 2000);
    const tools = fakeTools(
      { extractorKey: 'Youtube', id: 'abc', page: 'https://www.youtube.com/watch?v=abc' },
      wav(1),
    );

    const job = await runJob(fx, {
      url: 'https://youtu.be/abc',
      run: tools.run,
      now: 5000,
      hostsContacted: ['youtu.be', 'www.youtube.com'],
    });
    expect(job).toMatchObject({ status: 'done', contentId: known });
    expect(tools.calls).toEqual(['ytdlp']);
    expect(await resolveAlias(fx.database, 'url', 'https://youtu.be/abc')).toBe(known);
    expect((await cacheEntryFor(fx.database, known, AUDIO_ARTIFACT_NAME))?.lastUsedAt).toBe(5000);

    // The reused content is now the hottest: eviction takes the other one.
    await evictToCap({ database: fx.database, store: fx.store, capBytes: 1000, now: Date.now });
    expect(await fx.contentIdsOnDisk()).toEqual([known]);
    expect(fx.store.hasSync(other, AUDIO_ARTIFACT_NAME)).toBe(false);
  });

  it('an extractor that names a page on a host the downloader never fetched from neither reuses nor plants a media alias', async () => {
    const fx = await createStoreFixture(kind);
    // The real video's audio, stored from the real site.
    const real = await fx.addArtifact(1000, 1000, 'https://video.example/w/abc');
    await setAlias(fx.database, 'media', 'peertube:video.example:abc', real, 1000);
    // A host that says PeerTube and names the real site's page and id as its own.
    const tools = fakeTools({ extractorKey: 'PeerTube', id: 'abc', page: 'https://video.example/w/abc' }, wav(3));

    const job = await runJob(fx, {
      url: 'https://attacker.example/w/abc',
      run: tools.run,
      now: 5000,
      hostsContacted: ['attacker.example'],
    });
    expect(tools.calls).toEqual(['ytdlp', 'download', 'ffmpeg']);
    expect(job.status).toBe('done');
    expect(job.contentId).not.toBe(real);
    // The real media's alias still points at the real audio; nothing else was aliased as media.
    expect(await resolveAlias(fx.database, 'media', 'peertube:video.example:abc')).toBe(real);
    expect(
      await fx.database.db.select().from(fx.database.t.aliases).where(eq(fx.database.t.aliases.kind, 'media')),
    ).toHaveLength(1);
  });

  it('the same id on two hosts of a self-hosted platform are two media', async () => {
    const fx = await createStoreFixture(kind);
    const first = fakeTools({ extractorKey: 'PeerTube', id: 'abc', page: 'https://one.example/w/abc' }, wav(4));
    const one = await runJob(fx, {
      id: 'one',
      url: 'https://one.example/w/abc',
      run: first.run,
      now: 5000,
      hostsContacted: ['one.example'],
    });
    const second = fakeTools({ extractorKey: 'PeerTube', id: 'abc', page: 'https://two.example/w/abc' }, wav(5));
    const two = await runJob(fx, {
      id: 'two',
      url: 'https://two.example/w/abc',
      run: second.run,
      now: 6000,
      hostsContacted: ['two.example'],
    });
    expect(second.calls).toContain('download');
    expect(two.contentId).not.toBe(one.contentId);
    expect(await resolveAlias(fx.database, 'media', 'peertube:one.example:abc')).toBe(one.contentId);
    expect(await resolveAlias(fx.database, 'media', 'peertube:two.example:abc')).toBe(two.contentId);
  });

  it('content a job is storing is never evicted, not even an identical copy stored earlier from another URL', async () => {
    const fx = await createStoreFixture(kind);
    const bytes = wav(2);
    const cid = sha256(bytes);
    // The same bytes are already stored (from another URL), and are the coldest content.
    const earlier = path.join(fx.dir, 'earlier.wav');
    await writeFile(earlier, bytes);
    await (await fx.store.put(earlier, AUDIO_ARTIFACT_NAME)).release();
    await recordCacheEntry(
      fx.database,
      {
        contentId: cid,
        name: AUDIO_ARTIFACT_NAME,
        kind: SOURCE_WAV_KIND,
        bytes: bytes.length,
        contentType: 'audio/wav',
        sampleRate: 8000,
        channels: 1,
        durationS: 1,
      },
      1000,
    );
    // Eviction runs right after the job's put finds the stored copy, before the job records it.
    const evictedDuringStore: string[][] = [];
    const store: ContentStore = {
      ...fx.store,
      async put(source, name) {
        const stored = await fx.store.put(source, name);
        evictedDuringStore.push(
          (await evictToCap({ database: fx.database, store: fx.store, capBytes: 0, now: Date.now })).evictedContentIds,
        );
        return stored;
      },
    };
    const tools = fakeTools({ extractorKey: 'Generic', id: 'x' }, bytes);

    const job = await runJob(fx, { url: 'https://media.example/x.m4a', run: tools.run, store, now: 5000 });
    expect(evictedDuringStore).toEqual([[]]);
    expect(job).toMatchObject({ status: 'done', contentId: cid });
    expect(await cacheEntryFor(fx.database, cid, AUDIO_ARTIFACT_NAME)).toMatchObject({
      bytes: bytes.length,
      lastUsedAt: 5000,
    });
    expect(sha256(await readFile(fx.store.pathOf(cid, AUDIO_ARTIFACT_NAME)))).toBe(cid);
    // Recorded and released: from now on it is ordinary content, evicted when cold.
    expect(
      (await evictToCap({ database: fx.database, store: fx.store, capBytes: 0, now: Date.now })).evictedContentIds,
    ).toEqual([cid]);
  });

  /**
   * A store whose WAV, looked for in the record's transaction, meets a full volume: the commit
   * fails at its last write, once its WAV and peaks are in place.
   */
  const failingRecord = (store: ContentStore): ContentStore => ({
    ...store,
    hasSync(contentId, name) {
      if (name === AUDIO_ARTIFACT_NAME) throw Object.assign(new Error('no space left on device'), { code: 'ENOSPC' });
      return store.hasSync(contentId, name);
    },
  });

  it('a commit that fails takes back what it added, never content stored whole before it', async () => {
    const fx = await createStoreFixture(kind);
    const bytes = wav(7);
    const cid = sha256(bytes);
    // The same bytes, stored and recorded before (from another URL), without peaks.
    const earlier = path.join(fx.dir, 'earlier.wav');
    await writeFile(earlier, bytes);
    await (await fx.store.put(earlier, AUDIO_ARTIFACT_NAME)).release();
    await recordCacheEntry(
      fx.database,
      {
        contentId: cid,
        name: AUDIO_ARTIFACT_NAME,
        kind: SOURCE_WAV_KIND,
        bytes: bytes.length,
        contentType: 'audio/wav',
        sampleRate: 44_100,
        channels: 1,
        durationS: 0.1,
      },
      1000,
    );
    const tools = fakeTools({ extractorKey: 'Generic', id: 'x' }, bytes);

    const job = await runJob(fx, {
      url: 'https://media.example/x.m4a',
      run: tools.run,
      store: failingRecord(fx.store),
      now: 5000,
    });
    expect(job).toMatchObject({ status: 'failed', errorCode: 'storage_full' });
    // The WAV stored before stays, with its row; the peaks this commit added went again.
    expect(sha256(await readFile(fx.store.pathOf(cid, AUDIO_ARTIFACT_NAME)))).toBe(cid);
    expect(await cacheEntryFor(fx.database, cid, AUDIO_ARTIFACT_NAME)).toMatchObject({ lastUsedAt: 1000 });
    expect(fx.store.hasSync(cid, PEAKS_ARTIFACT_NAME)).toBe(false);
    expect(await fx.database.db.select().from(fx.database.t.storePins)).toEqual([]);

    // The control: the same job without the failure records the content, and its peaks.
    const again = await runJob(fx, { id: 'again', url: 'https://media.example/x.m4a', run: tools.run, now: 6000 });
    expect(again).toMatchObject({ status: 'done', contentId: cid });
    expect(fx.store.hasSync(cid, PEAKS_ARTIFACT_NAME)).toBe(true);
  });

  it('a commit that fails leaves the bytes another put holds, and the next one that fails takes them back', async () => {
    const fx = await createStoreFixture(kind);
    const bytes = wav(8);
    const cid = sha256(bytes);
    // Another job (on any node) storing the same bytes at this moment.
    const other = await createDatabasePins({
      database: fx.database,
      holder: () => 'other-node:put',
      now: Date.now,
    }).pin(cid);
    const tools = fakeTools({ extractorKey: 'Generic', id: 'y' }, bytes);

    const held = await runJob(fx, {
      url: 'https://media.example/y.m4a',
      run: tools.run,
      store: failingRecord(fx.store),
      now: 5000,
    });
    expect(held).toMatchObject({ status: 'failed', errorCode: 'storage_full' });
    // The other put may have found them there and be about to record them: they stay.
    expect(await fx.contentIdsOnDisk()).toEqual([cid, cid]);
    await other.unpin();

    // The control: nobody else holds them now, and the next commit of the same bytes that fails
    // (finding them there, unrecorded) takes them back: nothing is left outside the accounting.
    const alone = await runJob(fx, {
      id: 'alone',
      url: 'https://media.example/y2.m4a',
      run: tools.run,
      store: failingRecord(fx.store),
      now: 6000,
    });
    expect(alone).toMatchObject({ status: 'failed', errorCode: 'storage_full' });
    expect(await fx.contentIdsOnDisk()).toEqual([]);
    expect(await fx.database.db.select().from(fx.database.t.storePins)).toEqual([]);
  });

  it("a commit whose flush of the WAV's folder is refused, the WAV at its address, takes it back", async () => {
    const fx = await createStoreFixture(kind);
    const bytes = wav(10);
    const cid = sha256(bytes);
    const folder = path.dirname(fx.store.pathOf(cid, AUDIO_ARTIFACT_NAME));
    const open = fs.open.bind(fs);
    // The folder's flush, after the rename, fails as a disk's can.
    const refused = vi
      .spyOn(fs, 'open')
      .mockImplementation((file, ...rest) =>
        file === folder
          ? Promise.reject(Object.assign(new Error('EIO: i/o error'), { code: 'EIO' }))
          : open(file, ...rest),
      );
    const tools = fakeTools({ extractorKey: 'Generic', id: 'f' }, bytes);
    try {
      const job = await runJob(fx, { url: 'https://media.example/f.m4a', run: tools.run, now: 5000 });
      expect(job).toMatchObject({ status: 'failed', errorCode: 'internal_error' });
      expect(refused).toHaveBeenCalledWith(folder, 'r');
    } finally {
      refused.mockRestore();
    }
    expect(await fx.contentIdsOnDisk()).toEqual([]);
    expect(await fx.database.db.select().from(fx.database.t.storePins)).toEqual([]);

    // The control: flushed, the same job stores it.
    const again = await runJob(fx, { id: 'again', url: 'https://media.example/f.m4a', run: tools.run, now: 6000 });
    expect(again).toMatchObject({ status: 'done', contentId: cid });
    expect(await fx.contentIdsOnDisk()).toEqual([cid, cid]);
  });
});
