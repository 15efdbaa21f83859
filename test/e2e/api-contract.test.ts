/**
 * One API contract: every operation is written once (src/http/operation.ts) and reached two ways,
 * node's router (src/http/node-router.ts) and the Hono app (src/http/hono-operation.ts). This
 * drives each operation through each way of asking for it against the built service and requires
 * the same status, the headers that matter and the same body whichever dispatcher answers.
 *
 * A request with `Expect: 100-continue` reaches the app (node's 'checkContinue' event, which
 * src/http/server.ts hands to the app), the same request without it reaches node's router: that
 * this is so is test/unit/http-dispatch.test.ts's control. No address off this machine is
 * contacted: the service has no workers (jobs stay queued), the URLs name a closed loopback port,
 * and the refused one stops at the policy (an IP literal in a private range).
 */
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startService, type ServiceHandle } from '../support/service.js';

interface Answer {
  status: number;
  headers: Map<string, string>;
  body: string;
}

/** Headers whose values every answer has of its own. */
const PER_ANSWER = new Set(['date', 'x-request-id', 'keep-alive', 'connection', 'content-length', 'location']);

/** One request on a fresh connection, written byte for byte; interim answers (100 Continue) skipped. */
function exchange(
  port: number,
  method: string,
  target: string,
  headers: string[],
  body?: { text: string; chunked?: boolean },
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect({ host: '127.0.0.1', port }, () => {
      const lines = [`${method} ${target} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close', ...headers];
      if (body && body.chunked) {
        const bytes = Buffer.from(body.text);
        const half = Math.floor(bytes.length / 2);
        const chunk = (part: Buffer) =>
          part.length ? `${part.length.toString(16)}\r\n${part.toString('latin1')}\r\n` : '';
        socket.write(
          Buffer.from(
            `${[...lines, 'Transfer-Encoding: chunked'].join('\r\n')}\r\n\r\n${chunk(bytes.subarray(0, half))}${chunk(bytes.subarray(half))}0\r\n\r\n`,
            'latin1',
          ),
        );
      } else if (body) {
        const bytes = Buffer.from(body.text);
        socket.write(
          Buffer.concat([
            Buffer.from(`${[...lines, `Content-Length: ${bytes.length}`].join('\r\n')}\r\n\r\n`, 'latin1'),
            bytes,
          ]),
        );
      } else {
        socket.write(`${lines.join('\r\n')}\r\n\r\n`);
      }
    });
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', (err: NodeJS.ErrnoException) =>
      err.code === 'ECONNRESET' && chunks.length ? undefined : reject(err),
    );
    socket.on('close', () => {
      let raw = Buffer.concat(chunks);
      while (/^HTTP\/1\.1 1\d\d /.test(raw.subarray(0, 13).toString('latin1')))
        raw = raw.subarray(raw.indexOf('\r\n\r\n') + 4);
      const split = raw.indexOf('\r\n\r\n');
      const head = raw.subarray(0, split).toString('latin1').split('\r\n');
      const parsed = new Map(
        head
          .slice(1)
          .map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]),
      );
      const length = Number(parsed.get('content-length') ?? raw.length - split - 4);
      resolve({
        status: Number(head[0]?.split(' ')[1]),
        headers: parsed,
        body: raw.subarray(split + 4, split + 4 + length).toString('utf8'),
      });
    });
  });
}

/** A body with what differs between any two answers (ids, times, signatures) put to one value. */
function comparableBody(text: string): unknown {
  if (text === '') return '';
  const value = JSON.parse(text) as unknown;
  const same = (key: string, item: unknown): unknown =>
    [
      'job_id',
      'request_id',
      'created_at',
      'started_at',
      'finished_at',
      'signed_url',
      'signed_url_expires_at',
      'expires_at',
      'free_bytes',
    ].includes(key)
      ? '(varies)'
      : item;
  return JSON.parse(JSON.stringify(value, same)) as unknown;
}

function comparable(answer: Answer) {
  const headers = Object.fromEntries([...answer.headers].filter(([name]) => !PER_ANSWER.has(name)));
  return {
    status: answer.status,
    headers,
    body: comparableBody(answer.body),
    location: answer.headers.get('location')?.replace(/[0-9a-f-]{36}/, '{id}'),
  };
}

const JSON_TYPE = 'Content-Type: application/json';

describe('one contract, whichever dispatcher answers', () => {
  let svc: ServiceHandle;
  let queuedId: string;
  let key: string[];

  beforeAll(async () => {
    svc = await startService({
      env: { WORKER_CONCURRENCY: '0', RATE_LIMIT_PER_MINUTE: '0', FETCH_ALLOW_HOSTS: '127.0.0.1:9' },
    });
    key = [`Authorization: Bearer ${svc.apiKey}`];
    queuedId = (await svc.submit('http://127.0.0.1:9/contract-queued.m4a')).job_id;
  });

  afterAll(async () => {
    await svc?.stop();
  });

  /** The request both ways; their answers compared; the router's answer returned. */
  async function both(
    method: string,
    target: string,
    headers: string[],
    body?: { text: string; chunked?: boolean },
  ): Promise<Answer> {
    const viaRouter = await exchange(svc.port, method, target, headers, body);
    const viaApp = await exchange(svc.port, method, target, [...headers, 'Expect: 100-continue'], body);
    expect(comparable(viaRouter), `${method} ${target} ${headers.join(' | ')}`).toEqual(comparable(viaApp));
    return viaRouter;
  }
  const code = (answer: Answer) => (JSON.parse(answer.body) as { code?: string }).code;
  let n = 0;
  /** A submission body for a URL no other case submits (so that none follows another's job). */
  const fresh = () => JSON.stringify({ url: `http://127.0.0.1:9/contract-${n++}.m4a` });

  it.each([
    ['Bearer', (): string[] => key, JSON_TYPE, false, 202, undefined],
    ['X-API-Key', (): string[] => [`X-API-Key: ${svc.apiKey}`], JSON_TYPE, false, 202, undefined],
    ['a chunked body', (): string[] => key, JSON_TYPE, true, 202, undefined],
    [
      'JSON with a charset',
      (): string[] => key,
      'Content-Type: application/json; charset=utf-8',
      false,
      202,
      undefined,
    ],
    [
      'a +json media type in capitals',
      (): string[] => key,
      'Content-Type: Application/Problem+JSON',
      false,
      202,
      undefined,
    ],
    ['text/plain', (): string[] => key, 'Content-Type: text/plain', false, 415, 'unsupported_media_type'],
    ['no Content-Type', (): string[] => key, '', false, 415, 'unsupported_media_type'],
    [
      'a wrong key',
      (): string[] => ['Authorization: Bearer wrong-key-0123456789abcdef'],
      JSON_TYPE,
      false,
      401,
      'unauthorized',
    ],
    ['no key', (): string[] => [], JSON_TYPE, false, 401, 'unauthorized'],
    ['two Authorization headers', () => [...key, ...key], JSON_TYPE, false, 401, 'unauthorized'],
  ] as const)('submitSource with %s', async (_label, keyLines, contentType, chunked, status, problem) => {
    const headers = [...keyLines(), ...(contentType ? [contentType] : [])];
    const answer = await both('POST', '/sources', headers, { text: fresh(), chunked });
    expect(answer.status).toBe(status);
    if (problem) expect(code(answer)).toBe(problem);
    else expect(answer.headers.get('location')).toMatch(/^\/jobs\/[0-9a-f-]{36}$/);
  });

  it.each([
    ['bad JSON', '{"url": ', false, 400, 'invalid_json'],
    ['bad JSON, chunked', '{"url": ', true, 400, 'invalid_json'],
    ['a body that is not a submission', '{"uri": "http://127.0.0.1:9/x.m4a"}', false, 400, 'validation_failed'],
    ['a URL that is not http(s)', '{"url": "file:///etc/passwd"}', false, 400, undefined],
    ['a URL the policy refuses', '{"url": "http://10.1.2.3/x.m4a"}', false, 422, undefined],
    [
      'a body over the limit',
      JSON.stringify({ url: `http://127.0.0.1:9/${'a'.repeat(9000)}.m4a` }),
      false,
      413,
      'body_too_large',
    ],
    [
      'a body over the limit, chunked',
      JSON.stringify({ url: `http://127.0.0.1:9/${'a'.repeat(9000)}.m4a` }),
      true,
      413,
      'body_too_large',
    ],
  ] as const)('submitSource with %s', async (_label, text, chunked, status, problem) => {
    const answer = await both('POST', '/sources', [...key, JSON_TYPE], { text, chunked });
    expect(answer.status).toBe(status);
    expect(answer.headers.get('content-type')).toBe('application/problem+json');
    if (problem) expect(code(answer)).toBe(problem);
  });

  it('submitSource with a query string, and a trailing slash (no such route)', async () => {
    expect((await both('POST', '/sources?via=anything', [...key, JSON_TYPE], { text: fresh() })).status).toBe(202);
    const slash = await both('POST', '/sources/', [...key, JSON_TYPE], { text: fresh() });
    expect([slash.status, code(slash)]).toEqual([404, 'route_not_found']);
  });

  it('submitSourceBatch, accepted and refused items, and its body rules', async () => {
    const batch = JSON.stringify({ urls: ['http://127.0.0.1:9/contract-batch-a.m4a', 'http://10.1.2.3/refused.m4a'] });
    const answer = await both('POST', '/sources/batch', [...key, JSON_TYPE], { text: batch });
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body)).toMatchObject({ accepted: 1, refused: 1 });
    expect(
      code(await both('POST', '/sources/batch', [...key, JSON_TYPE], { text: '{"urls": []}', chunked: true })),
    ).toBe('validation_failed');
    expect(
      code(
        await both('POST', '/sources/batch', [`X-API-Key: ${svc.apiKey}`, 'Content-Type: text/plain'], { text: batch }),
      ),
    ).toBe('unsupported_media_type');
    expect(code(await both('POST', '/sources/batch', [JSON_TYPE], { text: batch }))).toBe('unauthorized');
  });

  it.each([
    ['GET with Bearer', 'GET', (): string => `/jobs/${queuedId}`, (): string[] => key, 200, undefined],
    [
      'GET with X-API-Key',
      'GET',
      (): string => `/jobs/${queuedId}`,
      (): string[] => [`X-API-Key: ${svc.apiKey}`],
      200,
      undefined,
    ],
    ['HEAD', 'HEAD', (): string => `/jobs/${queuedId}`, (): string[] => key, 200, undefined],
    ['a query string', 'GET', (): string => `/jobs/${queuedId}?fields=all`, (): string[] => key, 200, undefined],
    ['a trailing slash', 'GET', (): string => `/jobs/${queuedId}/`, (): string[] => key, 404, 'route_not_found'],
    [
      'no such job',
      'GET',
      (): string => '/jobs/00000000-0000-4000-8000-000000000000',
      (): string[] => key,
      404,
      'job_not_found',
    ],
    [
      'an id that cannot be one',
      'GET',
      (): string => `/jobs/${'x'.repeat(300)}`,
      (): string[] => key,
      400,
      'validation_failed',
    ],
    [
      'a percent-encoded id',
      'GET',
      (): string => `/jobs/${encodeURIComponent(queuedId).replace('-', '%2D')}`,
      (): string[] => key,
      200,
      undefined,
    ],
    [
      'a wrong key',
      'GET',
      (): string => `/jobs/${queuedId}`,
      (): string[] => ['X-API-Key: wrong-key-0123456789abcdef'],
      401,
      'unauthorized',
    ],
    ['no key', 'HEAD', (): string => `/jobs/${queuedId}`, (): string[] => [], 401, undefined],
  ] as const)('getJob: %s', async (_label, method, target, keyLines, status, problem) => {
    const answer = await both(method, target(), keyLines());
    expect(answer.status).toBe(status);
    if (method === 'HEAD') {
      expect(answer.body).toBe('');
      expect(Number(answer.headers.get('content-length'))).toBeGreaterThan(0);
    } else if (problem) expect(code(answer)).toBe(problem);
    else expect(JSON.parse(answer.body)).toMatchObject({ job_id: queuedId, status: 'queued' });
  });

  it('cancelJob: a queued job, the same again, no such job, no key', async () => {
    const id = (await svc.submit('http://127.0.0.1:9/contract-cancel.m4a')).job_id;
    const viaRouter = await exchange(svc.port, 'POST', `/jobs/${id}/cancel`, key);
    // Canceled before: the same answer, now from the app.
    const viaApp = await exchange(svc.port, 'POST', `/jobs/${id}/cancel`, [...key, 'Expect: 100-continue']);
    expect(viaRouter.status).toBe(200);
    expect(comparable(viaApp)).toEqual(comparable(viaRouter));
    expect(JSON.parse(viaApp.body)).toMatchObject({ job_id: id, status: 'canceled' });
    expect(code(await both('POST', '/jobs/00000000-0000-4000-8000-000000000000/cancel', key))).toBe('job_not_found');
    expect(code(await both('POST', `/jobs/${id}/cancel`, []))).toBe('unauthorized');
  });

  it('getArtifact: no such content, a malformed id, no credential, a wrong key', async () => {
    const missing = `/artifacts/${'e'.repeat(64)}/audio.wav`;
    expect(code(await both('GET', missing, key))).toBe('artifact_not_found');
    expect((await both('HEAD', missing, key)).status).toBe(404);
    expect((await both('GET', '/artifacts/not-a-content-id/audio.wav', key)).status).toBe(400);
    expect(code(await both('GET', missing, []))).toBe('unauthorized');
    expect(code(await both('GET', missing, ['Authorization: Bearer wrong-key-0123456789abcdef']))).toBe('unauthorized');
  });

  it("getWebhookSecret: the key's secrets, not to be stored; no key", async () => {
    const answer = await both('GET', '/webhook-secret', key);
    expect(answer.status).toBe(200);
    expect(answer.headers.get('cache-control')).toBe('no-store');
    expect(JSON.parse(answer.body)).toEqual({ secrets: [expect.stringMatching(/^whsec_[A-Za-z0-9+/]{43}=$/)] });
    expect(code(await both('GET', '/webhook-secret', []))).toBe('unauthorized');
  });

  it('getHealth: open, not to be stored, and its head for HEAD', async () => {
    const answer = await both('GET', '/healthz', []);
    expect([200, 503]).toContain(answer.status);
    expect(answer.headers.get('cache-control')).toBe('no-store');
    expect(JSON.parse(answer.body)).toMatchObject({ can_fetch: answer.status === 200 });
    const head = await both('HEAD', '/healthz', []);
    expect([head.status, head.body]).toEqual([answer.status, '']);
  });

  it('getMetrics: the exposition format with the key; no key', async () => {
    const viaRouter = await exchange(svc.port, 'GET', '/metrics', key);
    const viaApp = await exchange(svc.port, 'GET', '/metrics', [...key, 'Expect: 100-continue']);
    expect([viaRouter.status, viaApp.status]).toEqual([200, 200]);
    expect(viaRouter.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(viaApp.headers.get('content-type')).toBe(viaRouter.headers.get('content-type'));
    expect(viaRouter.body).toMatch(/^# HELP source_fetch_/m);
    expect(code(await both('GET', '/metrics', []))).toBe('unauthorized');
  });

  it('scrubStore and getStoreScrub: a wait out of range, no key', async () => {
    for (const method of ['POST', 'GET']) {
      const answer = await both(method, '/store/scrub?wait_s=51', key);
      expect([answer.status, code(answer)]).toEqual([400, 'validation_failed']);
      expect(JSON.parse(answer.body)).toMatchObject({ errors: [{ path: 'wait_s' }] });
      expect(code(await both(method, '/store/scrub?wait_s=51', []))).toBe('unauthorized');
    }
  });

  it('leaves one access-log line of the same shape, and the same route, whichever dispatcher answers', async () => {
    const lines = (id: string) => svc.logs.filter((line) => line.msg === 'request' && line.request_id === id);
    await exchange(svc.port, 'GET', `/jobs/${queuedId}`, [...key, 'X-Request-Id: contract-router']);
    await exchange(svc.port, 'GET', `/jobs/${queuedId}`, [
      ...key,
      'X-Request-Id: contract-app',
      'Expect: 100-continue',
    ]);
    await expect.poll(() => lines('contract-router').length + lines('contract-app').length).toBe(2);
    const [viaRouter] = lines('contract-router');
    const [viaApp] = lines('contract-app');
    expect(viaRouter).toMatchObject({ route: '/jobs/{id}', status: 200, job_id: queuedId });
    const shape = (line: Record<string, unknown>) =>
      Object.keys(line)
        .filter((name) => name !== 'time')
        .sort();
    expect(shape(viaRouter!)).toEqual(shape(viaApp!));
  });
});

describe('one rate limit, whichever dispatcher answers', () => {
  const BURST = 8;
  let svc: ServiceHandle;

  beforeAll(async () => {
    // One token a minute: the burst is all a key has during the test.
    svc = await startService({
      env: {
        WORKER_CONCURRENCY: '0',
        RATE_LIMIT_PER_MINUTE: '1',
        RATE_LIMIT_BURST: String(BURST),
        FETCH_ALLOW_HOSTS: '127.0.0.1:9',
      },
    });
  });

  afterAll(async () => {
    await svc?.stop();
  });

  it('counts every keyed request once, by either dispatcher and for every operation, and refuses alike once spent', async () => {
    const key = `X-API-Key: ${svc.apiKey}`;
    const asks = [
      (expect100: string[]) =>
        exchange(svc.port, 'POST', '/sources', [key, JSON_TYPE, ...expect100], {
          text: JSON.stringify({ url: 'http://127.0.0.1:9/rate.m4a' }),
        }),
      (expect100: string[]) =>
        exchange(svc.port, 'POST', '/sources', [key, JSON_TYPE, ...expect100], { text: '{"url": ' }),
      (expect100: string[]) =>
        exchange(svc.port, 'GET', '/jobs/00000000-0000-4000-8000-000000000000', [key, ...expect100]),
      (expect100: string[]) => exchange(svc.port, 'GET', `/artifacts/${'e'.repeat(64)}/audio.wav`, [key, ...expect100]),
    ];
    const statuses: number[] = [];
    for (let i = 0; i < BURST; i++)
      statuses.push((await asks[i % asks.length]!(i % 2 ? ['Expect: 100-continue'] : [])).status);
    expect(statuses).toEqual([202, 400, 404, 404, 202, 400, 404, 404]);
    for (const ask of asks) {
      const viaRouter = await ask([]);
      const viaApp = await ask(['Expect: 100-continue']);
      expect([viaRouter.status, viaApp.status]).toEqual([429, 429]);
      expect(comparable(viaRouter)).toEqual(comparable(viaApp));
      expect(viaRouter.headers.get('retry-after')).toMatch(/^\d+$/);
    }
    // The health check is never counted.
    expect((await exchange(svc.port, 'GET', '/healthz', [key])).status).not.toBe(429);
  });
});
