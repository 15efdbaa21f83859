import { stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';
import { until } from '../support/until.js';

/**
 * Single flight stays within an API key, by the real service (one worker) on each database: a
 * job follows another job of the same URL only when both are its key's, so another key's job of a
 * URL one key is fetching neither waits behind that key's backlog nor ends with that key's
 * outcome. The controls: two jobs of one key with the same URL still share one download, and the
 * same key's follower still ends with its leader's outcome (failed with it).
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
// Keys A and B for the backlog case, C and D for the allowance's.
const KEY_A = 'a-single-flight-key-0123456789';
const KEY_B = 'b-single-flight-key-0123456789';
const KEY_C = 'c-single-flight-key-0123456789';
const KEY_D = 'd-single-flight-key-0123456789';
const BACKLOG = 4;
// A 2 s mono WAV with its peaks is some 195,000 bytes: one fits, two do not.
const ALLOWANCE = 300_000;

let media: MediaServer;

beforeAll(async () => {
  media = await startMediaServer();
  const tone = (variant: number) =>
    makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'flac', variant });
  const [backlog, filler, sharedOverAllowance] = await Promise.all([tone(11), tone(13), tone(14)]);
  // Each slow download takes about a second: a job submitted just after another is still active.
  const slowly = async (urlPath: string, file: string) =>
    media.serveFile(urlPath, file, { contentType: 'audio/flac', throttleBytesPerSec: (await stat(file)).size });
  // Each database's service its own paths, so that each counts its own downloads.
  for (const kind of BACKENDS) {
    for (let i = 0; i < BACKLOG; i++) await slowly(`/${kind}/backlog-${i}.flac`, backlog.path);
    // The backlog's bytes: key A stores them once, within its allowance.
    await slowly(`/${kind}/shared.flac`, backlog.path);
    media.serveFile(`/${kind}/filler.flac`, filler.path, { contentType: 'audio/flac' });
    await slowly(`/${kind}/shared-over-allowance.flac`, sharedOverAllowance.path);
  }
});

afterAll(async () => {
  await media?.close();
});

describe.each(BACKENDS)('single flight within a key on %s', (kind) => {
  let svc: ServiceHandle;
  beforeAll(async () => {
    svc = await startService({
      apiKey: KEY_A,
      env: {
        ...(await serviceEnv(kind)),
        API_KEYS: [KEY_A, KEY_B, KEY_C, KEY_D].join(','),
        FETCH_ALLOW_HOSTS: media.hostPort,
        WORKER_CONCURRENCY: '1',
        STORE_BYTES_PER_KEY_PER_DAY: String(ALLOWANCE),
      },
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  async function submitAs(key: string, name: string): Promise<string> {
    const res = await svc.request('/sources', {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: media.url(`/${kind}/${name}.flac`) }),
    });
    expect(res.status).toBe(202);
    return ((await res.json()) as JobBody).job_id;
  }
  const ended = (id: string) => svc.waitForJob(id, ['done', 'failed', 'canceled'], 120_000);

  it("another key's job of a URL one key is fetching is claimed on its own turn, not after that key's backlog", async () => {
    const backlog: string[] = [];
    for (let i = 0; i < BACKLOG; i++) backlog.push(await submitAs(KEY_A, `backlog-${i}`));
    // Key A's job of the shared URL waits behind its backlog; key A's second job of it follows the first.
    const a1 = await submitAs(KEY_A, 'shared');
    const a2 = await submitAs(KEY_A, 'shared');
    const b1 = await submitAs(KEY_B, 'shared');

    const jobs = await Promise.all([...backlog, a1, a2, b1].map(ended));
    expect(jobs.map((job) => [job.status, job.error?.code ?? null])).toEqual(Array(BACKLOG + 3).fill(['done', null]));
    const [shared1, shared2, other] = jobs.slice(BACKLOG) as [JobBody, JobBody, JobBody];
    const startedAt = (job: JobBody) => Date.parse(job.started_at as string);
    // Taken at the first free worker: after at most the backlog job that held it.
    const backlogAfter = jobs.slice(0, BACKLOG).filter((job) => startedAt(job) > startedAt(other)).length;
    expect(backlogAfter).toBeGreaterThanOrEqual(BACKLOG - 1);
    expect(startedAt(other)).toBeLessThan(startedAt(shared1));
    // Both keys' jobs end with the same content, stored once (content-addressed).
    expect(new Set([shared1, shared2, other].map((job) => job.result!.content_id)).size).toBe(1);
    // Two downloads of the shared URL: key B's own, and key A's, which its second job shared (the
    // control: one key's two jobs of a URL download it once).
    expect(media.downloadsOf(`/${kind}/shared.flac`)).toBe(2);
    expect(media.downloadsOf(`/${kind}/backlog-0.flac`)).toBe(1);
  });

  it("another key's job of the same URL is done while the job of a key past its storage allowance fails", async () => {
    // Key C stores one WAV: the next would take it past its allowance.
    const filler = await ended(await submitAs(KEY_C, 'filler'));
    expect(filler.status).toBe('done');

    const c1 = await submitAs(KEY_C, 'shared-over-allowance');
    // Key C's job runs first (key D, never served, would have the next turn): it commits first.
    await until("key C's job running", async () => ((await svc.getJob(c1)).status === 'running' ? true : undefined));
    const c2 = await submitAs(KEY_C, 'shared-over-allowance');
    const d1 = await submitAs(KEY_D, 'shared-over-allowance');
    const [leader, follower, other] = (await Promise.all([c1, c2, d1].map(ended))) as [JobBody, JobBody, JobBody];

    expect(leader.status).toBe('failed');
    expect(leader.error).toEqual({
      code: 'key_storage_quota_exceeded',
      message: expect.stringContaining(`past its storage allowance of ${ALLOWANCE} bytes`),
      detail: expect.any(String),
      http_status: null,
    });
    // The control: the same key's follower fails with its leader, with the same error.
    expect([follower.status, follower.error]).toEqual(['failed', leader.error]);
    // Key D's job, within its own allowance, stores the WAV.
    expect([other.status, other.error]).toEqual(['done', null]);
    expect(other.result!.artifacts.map((artifact) => artifact.name)).toEqual(['audio.wav', 'peaks.json']);
    // Key C's leader downloaded once for both its jobs, key D's job once.
    expect(media.downloadsOf(`/${kind}/shared-over-allowance.flac`)).toBe(2);
  });
});
