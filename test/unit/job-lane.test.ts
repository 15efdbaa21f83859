/**
 * The job lane (src/http/job-lane.ts) in front of a stand-in app, in a real node HTTP server with
 * the request envelope: which requests it answers itself, which it hands to the app, and what it
 * leaves in the access log and the rate limit. The service's own lane is compared with its app in
 * test/e2e/job-lane.test.ts.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/errors.js';
import { createKeyChecker } from '../../src/http/api-key.js';
import { createJobLane } from '../../src/http/job-lane.js';
import { createTokenBucketLimiter } from '../../src/http/middleware/rate-limit.js';
import { requestFacts } from '../../src/http/request-envelope.js';
import type { JobRecord } from '../../src/http/schemas.js';
import { startLaneServer, type LaneServer } from '../support/lane-server.js';

const KEY = 'job-lane-test-key';
const BURST = 3;

const recordOf = (id: string) => ({ job_id: id, status: 'queued', url: 'https://media.example/a' }) as unknown as JobRecord;

describe('the job lane in front of the app', () => {
  let lanes: LaneServer;
  let logLines: Array<Record<string, unknown>>;
  /** Requests the stand-in app answered, with whether the lane had counted them against the rate limit. */
  const handedOver: Array<{ url: string; rateCounted: boolean }> = [];
  const reads: string[] = [];
  let clockMs = 0;
  let failRead: Error | undefined;

  beforeAll(async () => {
    lanes = await startLaneServer(
      (log) =>
        createJobLane({
          checkKey: createKeyChecker([KEY]),
          rateLimiter: createTokenBucketLimiter({ perMinute: 1, burst: BURST, now: () => clockMs }),
          readJob: async (id) => {
            reads.push(id);
            if (failRead) throw failRead;
            if (id === 'missing') throw new ServiceError('not_found', 'job_not_found', 'No job has this id.');
            return recordOf(id);
          },
          log,
        }),
      (req, res) => {
        handedOver.push({ url: req.url ?? '', rateCounted: requestFacts(req)?.rateCounted === true });
        res.writeHead(299, { 'content-length': '0' }).end();
      },
    );
    logLines = lanes.logLines;
  });

  afterAll(() => {
    lanes?.close();
  });

  beforeEach(() => {
    handedOver.length = 0;
    reads.length = 0;
    failRead = undefined;
    // A new minute's worth of tokens for every test: the bucket refills at one a minute.
    clockMs += 10 * 60_000;
  });

  /** One request with the header lines given as written (repeats allowed); the answer and its access-log line. */
  const send = (method: string, target: string, headerLines: string[] = [`Authorization: Bearer ${KEY}`]) => lanes.send(method, target, headerLines);

  it('answers a keyed GET of a job itself: the record as JSON, its route and job in the access log', async () => {
    for (const header of [`Authorization: Bearer ${KEY}`, `X-API-Key: ${KEY}`]) {
      const res = await send('GET', '/jobs/c5b2b0d4-2f5e-4c43-9a3e-5f2d1b8f2a11', [header, 'X-Request-Id: lane-1']);
      expect(res.status).toBe(200);
      expect(JSON.parse(res.text)).toEqual(recordOf('c5b2b0d4-2f5e-4c43-9a3e-5f2d1b8f2a11'));
      expect(res.headers.get('content-type')).toBe('application/json');
      expect(res.headers.get('content-length')).toBe(String(res.body.length));
      expect(res.headers.get('x-route-template')).toBe('/jobs/{id}');
      expect(res.headers.get('x-request-id')).toBe('lane-1');
      expect(res.line).toMatchObject({ msg: 'request', request_id: 'lane-1', route: '/jobs/{id}', status: 200, job_id: 'c5b2b0d4-2f5e-4c43-9a3e-5f2d1b8f2a11' });
    }
    expect(handedOver).toEqual([]);
  });

  it.each([
    ['no key', 'GET', '/jobs/job-1', []],
    ['a wrong key', 'GET', '/jobs/job-1', ['Authorization: Bearer not-the-key']],
    ['an empty X-API-Key', 'GET', '/jobs/job-1', ['X-API-Key: ']],
    ['Authorization twice, the first one valid', 'GET', '/jobs/job-1', [`Authorization: Bearer ${KEY}`, 'Authorization: Bearer other']],
    ['HEAD', 'HEAD', '/jobs/job-1', undefined],
    ['POST (cancel)', 'POST', '/jobs/job-1/cancel', undefined],
    ['a query string', 'GET', '/jobs/job-1?x=1', undefined],
    ['an encoded id', 'GET', '/jobs/job%2D1', undefined],
    ['an id over 64 characters', 'GET', `/jobs/${'a'.repeat(65)}`, undefined],
    ['the event stream', 'GET', '/jobs/job-1/events', undefined],
    ['another route', 'GET', '/healthz', undefined],
  ] as const)('hands a request with %s to the app, unread', async (_label, method, target, headerLines) => {
    const res = await send(method, target, headerLines ? [...headerLines] : undefined);
    expect(res.status).toBe(299);
    expect(handedOver).toEqual([{ url: target, rateCounted: false }]);
    expect(reads).toEqual([]);
  });

  it('hands over a job it cannot read (no such job, a failing database) with the request counted', async () => {
    const missing = await send('GET', '/jobs/missing');
    expect(missing.status).toBe(299);
    failRead = new Error('database unavailable');
    const failing = await send('GET', '/jobs/job-2');
    expect(failing.status).toBe(299);
    expect(reads).toEqual(['missing', 'job-2']);
    expect(handedOver).toEqual([
      { url: '/jobs/missing', rateCounted: true },
      { url: '/jobs/job-2', rateCounted: true },
    ]);
    expect(logLines.some((line) => line.msg === 'the job lane could not read a job: the app answers')).toBe(true);
  });

  it("takes one token per request, and leaves a request its key's bucket refuses to the app, uncounted", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < BURST + 1; i++) statuses.push((await send('GET', `/jobs/job-${i}`)).status);
    expect(statuses).toEqual([...Array(BURST).fill(200), 299]);
    expect(handedOver).toEqual([{ url: `/jobs/job-${BURST}`, rateCounted: false }]);
    expect(reads).toEqual(Array.from({ length: BURST }, (_, i) => `job-${i}`));
  });
});
