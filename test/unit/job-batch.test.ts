import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../../src/db/database.js';
import { ServiceError } from '../../src/errors.js';
import { createAdmission } from '../../src/jobs/admission.js';
import { createJobService, type BatchItem, type JobService } from '../../src/jobs/job-service.js';
import { getJobRow } from '../../src/jobs/queue.js';
import { setAlias } from '../../src/store/aliases.js';
import { recordCacheEntry } from '../../src/store/cache-entries.js';
import { callbackRecorder, deliveryForJob } from '../../src/webhooks/deliveries.js';
import { BACKENDS, openTestDatabase, wavEntry } from '../support/test-database.js';

/**
 * Batches through the job service on a real database of each kind: the same rules as one
 * submission, URL by URL, in order. Destinations are judged by a stand-in policy (hosts under
 * refused.example are refused) so no name is ever looked up.
 */
const STORED = 'https://m.example/stored';

describe.each(BACKENDS)('submitBatch on %s', (kind) => {
  let database: Database;
  let ids: number;
  let ended: string[];

  beforeEach(async () => {
    database = await openTestDatabase(kind);
    ids = 0;
    ended = [];
    await recordCacheEntry(database, wavEntry('cid-stored'), 1);
    await setAlias(database, 'url', STORED, 'cid-stored', 1);
  });
  afterEach(async () => {
    await database.close();
  });

  function service(maxQueuedJobs = 100): JobService {
    return createJobService({
      database,
      now: () => 1000 + ids,
      newJobId: () => `job-${++ids}`,
      recordCallback: callbackRecorder(() => `delivery-${ids}`),
      checkDestination: (url) => {
        if (url.hostname.endsWith('refused.example')) {
          return Promise.reject(
            new ServiceError(
              'refused',
              'address_private',
              `Host ${url.hostname} resolves to 10.0.0.1, which is in the private range.`,
              { fields: { host: url.hostname } },
            ),
          );
        }
        return Promise.resolve();
      },
      contentPresent: () => true,
      admitJob: createAdmission({ database, maxQueuedJobs, confinementOk: () => true }),
      playlistMaxItems: 500,
      // Marked when the job may have a callback to send: the delivery worker is woken for those only.
      onEnded: (e, mayHaveCallback) => ended.push(mayHaveCallback ? `${e.job.id} with callback` : e.job.id),
    });
  }

  const summary = (items: BatchItem[]) =>
    items.map((item) =>
      'job' in item
        ? { url: item.url, status: item.job.status, bornDone: item.job.bornDone, follows: item.job.followsJobId }
        : { url: item.url, code: item.refusal.code },
    );

  it('gives each URL its job or its refusal, in order: one leader for a URL given twice, born done for a stored one', async () => {
    const urls = [
      'https://m.example/a',
      'ftp://m.example/a',
      'https://m.example/a',
      STORED,
      'https://x.refused.example/b',
      'https://m.example/b#part',
      'not a url',
    ];
    const items = await service().submitBatch({ urls }, 'req-1');
    const [a] = items as Array<{ job: { id: string } }>;
    expect(summary(items)).toEqual([
      { url: urls[0], status: 'queued', bornDone: false, follows: null },
      { url: urls[1], code: 'url_scheme_not_allowed' },
      { url: urls[2], status: 'queued', bornDone: false, follows: a!.job.id },
      { url: urls[3], status: 'done', bornDone: true, follows: null },
      { url: urls[4], code: 'address_private' },
      { url: urls[5], status: 'queued', bornDone: false, follows: null },
      { url: urls[6], code: 'url_invalid' },
    ]);
    // The born-done job was reported as ended, once, as having no callback.
    expect(ended).toEqual([(items[3] as { job: { id: string } }).job.id]);
    expect((await getJobRow(database, a!.job.id))?.requestId).toBe('req-1');
  });

  it('counts the queue limit URL by URL: those past it are refused with queue_full, born-done ones still accepted', async () => {
    const items = await service(2).submitBatch(
      { urls: ['https://m.example/1', 'https://m.example/2', 'https://m.example/3', STORED, 'https://m.example/4'] },
      'req-2',
    );
    expect(summary(items).map((item) => ('code' in item ? item.code : item.status))).toEqual([
      'queued',
      'queued',
      'queue_full',
      'done',
      'queue_full',
    ]);
    const refusal = (items[2] as { refusal: ServiceError }).refusal;
    expect(refusal.kind).toBe('rate_limited');
    expect(refusal.extra.retryAfterSeconds).toBeGreaterThan(0);
  });

  it('gives every accepted job the callback, and refuses the whole batch for a refused callback_url', async () => {
    const jobs = service();
    await expect(
      jobs.submitBatch({ urls: ['https://m.example/c'], callbackUrl: 'https://hooks.refused.example/x' }, 'req-3'),
    ).rejects.toMatchObject({
      code: 'address_private',
      extra: { fieldErrors: [{ path: 'callback_url', message: expect.any(String) }] },
    });
    // Nothing was made for it: the next job is the first.
    expect(await getJobRow(database, 'job-1')).toBeUndefined();

    const items = await jobs.submitBatch(
      { urls: ['https://m.example/c', 'ftp://m.example/c', STORED], callbackUrl: 'https://hooks.example/x' },
      'req-4',
    );
    const accepted = items.flatMap((item) => ('job' in item ? [item.job] : []));
    expect(accepted).toHaveLength(2);
    for (const job of accepted)
      expect(await deliveryForJob(database, job.id)).toMatchObject({
        url: 'https://hooks.example/x',
        status: 'pending',
      });
    const deliveryIds = await Promise.all(accepted.map(async (job) => (await deliveryForJob(database, job.id))!.id));
    expect(new Set(deliveryIds).size).toBe(2);
    // The born-done one ended at once, with its callback to send.
    expect(accepted[1]!.bornDone).toBe(true);
    expect(ended).toEqual([`${accepted[1]!.id} with callback`]);
  });
});
