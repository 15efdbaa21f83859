import { request as httpRequest, Agent, type IncomingMessage } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeOfflineTools } from '../support/offline-tools.js';
import { openRawConnection, type RawConnection, type RawMessage } from '../support/raw-http.js';
import { startService, type ServiceHandle } from '../support/service.js';

/**
 * The connection around a request body the service does not read (an early 413 or 401), over raw
 * sockets on loopback against the real service: such answers say `Connection: close` and the
 * server closes, so a keep-alive client never sends its next request into a connection that is
 * about to be torn down; `Expect: 100-continue` gets no 100 for a body declared too large.
 * Stand-in tools (no job here may reach a network), and 127.0.0.1:9 allowed so that a well-formed
 * submission is accepted.
 */
const LIMIT = 8 * 1024;
const ACCEPTED_URL = 'http://127.0.0.1:9/connection.m4a';

let svc: ServiceHandle;
let toolsDir: string;
const open: RawConnection[] = [];

beforeAll(async () => {
  toolsDir = await mkdtemp(path.join(tmpdir(), 'http-connection-tools-'));
  const tools = await writeOfflineTools(toolsDir);
  svc = await startService({ env: { ...tools.env, FETCH_ALLOW_HOSTS: '127.0.0.1:9' } });
});
afterAll(async () => {
  for (const conn of open) conn.close();
  await svc?.stop();
  if (toolsDir) await rm(toolsDir, { recursive: true, force: true });
});

async function connection(): Promise<RawConnection> {
  const conn = await openRawConnection(svc.port);
  open.push(conn);
  return conn;
}

function head(method: string, target: string, headers: Record<string, string | number>): string {
  const lines = [
    `${method} ${target} HTTP/1.1`,
    'Host: 127.0.0.1',
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ];
  return `${lines.join('\r\n')}\r\n\r\n`;
}

const keyed = () => ({ Authorization: `Bearer ${svc.apiKey}` });
const jsonBody = (url: string, size?: number) => {
  const json = JSON.stringify({ url });
  return Buffer.from(size === undefined ? json : json.slice(0, -1) + ' '.repeat(size - Buffer.byteLength(json)) + '}');
};

function chunked(body: Buffer, chunkBytes = 4096): Buffer {
  const parts: Buffer[] = [];
  for (let pos = 0; pos < body.length; pos += chunkBytes) {
    const chunk = body.subarray(pos, pos + chunkBytes);
    parts.push(Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n'));
  }
  parts.push(Buffer.from('0\r\n\r\n'));
  return Buffer.concat(parts);
}

function expectProblem(message: RawMessage, status: number, code: string): void {
  expect(message.status).toBe(status);
  expect(message.headers.get('content-type')).toBe('application/problem+json');
  expect(JSON.parse(message.body.toString('utf8'))).toMatchObject({ status, code });
}

/** A keep-alive GET /healthz on the same connection answers 200 and leaves it open. */
async function expectConnectionReusable(conn: RawConnection): Promise<void> {
  conn.write(head('GET', '/healthz', {}));
  const next = await conn.readMessage();
  expect(next.status).toBe(200);
  expect(next.headers.get('connection')).toBe('keep-alive');
}

describe('a request body it reads', () => {
  const accented = `${ACCEPTED_URL}?t=\u00e9\u266b`;
  it.each([
    [
      'with a byte order mark, in 3-byte chunks',
      Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), jsonBody(accented)]),
      3,
      new URL(accented).href,
    ],
    ['of exactly the limit, in 1000-byte chunks', jsonBody(ACCEPTED_URL, LIMIT), 1000, ACCEPTED_URL],
  ])(
    '%s: read whole, as the web Request reads text (UTF-8 split across chunks, BOM dropped)',
    async (_name, body, chunkBytes, url) => {
      const conn = await connection();
      conn.write(
        head('POST', '/sources', { ...keyed(), 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' }),
      );
      conn.write(chunked(body, chunkBytes));
      const accepted = await conn.readMessage();
      expect(accepted.status).toBe(202);
      expect((JSON.parse(accepted.body.toString('utf8')) as { url: string }).url).toBe(url);
      await expectConnectionReusable(conn);
    },
  );

  it('that is not JSON: 400 invalid_json, and the connection stays usable', async () => {
    const conn = await connection();
    const body = Buffer.from('{"url": ');
    conn.write(
      head('POST', '/sources', { ...keyed(), 'Content-Type': 'application/json', 'Content-Length': body.length }),
    );
    conn.write(body);
    expectProblem(await conn.readMessage(), 400, 'invalid_json');
    await expectConnectionReusable(conn);
  });
});

describe('a request body the service does not read', () => {
  it('control: a body it reads to the end keeps the connection, and the next request on it is answered', async () => {
    const conn = await connection();
    const body = jsonBody(ACCEPTED_URL);
    conn.write(
      head('POST', '/sources', { ...keyed(), 'Content-Type': 'application/json', 'Content-Length': body.length }),
    );
    conn.write(body);
    const accepted = await conn.readMessage();
    expect(accepted.status).toBe(202);
    expect(accepted.headers.get('connection')).toBe('keep-alive');
    await expectConnectionReusable(conn);
  });

  it.each([
    ['Content-Length one byte over the limit', false, LIMIT + 1],
    ['Content-Length of 1 MiB', false, 1024 * 1024],
    ['a chunked body one byte over the limit', true, LIMIT + 1],
    ['a chunked body of 1 MiB', true, 1024 * 1024],
  ])('%s: 413 problem+json with Connection: close, then the server closes', async (_name, isChunked, size) => {
    const conn = await connection();
    const body = jsonBody(ACCEPTED_URL, size);
    const framing: Record<string, string | number> = isChunked
      ? { 'Transfer-Encoding': 'chunked' }
      : { 'Content-Length': body.length };
    conn.write(head('POST', '/sources', { ...keyed(), 'Content-Type': 'application/json', ...framing }));
    conn.write(isChunked ? chunked(body) : body);
    const answer = await conn.readMessage();
    expectProblem(answer, 413, 'body_too_large');
    expect(answer.headers.get('connection')).toBe('close');
    await conn.closedByServer;
    // A new connection is served as usual.
    await expectConnectionReusable(await connection());
  });

  it('eight 4 MiB bodies at a time, ten times over: every connection gets its 413 before the close', async () => {
    // Closing a socket with request bytes unread makes the kernel reset it, which can discard the
    // answer not yet sent: without the lingering close, some of these (about 3 in 100) lose it.
    const body = jsonBody(ACCEPTED_URL, 4 * 1024 * 1024);
    const framed = {
      length: head('POST', '/sources', {
        ...keyed(),
        'Content-Type': 'application/json',
        'Content-Length': body.length,
      }),
      chunked: head('POST', '/sources', {
        ...keyed(),
        'Content-Type': 'application/json',
        'Transfer-Encoding': 'chunked',
      }),
    };
    const chunkedBody = chunked(body, 64 * 1024);
    const outcomes: string[] = [];
    for (let round = 0; round < 10; round++) {
      const isChunked = round % 2 === 1;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          const conn = await connection();
          conn.write(isChunked ? framed.chunked : framed.length);
          conn.write(isChunked ? chunkedBody : body);
          try {
            const answer = await conn.readMessage();
            outcomes.push(`${answer.status} ${answer.headers.get('connection')}`);
          } catch (err) {
            outcomes.push((err as Error).message.slice(0, 60));
          }
          await conn.closedByServer;
        }),
      );
    }
    expect(outcomes.filter((outcome) => outcome !== '413 close')).toEqual([]);
    expect(outcomes.length).toBe(80);
  });

  it('an unauthenticated body is refused (401) with Connection: close too', async () => {
    const conn = await connection();
    const body = jsonBody(ACCEPTED_URL, 64 * 1024);
    conn.write(head('POST', '/sources', { 'Content-Type': 'application/json', 'Content-Length': body.length }));
    conn.write(body);
    const answer = await conn.readMessage();
    expectProblem(answer, 401, 'unauthorized');
    expect(answer.headers.get('connection')).toBe('close');
    await conn.closedByServer;
  });
});

describe('a request pipelined after an answer that closes the connection', () => {
  /** The jobs the service has made for this URL, read from its database. */
  const jobsFor = (url: string): number => {
    const db = new Database(path.join(svc.dataDir, 'source-fetch.sqlite'), { readonly: true });
    try {
      return (db.prepare('select count(*) as n from jobs where url = ?').get(url) as { n: number }).n;
    } finally {
      db.close();
    }
  };
  const dropped = () =>
    svc.logs.filter(
      (line) => line.msg === 'a request after an answer that closed its connection: dropped, not answered',
    ).length;
  const submission = (url: string) => {
    const body = jsonBody(url);
    return Buffer.concat([
      Buffer.from(
        head('POST', '/sources', { ...keyed(), 'Content-Type': 'application/json', 'Content-Length': body.length }),
      ),
      body,
    ]);
  };
  const statusLines = (conn: RawConnection) =>
    conn
      .received()
      .toString('latin1')
      .match(/HTTP\/1\.1 \d{3}/g) ?? [];

  it('the control: after an answer that keeps the connection, the pipelined submission is answered 202 and its job made', async () => {
    const url = 'http://127.0.0.1:9/pipelined-after-keep-alive.m4a';
    const conn = await connection();
    conn.write(Buffer.concat([submission('http://127.0.0.1:9/pipelined-first.m4a'), submission(url)]));
    const first = await conn.readMessage();
    expect([first.status, first.headers.get('connection')]).toEqual([202, 'keep-alive']);
    const second = await conn.readMessage();
    expect(second.status).toBe(202);
    expect((JSON.parse(second.body.toString('utf8')) as { url: string }).url).toBe(url);
    expect(jobsFor(url)).toBe(1);
  });

  const over = jsonBody(ACCEPTED_URL, LIMIT + 1);
  const small = jsonBody(ACCEPTED_URL);
  const json = 'application/json';
  it.each([
    [
      '413, Content-Length over the limit',
      413,
      () => [head('POST', '/sources', { ...keyed(), 'Content-Type': json, 'Content-Length': over.length }), over],
    ],
    [
      '413, a chunked body over the limit',
      413,
      () => [
        head('POST', '/sources', { ...keyed(), 'Content-Type': json, 'Transfer-Encoding': 'chunked' }),
        chunked(over),
      ],
    ],
    [
      '401, no key',
      401,
      () => [head('POST', '/sources', { 'Content-Type': json, 'Content-Length': small.length }), small],
    ],
    [
      '415, not JSON',
      415,
      () => [
        head('POST', '/sources', { ...keyed(), 'Content-Type': 'text/plain', 'Content-Length': small.length }),
        small,
      ],
    ],
  ] as Array<[string, number, () => [string, Buffer]]>)(
    '%s: the submission pipelined after it is dropped, never run',
    async (label, status, refused) => {
      const [refusedHead, refusedBody] = refused();
      const url = `http://127.0.0.1:9/pipelined-after-${status}-${label.length}.m4a`;
      const conn = await connection();
      const droppedBefore = dropped();
      conn.write(Buffer.concat([Buffer.from(refusedHead), refusedBody, submission(url)]));
      const answer = await conn.readMessage();
      expect([answer.status, answer.headers.get('connection')]).toEqual([status, 'close']);
      // Whichever comes first: the service drops the pipelined request once parsed (from then on
      // it cannot run), or runs it and makes its job.
      await expect.poll(() => dropped() > droppedBefore || jobsFor(url) > 0).toBe(true);
      expect(jobsFor(url)).toBe(0);
      expect(dropped()).toBe(droppedBefore + 1);
      expect(statusLines(conn)).toEqual([`HTTP/1.1 ${status}`]);
      conn.close();
    },
  );
});

describe('Expect: 100-continue', () => {
  // 1 MiB is over every operation's limit; 9 KiB is over POST /sources's own, not over a batch's.
  it.each([1024 * 1024, LIMIT + 1024])(
    'a Content-Length of %i, over the limit of its path, gets the 413 at once and no 100 Continue',
    async (length) => {
      const conn = await connection();
      conn.write(
        head('POST', '/sources', {
          ...keyed(),
          'Content-Type': 'application/json',
          'Content-Length': length,
          Expect: '100-continue',
        }),
      );
      const answer = await conn.readMessage();
      expectProblem(answer, 413, 'body_too_large');
      expect(answer.headers.get('connection')).toBe('close');
      await conn.closedByServer;
      expect(conn.received().toString('latin1')).not.toContain(' 100 ');
    },
  );

  it('an acceptable Content-Length gets 100 Continue, then the body is read and answered 202', async () => {
    const conn = await connection();
    const body = jsonBody(ACCEPTED_URL, LIMIT);
    conn.write(
      head('POST', '/sources', {
        ...keyed(),
        'Content-Type': 'application/json',
        'Content-Length': body.length,
        Expect: '100-continue',
      }),
    );
    const interim = await conn.readMessage();
    expect(interim.status).toBe(100);
    conn.write(body);
    const accepted = await conn.readMessage();
    expect(accepted.status).toBe(202);
    expect(accepted.headers.get('connection')).toBe('keep-alive');
    await expectConnectionReusable(conn);
  });
});

describe('a keep-alive client', () => {
  function send(
    agent: Agent,
    method: string,
    urlPath: string,
    body?: Buffer,
  ): Promise<{ res: IncomingMessage; text: string; reusedSocket: boolean }> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string | number> = { authorization: `Bearer ${svc.apiKey}` };
      if (body) Object.assign(headers, { 'content-type': 'application/json', 'content-length': body.length });
      const req = httpRequest({ host: '127.0.0.1', port: svc.port, method, path: urlPath, agent, headers }, (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ res, text, reusedSocket: req.reusedSocket }));
      });
      req.on('error', reject);
      req.end(body);
    });
  }

  it('sends its next request on a new connection after a 413, and it succeeds', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      // Control: after an ordinary answer the agent reuses the connection.
      expect((await send(agent, 'GET', '/healthz')).res.statusCode).toBe(200);
      expect((await send(agent, 'GET', '/healthz')).reusedSocket).toBe(true);

      const refused = await send(agent, 'POST', '/sources', jsonBody(ACCEPTED_URL, 1024 * 1024));
      expect(refused.res.statusCode).toBe(413);
      expect(refused.res.headers.connection).toBe('close');
      const next = await send(agent, 'GET', '/healthz');
      expect(next.res.statusCode).toBe(200);
      expect(next.reusedSocket).toBe(false);
    } finally {
      agent.destroy();
    }
  });

  it("with Node's fetch: a 1 MiB body, then any request, both answered", async () => {
    const refused = await svc.request('/sources', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: jsonBody(ACCEPTED_URL, 1024 * 1024),
    });
    expect(refused.status).toBe(413);
    expect(((await refused.json()) as { code: string }).code).toBe('body_too_large');
    for (let i = 0; i < 3; i++) expect((await svc.request(`/jobs/none-${i}`)).status).toBe(404);
  });
});
