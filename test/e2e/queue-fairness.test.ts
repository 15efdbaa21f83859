import { stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { BACKENDS, serviceEnv } from '../support/test-database.js';

/**
 * Queued jobs are taken fairly across API keys, by the real service on each database: one key
 * queues eight slow downloads for two workers, another key one job after them. The other key's job
 * is taken as soon as a worker is free, not after the eight; the bulk key's jobs are still all
 * done, in their own order (the control).
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const KEY_BULK = 'bulk-client-key-0123456789ab';
const KEY_OTHER = 'other-client-key-0123456789';
const BULK_JOBS = 8;

let media: MediaServer;

beforeAll(async () => {
  media = await startMediaServer();
  const tone = await makeTone(FIXTURE_DIR, { seconds: 3, channels: 1, sampleRate: 44100, format: 'flac' });
  // Each download takes about a second.
  const throttleBytesPerSec = Math.ceil((await stat(tone.path)).size / 1);
  for (let i = 0; i < BULK_JOBS; i++)
    media.serveFile(`/bulk-${i}.flac`, tone.path, { contentType: 'audio/flac', throttleBytesPerSec });
  media.serveFile('/other.flac', tone.path, { contentType: 'audio/flac', throttleBytesPerSec });
});

afterAll(async () => {
  await media?.close();
});

async function submitAs(svc: ServiceHandle, key: string, name: string): Promise<string> {
  const res = await svc.request('/sources', {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ url: media.url(`/${name}.flac`) }),
  });
  expect(res.status).toBe(202);
  return ((await res.json()) as JobBody).job_id;
}

describe.each(BACKENDS)('queue turns across keys on %s', (kind) => {
  let svc: ServiceHandle;
  beforeAll(async () => {
    svc = await startService({
      apiKey: KEY_BULK,
      env: {
        ...(await serviceEnv(kind)),
        API_KEYS: `${KEY_BULK},${KEY_OTHER}`,
        FETCH_ALLOW_HOSTS: media.hostPort,
        WORKER_CONCURRENCY: '2',
      },
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it("another key's job does not wait for one key's whole queue", async () => {
    const bulk: string[] = [];
    for (let i = 0; i < BULK_JOBS; i++) bulk.push(await submitAs(svc, KEY_BULK, `bulk-${i}`));
    const other = await submitAs(svc, KEY_OTHER, 'other');

    const ended = await Promise.all([...bulk, other].map((id) => svc.waitForJob(id, ['done', 'failed'], 120_000)));
    expect(ended.map((job) => job.status)).toEqual(Array(BULK_JOBS + 1).fill('done'));
    const startedAt = (job: JobBody) => Date.parse(job.started_at as string);
    const otherStarted = startedAt(ended.at(-1)!);
    // Taken at the first free worker: after at most the two bulk jobs that held the workers, so
    // most of the bulk key's jobs, queued before it, started after it.
    const bulkAfter = ended.slice(0, BULK_JOBS).filter((job) => startedAt(job) > otherStarted).length;
    expect(bulkAfter).toBeGreaterThanOrEqual(BULK_JOBS - 3);
    // The control: the bulk key's own jobs started in the order they were queued.
    const bulkStarts = ended.slice(0, BULK_JOBS).map(startedAt);
    expect(bulkStarts).toEqual([...bulkStarts].sort((a, b) => a - b));
  });
});
