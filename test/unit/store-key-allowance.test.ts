import { randomBytes } from 'node:crypto';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import postgres from 'postgres';
import { describe, expect, it, onTestFinished } from 'vitest';
import { commitContent } from '../../src/jobs/fetch/commit.js';
import type { FetchContext } from '../../src/jobs/fetch/step.js';
import { jobKeyIdentity } from '../../src/jobs/key-identity.js';
import { claimNextJob, enqueueJob, getJobRow, insertJob } from '../../src/jobs/queue.js';
import { createLogger } from '../../src/logger.js';
import type { WavHeader } from '../../src/tools/wav.js';
import { cacheEntryFor } from '../../src/store/cache-entries.js';
import { readStoreTotals } from '../../src/store/eviction.js';
import {
  KEY_ALLOWANCE_WINDOW_MS,
  lockKeyStorage,
  storedBytesSince,
  type KeyAllowance,
} from '../../src/store/key-allowance.js';
import { AUDIO_ARTIFACT_NAME } from '../../src/store/layout.js';
import { createStoreFixture, type StoreFixture } from '../support/store-fixture.js';
import { BACKENDS } from '../support/test-database.js';

/**
 * The store's allowance per API key, at the commit of real jobs on a real database (each kind) and
 * artifact root: new content counts against the key that submitted it over a rolling window; a
 * job that would pass it records nothing and leaves nothing stored; other keys and content
 * already stored are not affected.
 */
const KEY_A = jobKeyIdentity('key-a-0123456789abcdef');
const KEY_B = jobKeyIdentity('key-b-0123456789abcdef');
const ALLOWANCE: KeyAllowance = { bytes: 2500, windowMs: KEY_ALLOWANCE_WINDOW_MS };
/** What the commit reads of a WAV's header: the cache row's fields. */
const HEADER = {
  audioFormat: 1,
  channels: 1,
  sampleRate: 44100,
  bitsPerSample: 16,
  dataBytes: 0,
  durationS: 1,
} as WavHeader;

let jobs = 0;

/** A new job of `apiKeyId`, claimed, with its WAV of `bytes` (random, or given) in its work folder; `commit()` runs its commit step. */
async function claimedJob(fx: StoreFixture, opts: { apiKeyId: string; bytes?: number; data?: Buffer; now: number }) {
  const id = `job-${++jobs}`;
  await enqueueJob(fx.database, {
    id,
    url: `https://media.example/${id}`,
    urlKey: `https://media.example/${id}`,
    createdAt: opts.now,
    apiKeyId: opts.apiKeyId,
  });
  const job = (await claimNextJob(fx.database, { owner: 'node', now: opts.now, leaseMs: 60_000 }))!;
  expect(job.id).toBe(id);
  const work = path.join(fx.dir, 'work', id);
  await mkdir(work, { recursive: true });
  const wavPath = path.join(work, 'out.wav');
  const data = opts.data ?? randomBytes(opts.bytes ?? 1000);
  await writeFile(wavPath, data);
  const ctx = { job, owner: 'node', log: createLogger('silent') } as FetchContext;
  const deps = { database: fx.database, store: fx.store, now: () => opts.now, keyAllowance: ALLOWANCE };
  return {
    data,
    async commit() {
      const outcome = await commitContent(ctx, deps, { wavPath, header: HEADER, tags: null }, {}, async () => {});
      return { outcome, row: (await getJobRow(fx.database, id))!, data };
    },
  };
}

const commitJob = async (fx: StoreFixture, opts: Parameters<typeof claimedJob>[1]) =>
  (await claimedJob(fx, opts)).commit();

describe.each(BACKENDS)("the store's allowance per key on %s", (kind) => {
  it("refuses a job that would take its key past the allowance, storing nothing; the other key's job goes on", async () => {
    const fx = await createStoreFixture(kind);
    const first = await commitJob(fx, { apiKeyId: KEY_A, bytes: 1500, now: 10_000 });
    expect(first.outcome.ok).toBe(true);
    expect(first.row).toMatchObject({ status: 'done', apiKeyId: KEY_A, storedBytes: 1500 });
    expect(await storedBytesSince(fx.database, KEY_A, 0)).toBe(1500);

    const totalsBefore = await readStoreTotals(fx.database);
    const onDiskBefore = await fx.contentIdsOnDisk();
    const over = await commitJob(fx, { apiKeyId: KEY_A, bytes: 1001, now: 11_000 });
    expect(over.outcome).toEqual({
      ok: false,
      error: {
        code: 'key_storage_quota_exceeded',
        message: expect.stringContaining('past its storage allowance of 2500 bytes'),
        detail: expect.stringContaining(
          'The new content is 1001 bytes (the WAV with its waveform peaks); 1500 bytes were stored',
        ),
        httpStatus: null,
      },
    });
    // Nothing recorded, nothing left in the store or half-written in it.
    expect(over.row).toMatchObject({ status: 'running', storedBytes: null, contentId: null });
    expect(await readStoreTotals(fx.database)).toEqual(totalsBefore);
    expect(await fx.contentIdsOnDisk()).toEqual(onDiskBefore);
    expect(await readdir(path.join(fx.store.root, '.incoming')).catch(() => [])).toEqual([]);
    expect(await storedBytesSince(fx.database, KEY_A, 0)).toBe(1500);

    // Control: exactly up to the allowance is allowed, and another key's job of the same size is not affected.
    expect((await commitJob(fx, { apiKeyId: KEY_A, bytes: 1000, now: 12_000 })).row).toMatchObject({
      status: 'done',
      storedBytes: 1000,
    });
    const other = await commitJob(fx, { apiKeyId: KEY_B, bytes: 2000, now: 12_000 });
    expect(other.row).toMatchObject({ status: 'done', apiKeyId: KEY_B, storedBytes: 2000 });
    expect(fx.store.hasSync(other.row.contentId!, AUDIO_ARTIFACT_NAME)).toBe(true);
  });

  it('counts over a rolling window: what was stored before it no longer counts', async () => {
    const fx = await createStoreFixture(kind);
    await commitJob(fx, { apiKeyId: KEY_A, bytes: 2000, now: 1_000 });
    const inWindow = await commitJob(fx, { apiKeyId: KEY_A, bytes: 1000, now: 1_000 + KEY_ALLOWANCE_WINDOW_MS - 1 });
    expect(inWindow.outcome).toMatchObject({ ok: false, error: { code: 'key_storage_quota_exceeded' } });
    const after = await commitJob(fx, { apiKeyId: KEY_A, bytes: 1000, now: 1_000 + KEY_ALLOWANCE_WINDOW_MS + 1 });
    expect(after.row).toMatchObject({ status: 'done', storedBytes: 1000 });
  });

  it('content already stored adds nothing and counts nothing, even for a key at its allowance', async () => {
    const fx = await createStoreFixture(kind);
    const stored = await commitJob(fx, { apiKeyId: KEY_B, bytes: 2000, now: 1_000 });
    await commitJob(fx, { apiKeyId: KEY_A, bytes: 2500, now: 2_000 });
    const same = await commitJob(fx, { apiKeyId: KEY_A, data: stored.data, now: 3_000 });
    expect(same.row).toMatchObject({ status: 'done', contentId: stored.row.contentId, storedBytes: null });
    expect(await storedBytesSince(fx.database, KEY_A, 0)).toBe(2500);
    expect((await cacheEntryFor(fx.database, stored.row.contentId!, AUDIO_ARTIFACT_NAME))?.bytes).toBe(2000);
  });

  it('jobs of one key committed at once cannot together pass the allowance', async () => {
    const fx = await createStoreFixture(kind);
    // Each fits alone; any two together do not.
    const claimed = [];
    for (let i = 0; i < 4; i++) claimed.push(await claimedJob(fx, { apiKeyId: KEY_A, bytes: 1300, now: 5_000 }));
    const outcomes = await Promise.all(claimed.map((job) => job.commit()));
    const done = outcomes.filter((o) => o.row.status === 'done');
    expect(done).toHaveLength(1);
    expect(outcomes.filter((o) => !o.outcome.ok && o.outcome.error.code === 'key_storage_quota_exceeded')).toHaveLength(
      3,
    );
    expect(await storedBytesSince(fx.database, KEY_A, 0)).toBe(1300);
    expect(await fx.contentIdsOnDisk()).toEqual([done[0]!.row.contentId]);
  });
});

describe("the store's allowance per key on postgres, under the key's lock", () => {
  it("a commit waits for another of the same key that holds its lock, and then counts that one's bytes", async () => {
    const fx = await createStoreFixture('postgres');
    const client = postgres(fx.database.location, { max: 1, onnotice: () => {} });
    onTestFinished(() => client.end());
    const advisoryLocks = async (granted: boolean) =>
      Number(
        (await client`select count(*)::int as n from pg_locks where locktype = 'advisory' and granted = ${granted}`)[0]!
          .n,
      );
    const waitUntil = async (check: () => Promise<boolean>) => {
      const deadline = Date.now() + 10_000;
      while (!(await check())) if (Date.now() > deadline) throw new Error('timed out');
    };

    const job = await claimedJob(fx, { apiKeyId: KEY_A, bytes: 1000, now: 5_000 });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    // Another job of the key, recording 2000 bytes under the key's lock, not committed yet.
    const holder = fx.database.transaction(async (q) => {
      await lockKeyStorage(q, KEY_A);
      await insertJob(q, {
        id: 'other',
        url: 'https://media.example/other',
        urlKey: 'https://media.example/other',
        status: 'done',
        createdAt: 5_000,
        finishedAt: 5_000,
        apiKeyId: KEY_A,
        storedBytes: 2000,
      });
      await gate;
    });
    await waitUntil(async () => (await advisoryLocks(true)) === 1);
    const committing = job.commit();
    // The commit waits for the key's lock...
    await waitUntil(async () => (await advisoryLocks(false)) === 1);
    release();
    await holder;
    // ...and then sees the other job's bytes: 2000 + 1000 is past the allowance.
    const { outcome, row } = await committing;
    expect(outcome).toMatchObject({ ok: false, error: { code: 'key_storage_quota_exceeded' } });
    expect(row.status).toBe('running');
    expect(await storedBytesSince(fx.database, KEY_A, 0)).toBe(2000);

    // Control: with nothing held, the same size for the other key is done at once.
    expect((await commitJob(fx, { apiKeyId: KEY_B, bytes: 1000, now: 5_000 })).row).toMatchObject({
      status: 'done',
      storedBytes: 1000,
    });
  });
});
