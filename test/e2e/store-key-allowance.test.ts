import { mkdir, rename } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProcess } from '../../src/tools/process.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';

/**
 * One API key's uploads cannot push another key's content out of the store: the real service,
 * two keys, and constant-sample FLAC (a few KB that decode to a WAV thirty times larger, as a
 * hostile page would serve). With the allowance per key, the bulk key's job that would pass it
 * fails with key_storage_quota_exceeded and the other key's artifact is still served. The
 * control, the same uploads with no allowance per key: the other key's artifact is evicted, and
 * its job's record says so (result.evicted) until the URL, submitted again, is fetched again.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const KEY_OTHER = 'other-client-key-0123456789';
const KEY_BULK = 'bulk-client-key-0123456789ab';
// Its 3 s mono WAV is 264,644 bytes; the other key's 2 s tone about 176,000.
const BOMB_SECONDS = 3;
const BOMB_WAV_BYTES = 44_100 * 2 * BOMB_SECONDS + 44;
// With the allowance: a quarter of the cap (the default) holds one bomb, not two.
const CAP = 2_000_000;
// Without it: the other key's tone and one bomb fit, a second bomb does not.
const SMALL_CAP = 600_000;

let media: MediaServer;

/** A FLAC of one constant sample value: ffmpeg's encoder makes each of its frames a few bytes. */
async function constantFlac(level: number): Promise<string> {
  const file = path.join(FIXTURE_DIR, `constant-${level}-${BOMB_SECONDS}s.flac`);
  const tmp = `${file}.${process.pid}.tmp`;
  await mkdir(FIXTURE_DIR, { recursive: true });
  const args = [
    '-nostdin',
    '-hide_banner',
    '-loglevel',
    'error',
    '-y',
    '-f',
    'lavfi',
    '-i',
    `aevalsrc=${level}:c=mono:s=44100:d=${BOMB_SECONDS}`,
  ];
  const made = await runProcess({
    command: 'ffmpeg',
    args: [...args, '-c:a', 'flac', '-fflags', '+bitexact', '-f', 'flac', tmp],
    timeoutMs: 60_000,
  });
  if (made.exitCode !== 0) throw new Error(made.stderrTail);
  await rename(tmp, file);
  return file;
}

beforeAll(async () => {
  media = await startMediaServer();
  for (const [name, level] of [
    ['bomb-1', 0.25],
    ['bomb-2', 0.3],
  ] as const) {
    media.serveFile(`/${name}.flac`, await constantFlac(level), { contentType: 'audio/flac' });
  }
  for (const [name, seconds] of [
    ['other', 2],
    ['other-later', 2.01],
  ] as const) {
    const tone = await makeTone(FIXTURE_DIR, { seconds, channels: 1, sampleRate: 44100, format: 'flac' });
    media.serveFile(`/${name}.flac`, tone.path, { contentType: 'audio/flac' });
  }
});

afterAll(async () => {
  await media?.close();
});

/** Submits as `key`, and waits for the job's end. */
async function fetchAs(svc: ServiceHandle, key: string, name: string): Promise<JobBody> {
  const res = await svc.request('/sources', {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: media.url(`/${name}.flac`) }),
  });
  expect(res.status).toBe(202);
  const { job_id: id } = (await res.json()) as JobBody;
  return svc.waitForJob(id, ['done', 'failed']);
}

/** A done job's result.evicted: when the store evicted its content, and what to do; null while it is stored. */
const evictedOf = (job: JobBody) =>
  (job.result as { evicted?: { at: string; message: string } | null } | null)?.evicted;

async function metric(svc: ServiceHandle, name: string): Promise<number> {
  const text = await (await svc.request('/metrics')).text();
  return Number(
    text
      .split('\n')
      .find((line) => line.startsWith(`${name} `))
      ?.split(' ')[1],
  );
}

/** The artifact by key and by its signed URL, as the other client would fetch it: two statuses. */
async function served(svc: ServiceHandle, job: JobBody, signedUrl: string): Promise<[number, number]> {
  const byKey = await svc.request(`/artifacts/${job.result!.content_id}/audio.wav`, {
    headers: { authorization: `Bearer ${KEY_OTHER}` },
  });
  const bySignature = await svc.request(signedUrl, { auth: false });
  await Promise.all([byKey.body?.cancel(), bySignature.body?.cancel()]);
  return [byKey.status, bySignature.status];
}

describe.each(BACKENDS)('the store allowance per API key on %s', (kind) => {
  let svc: ServiceHandle;
  beforeAll(async () => {
    svc = await startService({
      apiKey: KEY_OTHER,
      env: {
        ...(await serviceEnv(kind)),
        API_KEYS: `${KEY_OTHER},${KEY_BULK}`,
        FETCH_ALLOW_HOSTS: media.hostPort,
        ARTIFACT_CAP_BYTES: String(CAP),
      },
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it("stops the bulk key at its allowance without evicting the other key's content", async () => {
    const other = await fetchAs(svc, KEY_OTHER, 'other');
    expect(other.status).toBe('done');
    const signedUrl = other.result!.artifacts[0]!.signed_url;

    const first = await fetchAs(svc, KEY_BULK, 'bomb-1');
    expect(first.status).toBe('done');
    expect(first.result!.artifacts[0]!.bytes).toBe(BOMB_WAV_BYTES);
    // The WAV and its peaks count.
    const firstBytes = first.result!.artifacts.reduce((sum, artifact) => sum + artifact.bytes, 0);
    expect(first.result!.artifacts.map((artifact) => artifact.name)).toEqual(['audio.wav', 'peaks.json']);
    const refused = await fetchAs(svc, KEY_BULK, 'bomb-2');
    expect(refused.status).toBe('failed');
    expect(refused.error).toEqual({
      code: 'key_storage_quota_exceeded',
      message: expect.stringContaining(`past its storage allowance of ${CAP / 4} bytes`),
      detail: expect.stringContaining(`${firstBytes} bytes were stored`),
      http_status: null,
    });
    // The job record names no key, nor any digest of one.
    expect(JSON.stringify(refused)).not.toContain(KEY_BULK);
    expect(Object.keys(refused)).not.toContain('api_key_id');

    // The other key's content is still stored and served, by key and by signed URL; nothing was evicted.
    expect(await served(svc, other, signedUrl)).toEqual([200, 200]);
    expect((await svc.getJob(other.job_id)).result!.artifacts).toHaveLength(2);
    expect(await metric(svc, 'source_fetch_store_evicted_artifacts_total')).toBe(0);
    const otherBytes = other.result!.artifacts.reduce((sum, artifact) => sum + artifact.bytes, 0);
    expect(await metric(svc, 'source_fetch_store_bytes')).toBe(otherBytes + firstBytes);
    expect(await metric(svc, 'source_fetch_job_failures_total{code="key_storage_quota_exceeded"}')).toBe(1);

    // Controls: the other key still stores, and the bulk key's earlier job still reads done.
    expect((await fetchAs(svc, KEY_OTHER, 'other-later')).status).toBe('done');
    expect((await svc.getJob(first.job_id)).result!.artifacts).toHaveLength(2);
  });
});

describe('the control: no allowance per key (STORE_BYTES_PER_KEY_PER_DAY=0)', () => {
  let svc: ServiceHandle;
  beforeAll(async () => {
    svc = await startService({
      apiKey: KEY_OTHER,
      env: {
        API_KEYS: `${KEY_OTHER},${KEY_BULK}`,
        FETCH_ALLOW_HOSTS: media.hostPort,
        ARTIFACT_CAP_BYTES: String(SMALL_CAP),
        STORE_BYTES_PER_KEY_PER_DAY: '0',
      },
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it("the bulk key's uploads push the other key's content out of the store; its job's record says so", async () => {
    const other = await fetchAs(svc, KEY_OTHER, 'other');
    const signedUrl = other.result!.artifacts[0]!.signed_url;
    expect(await served(svc, other, signedUrl)).toEqual([200, 200]);
    expect(evictedOf(other)).toBeNull();
    // Each stored after the other key's content was last served: it is the coldest.
    expect((await fetchAs(svc, KEY_BULK, 'bomb-1')).status).toBe('done');
    const bomb2 = await fetchAs(svc, KEY_BULK, 'bomb-2');
    expect(bomb2.status).toBe('done');
    const deadline = Date.now() + 10_000;
    while ((await metric(svc, 'source_fetch_store_evicted_artifacts_total')) < 1) {
      if (Date.now() > deadline) throw new Error('nothing was evicted');
      await sleep(50);
    }
    expect(await served(svc, other, signedUrl)).toEqual([404, 404]);

    // Its job still reads done, and now says why its artifacts are gone, when, and what to do.
    const evicted = await svc.getJob(other.job_id);
    expect(evicted.status).toBe('done');
    expect(evicted.result).toEqual({
      content_id: other.result!.content_id,
      artifacts: [],
      loudness: null,
      evicted: {
        at: expect.any(String),
        message: expect.stringContaining('Submitting the URL again fetches it again.'),
      },
    });
    const at = Date.parse(evictedOf(evicted)!.at);
    expect(at).toBeGreaterThanOrEqual(Date.parse(bomb2.finished_at as string));
    // The control: the job whose content stays says nothing of the kind.
    expect(evictedOf(await svc.getJob(bomb2.job_id))).toBeNull();

    // As it says: submitted again, the URL is fetched again (not born done), and the old record has its artifact back.
    const again = await fetchAs(svc, KEY_OTHER, 'other');
    expect([again.born_done, again.status, again.result!.content_id]).toEqual([
      false,
      'done',
      other.result!.content_id,
    ]);
    const restored = await svc.getJob(other.job_id);
    expect([restored.result!.artifacts.length, evictedOf(restored)]).toEqual([2, null]);
  });
});
