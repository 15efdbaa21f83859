import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, readlink, realpath, rm, stat, writeFile } from 'node:fs/promises';
import http, { type IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import postgres from 'postgres';

/**
 * The size cap with real fetches: the store is filled past its cap, and the least recently
 * used content (stored or served) goes first; content evicted while it is streamed still
 * reaches its reader whole. The cap and reconciliation run on both databases.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
// Each 2-second mono WAV at 44.1 kHz is 176,478 bytes, its peaks.json about 10 kB; the cap holds
// two such contents, not three.
const CAP = 400_000;
// 'big' (120 s stereo) is 21,168,044 bytes and fits alone; with 'small' (4 s stereo, 705,644) it does not.
const BIG_CAP = 21_500_000;
const TONES = {
  a: { seconds: 2, channels: 1 },
  b: { seconds: 2.01, channels: 1 },
  c: { seconds: 2.02, channels: 1 },
  d: { seconds: 2.03, channels: 1 },
  e: { seconds: 2.04, channels: 1 },
  f: { seconds: 2.05, channels: 1 },
  big: { seconds: 120, channels: 2 },
  small: { seconds: 4, channels: 2 },
};

let media: MediaServer;

beforeAll(async () => {
  media = await startMediaServer();
  for (const [name, tone] of Object.entries(TONES)) {
    const file = await makeTone(FIXTURE_DIR, { ...tone, sampleRate: 44100, format: 'flac' });
    media.serveFile(`/${name}.flac`, file.path, { contentType: 'audio/flac' });
  }
});

afterAll(async () => {
  await media?.close();
});

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

function artifactFile(svc: ServiceHandle, cid: string): string {
  return path.join(svc.dataDir, 'artifacts', cid.slice(0, 2), cid, 'audio.wav');
}

/**
 * The bytes of each content folder that holds a WAV (its WAV and its peaks.json together). A
 * content evicted while it is being measured is left out, as it would be a moment later.
 */
async function filesOnDisk(svc: ServiceHandle): Promise<Map<string, number>> {
  const root = path.join(svc.dataDir, 'artifacts');
  const files = new Map<string, number>();
  for (const [cid, names] of await namesOnDisk(svc)) {
    if (!names.includes('audio.wav')) continue;
    const sizes = await Promise.all(
      names.map((name) => stat(path.join(root, cid.slice(0, 2), cid, name)).then((found) => found.size, goneIsNull)),
    );
    if (sizes.includes(null)) continue;
    files.set(
      cid,
      sizes.reduce<number>((sum, size) => sum + (size ?? 0), 0),
    );
  }
  return files;
}

function goneIsNull(err: NodeJS.ErrnoException): null {
  if (err.code === 'ENOENT') return null;
  throw err;
}

/** The file names of every content folder. */
async function namesOnDisk(svc: ServiceHandle): Promise<Map<string, string[]>> {
  const root = path.join(svc.dataDir, 'artifacts');
  const contents = new Map<string, string[]>();
  for (const shard of (await readdir(root)).filter((entry) => /^[0-9a-f]{2}$/.test(entry))) {
    for (const cid of await readdir(path.join(root, shard))) {
      contents.set(cid, (await readdir(path.join(root, shard, cid)).catch(() => [])).sort());
    }
  }
  return contents;
}

async function cidsOnDisk(svc: ServiceHandle): Promise<string[]> {
  return [...(await filesOnDisk(svc)).keys()].sort();
}

async function waitFor(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

async function metric(svc: ServiceHandle, name: string): Promise<number> {
  const text = await (await svc.request('/metrics')).text();
  const line = text.split('\n').find((entry) => entry.startsWith(`${name} `));
  return Number(line?.split(' ')[1]);
}

async function fetchDone(svc: ServiceHandle, name: keyof typeof TONES) {
  const job = await svc.waitForJob((await svc.submit(media.url(`/${name}.flac`))).job_id, ['done', 'failed']);
  expect(job.status).toBe('done');
  return job.result!.content_id;
}

describe.each(BACKENDS)('store size cap on %s', (kind) => {
  let svc: ServiceHandle;

  beforeAll(async () => {
    // One key fills the store on purpose: no allowance per key (test/e2e/store-key-allowance.test.ts has it).
    svc = await startService({
      env: {
        ...(await serviceEnv(kind)),
        FETCH_ALLOW_HOSTS: media.hostPort,
        ARTIFACT_CAP_BYTES: String(CAP),
        STORE_BYTES_PER_KEY_PER_DAY: '0',
      },
    });
  });

  afterAll(async () => {
    await svc?.stop();
  });

  it('evicts the coldest content past the cap, keeps the hottest, and downloads evicted content again', async () => {
    const a = await fetchDone(svc, 'a');
    const b = await fetchDone(svc, 'b');
    expect(await cidsOnDisk(svc)).toEqual([a, b].sort());

    // Using a again (a resubmission is born done, and records the use at once) makes b the coldest.
    const reused = await svc.submit(media.url('/a.flac'));
    expect(reused.born_done).toBe(true);

    const c = await fetchDone(svc, 'c');
    // Gone whole: the folder too, which eviction removes after its files (a look in between sees it empty).
    await waitFor('b to be evicted', async () => !(await namesOnDisk(svc)).has(b));
    const files = await filesOnDisk(svc);
    expect([...files.keys()].sort()).toEqual([a, c].sort());
    // b went whole, its peaks with its WAV; a and c keep both.
    expect(Object.fromEntries(await namesOnDisk(svc))).toEqual({
      [a]: ['audio.wav', 'peaks.json'],
      [c]: ['audio.wav', 'peaks.json'],
    });

    // The byte count is exact: the same as the files on disk (WAVs and peaks), and within the cap.
    const onDisk = [...files.values()].reduce((sum, size) => sum + size, 0);
    expect(await metric(svc, 'source_fetch_store_bytes')).toBe(onDisk);
    expect(await metric(svc, 'source_fetch_store_artifacts')).toBe(4);
    expect(onDisk).toBeLessThanOrEqual(CAP);
    expect(await metric(svc, 'source_fetch_store_evicted_artifacts_total')).toBe(2);
    for (const [cid] of files) expect(sha256(await readFile(artifactFile(svc, cid)))).toBe(cid);

    // b's alias no longer makes a job born done: it is downloaded again.
    const before = media.requestsFor('/b.flac').length;
    const again = await svc.submit(media.url('/b.flac'));
    expect(again.born_done).toBe(false);
    const done = await svc.waitForJob(again.job_id, ['done', 'failed']);
    expect(done.result!.content_id).toBe(b);
    expect(media.requestsFor('/b.flac').length).toBeGreaterThan(before);
  });

  it('serving an artifact (not resubmitting it) keeps it hot: of two stored, the one served more recently survives', async () => {
    const d = await fetchDone(svc, 'd');
    const e = await fetchDone(svc, 'e');
    // Whatever the test before left is evicted: the cap holds these two, e the hotter (stored last).
    await waitFor(
      'the store to hold d and e only',
      async () => (await cidsOnDisk(svc)).join() === [d, e].sort().join(),
    );

    const served = await svc.request(`/artifacts/${d}/audio.wav`);
    expect(served.status).toBe(200);
    expect(sha256(Buffer.from(await served.arrayBuffer()))).toBe(d);

    const f = await fetchDone(svc, 'f');
    await waitFor('one of d and e to be evicted', async () => (await cidsOnDisk(svc)).length === 2);
    expect(await cidsOnDisk(svc)).toEqual([d, f].sort());
  });
});

describe('eviction of an artifact while it is streamed', () => {
  let svc: ServiceHandle;

  beforeAll(async () => {
    svc = await startService({
      env: { FETCH_ALLOW_HOSTS: media.hostPort, ARTIFACT_CAP_BYTES: String(BIG_CAP), STORE_BYTES_PER_KEY_PER_DAY: '0' },
    });
  });

  afterAll(async () => {
    await svc?.stop();
  });

  function get(cid: string): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      http
        .get(
          `${svc.baseUrl}/artifacts/${cid}/audio.wav`,
          { headers: { authorization: `Bearer ${svc.apiKey}` } },
          resolve,
        )
        .on('error', reject);
    });
  }

  /** What the service's open file descriptors point to (Linux). */
  async function openFiles(pid: number): Promise<string[]> {
    const fds = await readdir(`/proc/${pid}/fd`);
    return (await Promise.all(fds.map((fd) => readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')))).filter(Boolean);
  }

  it('the fallback stream finishes with every byte; the file is gone from disk', async () => {
    const big = await fetchDone(svc, 'big');
    const bigFile = path.join(await realpath(path.join(svc.dataDir, 'artifacts')), big.slice(0, 2), big, 'audio.wav');
    const size = (await stat(bigFile)).size;
    expect(size).toBeGreaterThan(20_000_000);

    const res = await get(big);
    expect(res.statusCode).toBe(200);
    const total = Number(res.headers['content-length']);
    expect(total).toBe(size);
    const hash = createHash('sha256');
    let received = 0;
    // A slow reader: the first chunk, then nothing until the file has been evicted. Pausing at
    // once keeps the socket's windows small, so the service cannot read the whole file ahead.
    let holding = true;
    const ended = new Promise<void>((resolve, reject) => res.on('end', resolve).on('error', reject));
    res.on('data', (chunk: Buffer) => {
      hash.update(chunk);
      received += chunk.length;
      if (holding) res.pause();
    });
    await waitFor('the first bytes', () => received > 0);

    // Serving made big hot, but 'small' is stored after it: big is now the coldest, and past the cap.
    const small = await fetchDone(svc, 'small');
    await waitFor('big to be evicted', () => !existsSync(bigFile));
    expect(await cidsOnDisk(svc)).toEqual([small]);
    expect(received).toBeLessThan(total);
    // Unlinked, yet still open in the service, which reads on from it.
    expect(await openFiles(svc.process.pid!)).toContain(`${bigFile} (deleted)`);

    holding = false;
    res.resume();
    await ended;
    expect(received).toBe(total);
    expect(hash.digest('hex')).toBe(big);
    expect(existsSync(bigFile)).toBe(false);
    await waitFor(
      'the service to close the file',
      async () => !(await openFiles(svc.process.pid!)).includes(`${bigFile} (deleted)`),
    );
  });
});

describe.each(BACKENDS)('start-up reconciliation on %s', (kind) => {
  it('removes stray files, adopts a stored WAV and its peaks whose rows are gone, drops rows whose WAV is gone with their peaks and aliases, and logs the counts', async () => {
    const dataDir = await mkdtemp(path.join(tmpdir(), 'sf-reconcile-'));
    const apiKey = 'reconcile-test-key-0123456789';
    const databaseEnv = await serviceEnv(kind);
    const env = { ...databaseEnv, FETCH_ALLOW_HOSTS: media.hostPort };
    let svc = await startService({ dataDir, apiKey, env });
    try {
      const kept = await fetchDone(svc, 'a');
      const lost = await fetchDone(svc, 'b');
      const rowless = await fetchDone(svc, 'c');
      await svc.stop();

      // While the service is down: b's WAV goes (its peaks stay), c's rows go, a stray file appears at an address.
      await rm(artifactFile(svc, lost));
      if (databaseEnv.DATABASE_URL) {
        const sql = postgres(databaseEnv.DATABASE_URL, { max: 1 });
        await sql`delete from cache_entries where content_id = ${rowless}`;
        await sql.end();
      } else {
        const db = new Database(path.join(dataDir, 'source-fetch.sqlite'));
        db.prepare('delete from cache_entries where content_id = ?').run(rowless);
        db.close();
      }
      const strayCid = `ab${'0'.repeat(62)}`;
      await mkdir(path.dirname(artifactFile(svc, strayCid)), { recursive: true });
      await writeFile(artifactFile(svc, strayCid), 'not the bytes its address names');

      svc = await startService({ dataDir, apiKey, env });
      expect(svc.logs.find((line) => line.msg === 'start-up recovery')).toMatchObject({
        files_adopted: 2,
        files_removed: 1,
        rows_dropped: 2,
        aliases_cleared: 1,
      });
      expect(await cidsOnDisk(svc)).toEqual([kept, rowless].sort());
      // b's peaks went with its WAV; c's WAV and peaks were both adopted.
      expect(Object.fromEntries(await namesOnDisk(svc))).toEqual({
        [kept]: ['audio.wav', 'peaks.json'],
        [rowless]: ['audio.wav', 'peaks.json'],
      });
      const files = await filesOnDisk(svc);
      expect(await metric(svc, 'source_fetch_store_bytes')).toBe(
        [...files.values()].reduce((sum, size) => sum + size, 0),
      );
      expect(await metric(svc, 'source_fetch_store_artifacts')).toBe(4);
      const adopted = await svc.submit(media.url('/c.flac'));
      expect(adopted.result!.artifacts.map((artifact) => artifact.name)).toEqual(['audio.wav', 'peaks.json']);

      // a and the adopted c are still stored under their URLs; b's alias is gone, so b downloads again.
      for (const [name, cid] of [
        ['a', kept],
        ['c', rowless],
      ] as const) {
        const again = await svc.submit(media.url(`/${name}.flac`));
        expect(again).toMatchObject({ born_done: true, status: 'done' });
        expect(again.result?.content_id).toBe(cid);
      }
      const before = media.requestsFor('/b.flac').length;
      const refetched = await svc.submit(media.url('/b.flac'));
      expect(refetched.born_done).toBe(false);
      expect((await svc.waitForJob(refetched.job_id, ['done', 'failed'])).result?.content_id).toBe(lost);
      expect(media.requestsFor('/b.flac').length).toBeGreaterThan(before);
    } finally {
      await svc.stop();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
