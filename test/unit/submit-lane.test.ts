/**
 * The submit lane (src/http/submit-lane.ts) in front of a stand-in app, in a real node HTTP server
 * with the request envelope: which submissions it answers itself, which it hands to the app (and
 * whether it read their body first), and what it leaves in the access log. The service's own lane
 * is compared with its app in test/e2e/submit-lane.test.ts.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/errors.js';
import { createKeyChecker } from '../../src/http/api-key.js';
import type { JobRecord } from '../../src/http/schemas.js';
import { createSubmitLane } from '../../src/http/submit-lane.js';
import type { JobView, Submission } from '../../src/jobs/job-service.js';
import { jobKeyIdentity } from '../../src/jobs/key-identity.js';
import { startLaneServer, type LaneServer } from '../support/lane-server.js';

const KEY = 'submit-lane-test-key';
const viewOf = (id: string, url: string) => ({ job: { id, url, status: 'done', bornDone: true }, artifacts: [] }) as unknown as JobView;
const recordOf = (view: JobView) => ({ job_id: view.job.id, status: view.job.status, url: view.job.url }) as unknown as JobRecord;

describe('the submit lane in front of the app', () => {
  let lanes: LaneServer;
  /** Requests the stand-in app answered, with whether their body had been read before. */
  const handedOver: Array<{ url: string; bodyRead: boolean }> = [];
  const submitted: Array<{ input: Submission; requestId: string }> = [];
  let refusal: Error | undefined;

  beforeAll(async () => {
    let ids = 0;
    lanes = await startLaneServer(
      (log) =>
        createSubmitLane({
          checkKey: createKeyChecker([KEY]),
          submit: async (input, requestId) => {
            submitted.push({ input, requestId });
            if (refusal) throw refusal;
            return viewOf(`job-${++ids}`, input.url);
          },
          render: recordOf,
          log,
        }),
      (req, res) => {
        handedOver.push({ url: req.url ?? '', bodyRead: req.readableEnded });
        res.writeHead(299, { 'content-length': '0', connection: 'close' }).end();
      },
    );
  });

  afterAll(() => {
    lanes?.close();
  });

  beforeEach(() => {
    handedOver.length = 0;
    submitted.length = 0;
    refusal = undefined;
  });

  const json = 'Content-Type: application/json';
  const keyed = `Authorization: Bearer ${KEY}`;

  /** A POST with the header lines given as written and a body (its Content-Length added); the answer and its access-log line. */
  const send = (target: string, body: string, headerLines: string[] = [keyed, json]) =>
    lanes.send('POST', target, [...headerLines, ...(body === '' ? [] : [`Content-Length: ${Buffer.byteLength(body)}`])], body);

  it('answers a keyed JSON submission itself: 202, the record, Location, and the access line', async () => {
    const res = await send('/sources', JSON.stringify({ url: 'https://media.example/a', callback_url: 'https://hooks.example/x' }), [keyed, json, 'X-Request-Id: lane-1']);
    expect(res.status).toBe(202);
    expect(JSON.parse(res.text)).toEqual({ job_id: 'job-1', status: 'done', url: 'https://media.example/a' });
    expect(res.headers.get('location')).toBe('/jobs/job-1');
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(res.headers.get('x-route-template')).toBe('/sources');
    // With the identity of the key (never the key), which the job records.
    expect(submitted).toEqual([{ input: { url: 'https://media.example/a', callbackUrl: 'https://hooks.example/x', apiKeyId: jobKeyIdentity(KEY) }, requestId: 'lane-1' }]);
    expect(res.line).toMatchObject({ msg: 'request', request_id: 'lane-1', route: '/sources', status: 202, job_id: 'job-1', job_status: 'done', born_done: true, callback: true });
    expect(handedOver).toEqual([]);
  });

  it("answers a refused submission with the app's problem document", async () => {
    refusal = new ServiceError('rate_limited', 'queue_full', 'The queue is full.', { retryAfterSeconds: 7 });
    const res = await send('/sources', JSON.stringify({ url: 'https://media.example/b' }));
    expect(res.status).toBe(429);
    expect(res.headers.get('content-type')).toBe('application/problem+json');
    expect(res.headers.get('retry-after')).toBe('7');
    expect(JSON.parse(res.text)).toMatchObject({ code: 'queue_full', status: 429, request_id: res.headers.get('x-request-id') });
    expect(handedOver).toEqual([]);
  });

  it.each([
    ['no key', '/sources', JSON.stringify({ url: 'https://media.example/a' }), [json]],
    ['a wrong key', '/sources', JSON.stringify({ url: 'https://media.example/a' }), ['Authorization: Bearer not-the-key', json]],
    ['Authorization twice', '/sources', JSON.stringify({ url: 'https://media.example/a' }), [keyed, 'Authorization: Bearer other', json]],
    ['a query string', '/sources?x=1', JSON.stringify({ url: 'https://media.example/a' }), undefined],
    ['the batch route', '/sources/batch', JSON.stringify({ urls: ['https://media.example/a'] }), undefined],
    ['a body not declared JSON', '/sources', JSON.stringify({ url: 'https://media.example/a' }), [keyed, 'Content-Type: text/plain']],
    ['no body', '/sources', '', undefined],
    ['a body over 8 KiB', '/sources', JSON.stringify({ url: `https://media.example/${'a'.repeat(9000)}` }), undefined],
  ] as const)('hands a request with %s to the app, its body unread', async (_label, target, body, headerLines) => {
    const res = await send(target, body, headerLines ? [...headerLines] : undefined);
    expect(res.status).toBe(299);
    expect(handedOver).toEqual([{ url: target, bodyRead: false }]);
    expect(submitted).toEqual([]);
  });

  it.each([
    ['not JSON', '{"url": '],
    ['not a submission', JSON.stringify({ url: 5 })],
    ['a member the app does not take', JSON.stringify({ url: 'https://media.example/a', extra: true })],
  ])('hands a body that is %s to the app once read, so the app answers its 400', async (_label, body) => {
    const res = await send('/sources', body);
    expect(res.status).toBe(299);
    expect(handedOver).toEqual([{ url: '/sources', bodyRead: true }]);
    expect(submitted).toEqual([]);
  });

  it('leaves the route of a request it handed over for the app to name', async () => {
    const res = await send('/sources', '{"url": ');
    expect(res.line).toMatchObject({ route: 'unmatched', status: 299 });
  });
});
