/**
 * One Content-Type rule for every path that takes a submission (src/http/media-type.ts), against
 * the real service and a real nginx in front of it on loopback: POST /sources with a
 * Content-Length, with a query, with a chunked body, a batch, and through nginx. Each Content-Type gets the same answer on every path: accepted, or 415
 * `unsupported_media_type`. And a batch's items say what a submission of the same URL alone says.
 */
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApiBehindNginx, type ApiBehindNginx } from '../support/api-behind-nginx.js';
import type { RunningNginx } from '../support/nginx.js';
import type { ServiceHandle } from '../support/service.js';

let front: ApiBehindNginx;
let svc: ServiceHandle;
let nginx: RunningNginx;

beforeAll(async () => {
  front = await startApiBehindNginx();
  ({ svc, nginx } = front);
});

afterAll(() => front?.stop());

interface Answer {
  status: number;
  contentType: string | undefined;
  body: Record<string, unknown>;
}

/** A keyed POST with exactly this Content-Type (none when undefined); chunked when asked. */
function post(
  port: number,
  target: string,
  contentType: string | undefined,
  body: string,
  chunked = false,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { authorization: `Bearer ${svc.apiKey}` };
    if (contentType !== undefined) headers['content-type'] = contentType;
    if (!chunked) headers['content-length'] = Buffer.byteLength(body);
    const req = httpRequest({ host: '127.0.0.1', port, method: 'POST', path: target, headers, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
      res.on('end', () =>
        resolve({
          status: res.statusCode!,
          contentType: res.headers['content-type'],
          body: JSON.parse(text) as Record<string, unknown>,
        }),
      );
    });
    req.on('error', reject);
    req.end(body);
  });
}

let urls = 0;
const freshUrl = () => `http://127.0.0.1:9/content-type-${++urls}.m4a`;

/** The outcome of one Content-Type on every path: status and code (null when accepted). */
async function outcomes(contentType: string | undefined): Promise<Record<string, [number, unknown]>> {
  const single = () => JSON.stringify({ url: freshUrl() });
  const answers: Record<string, Answer> = {
    sized: await post(svc.port, '/sources', contentType, single()),
    'with a query': await post(svc.port, '/sources?via=query', contentType, single()),
    chunked: await post(svc.port, '/sources', contentType, single(), true),
    nginx: await post(nginx.port, '/sources', contentType, single()),
    batch: await post(svc.port, '/sources/batch', contentType, JSON.stringify({ urls: [freshUrl()] })),
  };
  for (const answer of Object.values(answers)) {
    if (answer.status >= 400) expect(answer.contentType).toBe('application/problem+json');
  }
  return Object.fromEntries(
    Object.entries(answers).map(([name, answer]) => [name, [answer.status, answer.body.code ?? null]]),
  );
}

const ACCEPTED = {
  sized: [202, null],
  'with a query': [202, null],
  chunked: [202, null],
  nginx: [202, null],
  batch: [200, null],
};
const REFUSED = {
  sized: [415, 'unsupported_media_type'],
  'with a query': [415, 'unsupported_media_type'],
  chunked: [415, 'unsupported_media_type'],
  nginx: [415, 'unsupported_media_type'],
  batch: [415, 'unsupported_media_type'],
};

describe('one Content-Type rule', () => {
  it.each([
    'application/json',
    'application/json; charset=utf-8',
    'application/json;',
    'application/json ;',
    'application/json; charset',
    'application/vnd.x+json',
    'application/vnd.api_v2+json',
    'APPLICATION/JSON',
  ])('%j: accepted on every path', async (contentType) => {
    expect(await outcomes(contentType)).toEqual(ACCEPTED);
  });

  it.each([
    undefined,
    'text/plain',
    'text/json',
    'application/json-seq',
    'application/x-www-form-urlencoded',
    'application/ json',
  ])('%j: 415 unsupported_media_type on every path', async (contentType) => {
    expect(await outcomes(contentType)).toEqual(REFUSED);
  });
});

describe("a batch's items say what a submission alone says", () => {
  const base = 'http://127.0.0.1:9/long?pad=';
  const ofLength = (length: number) => base + 'a'.repeat(length - base.length);

  it.each([
    ['2048 characters, the longest taken (the control)', 2048, [202, null]],
    ['2049 characters', 2049, [400, 'url_too_long']],
    ['4000 characters', 4000, [400, 'url_too_long']],
  ] as Array<[string, number, [number, string | null]]>)('a URL of %s', async (_label, length, [status, code]) => {
    const url = ofLength(length);
    const body = JSON.stringify({ url });
    const single = await post(svc.port, '/sources', 'application/json', body);
    const app = await post(svc.port, '/sources?via=app', 'application/json', body);
    const batch = await post(svc.port, '/sources/batch', 'application/json', JSON.stringify({ urls: [url] }));
    expect([single.status, single.body.code ?? null]).toEqual([status, code]);
    expect([app.status, app.body.code ?? null]).toEqual([status, code]);
    expect(batch.status).toBe(200);
    const [item] = batch.body.results as Array<{
      outcome: string;
      problem?: { status: number; code: string; detail: string };
    }>;
    if (code === null) {
      expect(item!.outcome).toBe('accepted');
    } else {
      expect(item!.outcome).toBe('refused');
      expect({ status: item!.problem!.status, code: item!.problem!.code, detail: item!.problem!.detail }).toEqual({
        status,
        code,
        detail: single.body.detail,
      });
    }
  });
});
