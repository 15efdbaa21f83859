import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { open, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ScrubReport } from '../../src/cli/api.js';
import { EXIT } from '../../src/cli/exit-codes.js';
import { artifactRelativePath } from '../../src/store/layout.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { ROOT, startService, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import { until } from '../support/until.js';

/**
 * The store scrub with the real service (yt-dlp and ffmpeg fetching from a media server on
 * loopback) and the real CLI (dist/cli/main.js): one byte flipped in a stored WAV is found by
 * `source-fetch scrub`, the file leaves the store for the quarantine folder, its artifact answers
 * 404 (by key and by signed URL), and the next submission of its URL downloads it again, to the
 * same content id. Control: a scrub of an intact store reports nothing and leaves everything
 * served. On both databases; and the background pass (SCRUB_INTERVAL_S) on SQLite.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const CLI = path.join(ROOT, 'dist/cli/main.js');
const TONES = { intact: 2, flipped: 2.1, background: 2.2 };

let media: MediaServer;

beforeAll(async () => {
  media = await startMediaServer();
  for (const [name, seconds] of Object.entries(TONES)) {
    const tone = await makeTone(FIXTURE_DIR, { seconds, channels: 1, sampleRate: 44100, format: 'flac' });
    media.serveFile(`/${name}.flac`, tone.path, { contentType: 'audio/flac' });
  }
});

afterAll(async () => {
  await media?.close();
});

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

function storedFile(svc: ServiceHandle, cid: string): string {
  return path.join(svc.dataDir, 'artifacts', artifactRelativePath(cid, 'audio.wav'));
}

/** Flips every bit of one byte in the middle of the file, in place, as a failing disk might. */
async function flipOneByte(file: string): Promise<Buffer> {
  const handle = await open(file, 'r+');
  try {
    const { size } = await handle.stat();
    const byte = Buffer.alloc(1);
    await handle.read(byte, 0, 1, Math.floor(size / 2));
    byte[0] = byte[0]! ^ 0xff;
    await handle.write(byte, 0, 1, Math.floor(size / 2));
  } finally {
    await handle.close();
  }
  return readFile(file);
}

function cli(svc: ServiceHandle, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const env = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/root',
      SOURCE_FETCH_URL: svc.baseUrl,
      SOURCE_FETCH_API_KEY: svc.apiKey,
    };
    const child = spawn(CLI, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function metric(svc: ServiceHandle, name: string): Promise<number> {
  const text = await (await svc.request('/metrics')).text();
  const line = text.split('\n').find((entry) => entry.startsWith(`${name} `));
  return Number(line?.split(' ')[1]);
}

async function fetchDone(svc: ServiceHandle, name: keyof typeof TONES) {
  const submitted = await svc.submit(media.url(`/${name}.flac`));
  const job = await svc.waitForJob(submitted.job_id, ['done', 'failed']);
  expect(job.status, JSON.stringify(job.error)).toBe('done');
  return { submitted, job, cid: job.result!.content_id };
}

/** The status of the artifact by key, and by the signed URL its job gave, polled until both are `status` (a few seconds at most). */
async function artifactAnswers(svc: ServiceHandle, cid: string, signedUrl: string, status: number): Promise<number[]> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const byKey = await svc.request(`/artifacts/${cid}/audio.wav`);
    const bySignature = await fetch(`${svc.baseUrl}${signedUrl}`);
    const answers = [byKey.status, bySignature.status];
    const bodies = await Promise.all([byKey.arrayBuffer(), bySignature.arrayBuffer()]);
    if (status === 200) for (const body of bodies) expect(sha256(Buffer.from(body))).toBe(cid);
    if (answers.every((answer) => answer === status) || Date.now() > deadline) return answers;
    await sleep(100);
  }
}

describe.each(BACKENDS)('store scrub on %s', (kind) => {
  let svc: ServiceHandle;

  beforeAll(async () => {
    svc = await startService({ env: { ...(await serviceEnv(kind)), FETCH_ALLOW_HOSTS: media.hostPort } });
  });

  afterAll(async () => {
    await svc?.stop();
  });

  it('control: a scrub of an intact store reports nothing corrupt, moves nothing, and everything stays served', async () => {
    const notYet = await svc.request('/store/scrub');
    expect(notYet.status).toBe(404);
    expect(await notYet.json()).toMatchObject({ code: 'scrub_not_found' });

    const { cid, job } = await fetchDone(svc, 'intact');
    const result = await cli(svc, ['scrub', '--json']);
    expect(result.code, result.stderr).toBe(EXIT.ok);
    const report = JSON.parse(result.stdout) as ScrubReport;
    expect(report).toMatchObject({
      status: 'done',
      trigger: 'request',
      checked: 1,
      corrupt: 0,
      moved: 0,
      missing: 0,
      unreadable: 0,
      findings: [],
      error: null,
    });
    expect(report.bytes_read).toBe(job.result!.artifacts[0]!.bytes);

    expect(await artifactAnswers(svc, cid, job.result!.artifacts[0]!.signed_url, 200)).toEqual([200, 200]);
    expect(existsSync(path.join(svc.dataDir, 'quarantine'))).toBe(false);
    expect((await svc.submit(media.url('/intact.flac'))).born_done).toBe(true);
    expect(await metric(svc, 'source_fetch_store_scrub_corrupt_artifacts_total')).toBe(0);
    // The same report, asked for again on this node.
    const again = await svc.request('/store/scrub?wait_s=0');
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual(report);
  });

  it('one byte flipped: the report names the content, its artifact answers 404, and the URL is downloaded again to the same content id', async () => {
    const { cid, job } = await fetchDone(svc, 'flipped');
    const signedUrl = job.result!.artifacts[0]!.signed_url;
    // Served (and remembered by delivery) before the corruption.
    expect(await artifactAnswers(svc, cid, signedUrl, 200)).toEqual([200, 200]);
    const flipped = await flipOneByte(storedFile(svc, cid));
    const checkedBefore = await metric(svc, 'source_fetch_store_scrub_checked_artifacts_total');

    const result = await cli(svc, ['scrub']);
    expect(result.code, result.stdout + result.stderr).toBe(EXIT.storeProblems);
    const lines = result.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(
      /^scrub [0-9a-f-]{36} on \S+: done: 2 checked, [\d.]+ KiB read; 1 corrupt \(1 moved to the quarantine folder\), 0 missing, 0 unreadable$/,
    );
    const named = new RegExp(
      `^corrupt ${cid}/audio\\.wav: SHA-256 ${sha256(flipped)}; quarantined as (${cid}\\.\\d+/audio\\.wav)$`,
    ).exec(lines[1]!);
    expect(named, lines[1]).not.toBeNull();
    expect(lines).toHaveLength(2);

    // Out of the store, whole, in the quarantine folder under DATA_DIR.
    expect(await readFile(path.join(svc.dataDir, 'quarantine', named![1]!))).toEqual(flipped);
    expect(existsSync(storedFile(svc, cid))).toBe(false);
    // No longer served, by key nor by signed URL; its job's record says the content is gone.
    expect(await artifactAnswers(svc, cid, signedUrl, 404)).toEqual([404, 404]);
    const record = await svc.getJob(job.job_id);
    expect(record.result).toMatchObject({ content_id: cid, artifacts: [], evicted: { at: expect.any(String) } });

    expect(await metric(svc, 'source_fetch_store_scrub_corrupt_artifacts_total')).toBe(1);
    expect((await metric(svc, 'source_fetch_store_scrub_checked_artifacts_total')) - checkedBefore).toBe(2);
    expect(await metric(svc, 'source_fetch_store_scrub_read_bytes_total')).toBeGreaterThan(0);
    expect(await metric(svc, 'source_fetch_store_scrub_last_completed_timestamp_seconds')).toBeGreaterThan(
      Date.now() / 1000 - 60,
    );

    // The next submission is not born done: it downloads again, and stores the same bytes.
    const downloadsBefore = media.requestsFor('/flipped.flac').length;
    const again = await svc.submit(media.url('/flipped.flac'));
    expect(again.born_done).toBe(false);
    const done = await svc.waitForJob(again.job_id, ['done', 'failed']);
    expect(done.status).toBe('done');
    expect(done.result!.content_id).toBe(cid);
    expect(media.requestsFor('/flipped.flac').length).toBeGreaterThan(downloadsBefore);
    expect(await artifactAnswers(svc, cid, done.result!.artifacts[0]!.signed_url, 200)).toEqual([200, 200]);
    expect(sha256(await readFile(storedFile(svc, cid)))).toBe(cid);

    // And the store is whole again.
    const clean = await cli(svc, ['scrub', '--json']);
    expect(clean.code, clean.stderr).toBe(EXIT.ok);
    expect(JSON.parse(clean.stdout)).toMatchObject({ status: 'done', checked: 2, corrupt: 0 });
  });
});

describe('the background scrub (SCRUB_INTERVAL_S)', () => {
  let svc: ServiceHandle;

  beforeAll(async () => {
    svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, SCRUB_INTERVAL_S: '1' } });
  });

  afterAll(async () => {
    await svc?.stop();
  });

  it('finds and quarantines a corrupt file on its own, a second or two later', async () => {
    const { cid } = await fetchDone(svc, 'background');
    await flipOneByte(storedFile(svc, cid));
    await until(
      'a background pass to find the corrupt file',
      async () => ((await metric(svc, 'source_fetch_store_scrub_corrupt_artifacts_total')) >= 1 ? true : undefined),
      15_000,
    );
    expect(existsSync(storedFile(svc, cid))).toBe(false);
    expect((await svc.request(`/artifacts/${cid}/audio.wav`)).status).toBe(404);
    const found = svc.logs.find(
      (line) => line.msg.startsWith('store scrub: a stored file does not hash') && line.content_id === cid,
    );
    expect(found).toMatchObject({ action: 'quarantined', trigger: 'schedule' });
    expect((await svc.submit(media.url('/background.flac'))).born_done).toBe(false);
  });
});
