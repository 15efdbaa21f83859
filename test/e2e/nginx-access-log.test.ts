import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import type { AccessLine, RunningNginx } from '../support/nginx.js';
import { startServiceBehindNginx } from '../support/behind-nginx.js';
import { rawRequest } from '../support/raw-http.js';
import { ROOT, type ServiceHandle } from '../support/service.js';

/**
 * nginx's JSON access log with the whole service behind it: real traffic, then GoAccess (the
 * command docs/observability.md gives) parses the log and reports the artifact routes. And the request id
 * nginx hands on: a client's is kept only when well-formed, as the app would keep it.
 */
const run = promisify(execFile);
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const GOACCESS_LOG_FORMAT =
  '{"date":"%d","time":"%t","remote_addr":"%h","method":"%m","uri":"%U","protocol":"%H","status":"%s","bytes_sent":"%b","request_time":"%T","route":"%v","user_agent":"%u","referer":"%R"}';

let media: MediaServer;
let svc: ServiceHandle;
let nginx: RunningNginx;

beforeAll(async () => {
  media = await startMediaServer();
  const tone = await makeTone(FIXTURE_DIR, { seconds: 2, channels: 2, sampleRate: 48000, format: 'm4a' });
  media.serveFile('/log.m4a', tone.path, { contentType: 'audio/mp4' });
  ({ svc, nginx } = await startServiceBehindNginx({ env: { FETCH_ALLOW_HOSTS: media.hostPort } }));
});

afterAll(async () => {
  await nginx?.stop();
  await svc?.stop();
  await media?.close();
});

describe('nginx JSON access log', () => {
  it('logs route template, content id and timings, redacts signatures, hides the log headers, and parses in GoAccess', async () => {
    const auth = { authorization: `Bearer ${svc.apiKey}` };
    const submitted = await fetch(nginx.url('/sources'), {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ url: media.url('/log.m4a') }),
    });
    expect(submitted.status).toBe(202);
    const job = await svc.waitForJob(((await submitted.json()) as { job_id: string }).job_id, ['done', 'failed']);
    expect(job.status).toBe('done');
    const cid = job.result!.content_id;
    const signed = job.result!.artifacts[0]!.signed_url;
    const signature = new URL(signed, 'http://x').searchParams.get('sig')!;
    expect(signature.length).toBeGreaterThan(10);

    const polled = await fetch(nginx.url(`/jobs/${job.job_id}`), { headers: auth });
    expect(polled.status).toBe(200);
    expect(polled.headers.get('x-route-template')).toBeNull();
    const whole = await fetch(nginx.url(signed));
    expect(whole.status).toBe(200);
    await whole.arrayBuffer();
    expect(whole.headers.get('x-route-template')).toBeNull();
    expect(whole.headers.get('x-content-id')).toBeNull();
    const ranged = await fetch(nginx.url(signed), { headers: { range: 'bytes=0-1023' } });
    expect(ranged.status).toBe(206);
    await ranged.arrayBuffer();
    expect((await fetch(nginx.url(`/jobs/${'nope'}`), { headers: auth })).status).toBe(404);
    // The app takes the first `sig`, and decodes percent-encoded keys: neither may reach the log.
    const [signedPath, query] = signed.split('?') as [string, string];
    for (const target of [`${signed}&sig=decoy`, `${signedPath}?${query.replace('sig=', '%73ig=')}`]) {
      const res = await fetch(nginx.url(target), { headers: { range: 'bytes=0-15' } });
      expect(res.status).toBe(206);
      await res.arrayBuffer();
    }
    // With the key: the first read goes to the app; the next, nginx answers alone (it remembers
    // the app's yes to the key for 2 s).
    for (let i = 0; i < 2; i++) {
      const res = await fetch(nginx.url(`/artifacts/${cid}/audio.wav`), { headers: { ...auth, range: 'bytes=0-7' } });
      expect(res.status).toBe(206);
      await res.arrayBuffer();
    }

    // Every answer above has been logged: the six artifacts and the last poll.
    const lines = await nginx.accessLines(
      () => true,
      (all) =>
        all.filter((line) => line.route === '/artifacts/{cid}/{name}').length >= 6 &&
        all.some((line) => line.uri === '/jobs/nope'),
    );
    const text = nginx.accessLog();
    expect(lines.length).toBeGreaterThanOrEqual(5);
    expect(text).not.toContain(signature);
    expect(text).not.toContain(svc.apiKey);

    const keyedLines = lines.filter((line) => line.route === '/artifacts/{cid}/{name}' && line.range === 'bytes=0-7');
    expect(keyedLines.map((line) => [line.cid, line.uri, line.status])).toEqual([
      [cid, `/artifacts/${cid}/audio.wav`, '206'],
      [cid, `/artifacts/${cid}/audio.wav`, '206'],
    ]);
    expect(keyedLines.map((line) => /^\d+\.\d{3}$/.test(line.upstream_time!))).toEqual([true, false]);
    const artifactLines = lines.filter(
      (line) => line.route === '/artifacts/{cid}/{name}' && line.range !== 'bytes=0-7',
    );
    expect(artifactLines.length).toBe(4);
    for (const line of artifactLines) {
      expect(line).toMatchObject({ cid, method: 'GET', uri: `/artifacts/${cid}/audio.wav?redacted` });
      // nginx answered the signed URLs alone (no upstream time); the two other forms went to the app.
      expect(line.upstream_time).toMatch(line.range === 'bytes=0-15' ? /^\d+\.\d{3}$/ : /^$/);
      expect(Number(line.request_time)).toBeGreaterThanOrEqual(0);
      expect(Number(line.bytes_sent)).toBeGreaterThan(0);
    }
    expect(artifactLines.map((line) => line.status).sort()).toEqual(['200', '206', '206', '206']);
    // The app saw the two requests in other forms than the one it issues and the first keyed one,
    // and no other; its log of them carries no signature either.
    // The app logs a request once its answer has ended, which nginx may have seen first.
    const appArtifactLines = () =>
      svc.logs.filter((line) => line.msg === 'request' && line.route === '/artifacts/{cid}/{name}');
    await expectEventually(() => appArtifactLines().length >= 3);
    expect(appArtifactLines().length).toBe(3);
    expect(svc.output()).not.toContain(signature);
    expect(lines.find((line) => line.uri === `/jobs/${job.job_id}`)).toMatchObject({
      route: '/jobs/{id}',
      status: '200',
      cid: '',
    });
    expect(lines.find((line) => line.uri === '/sources')).toMatchObject({
      route: '/sources',
      status: '202',
      method: 'POST',
    });

    // GoAccess, as docs/observability.md runs it (the page gives this very format).
    expect(await readFile(path.join(ROOT, 'docs/observability.md'), 'utf8')).toContain(
      `--log-format='${GOACCESS_LOG_FORMAT}'`,
    );
    const dir = await mkdtemp(path.join(tmpdir(), 'sf-goaccess-'));
    const logFile = path.join(dir, 'access.json');
    await writeFile(logFile, text);
    const report = path.join(dir, 'report.json');
    await run('goaccess', [
      logFile,
      `--log-format=${GOACCESS_LOG_FORMAT}`,
      '--date-format=%Y-%m-%d',
      '--time-format=%H:%M:%S',
      '-o',
      report,
    ]);
    const parsed = JSON.parse(await readFile(report, 'utf8')) as {
      general: { total_requests: number; valid_requests: number; failed_requests: number };
      vhosts: { data: Array<{ data: string; hits: { count: number } }> };
    };
    expect(parsed.general.total_requests).toBe(lines.length);
    expect(parsed.general.failed_requests).toBe(0);
    const routes = Object.fromEntries(parsed.vhosts.data.map((entry) => [entry.data, entry.hits.count]));
    expect(routes['/artifacts/{cid}/{name}']).toBe(6);
    expect(routes['/jobs/{id}']).toBeGreaterThanOrEqual(2);
  });
});

describe('request ids through nginx', () => {
  const WELL_FORMED = 'client-id_1.2:3';
  const lineWith = (requestId: string) => nginx.wholeAccessLines().find((line) => line.request_id === requestId);

  it('keeps a well-formed X-Request-Id end to end: answer, app log and access log', async () => {
    const res = await rawRequest(nginx.port, 'GET', '/jobs/no-such-job', {
      authorization: `Bearer ${svc.apiKey}`,
      'x-request-id': WELL_FORMED,
    });
    expect(res.status).toBe(404);
    expect(res.headers.get('x-request-id')).toBe(WELL_FORMED);
    expect(
      (JSON.parse(res.raw.subarray(res.raw.indexOf('\r\n\r\n') + 4).toString()) as { request_id?: string }).request_id,
    ).toBe(WELL_FORMED);
    await expectEventually(() =>
      svc.logs.some((line) => line.msg === 'request' && line.request_id === WELL_FORMED && line.status === 404),
    );
    await expectEventually(() => lineWith(WELL_FORMED)?.status === '404');
  });

  it.each([
    ['a space', 'has space'],
    ['129 characters', 'a'.repeat(129)],
    ['200 characters', 'b'.repeat(200)],
    ['a vertical tab', 'tab\u000bbed'],
    ['a form feed', 'form\u000cfeed'],
    ['a DEL', 'del\u007f'],
    ['a non-ASCII letter', 'caf\u00e9'],
    ['a quote', 'quo"te'],
  ])('replaces one with %s by its own, everywhere the request is seen', async (_label, offered) => {
    const res = await rawRequest(nginx.port, 'GET', '/jobs/no-such-job', {
      authorization: `Bearer ${svc.apiKey}`,
      'x-request-id': offered,
    });
    expect(res.status).toBe(404);
    const used = res.headers.get('x-request-id')!;
    expect(used).toMatch(/^[0-9a-f]{32}$/);
    expect(res.raw.toString('latin1')).not.toContain(offered);
    // The app received nginx's id (it would have made its own otherwise) and logged it.
    await expectEventually(() => svc.logs.some((line) => line.msg === 'request' && line.request_id === used));
    await expectEventually(() => lineWith(used)?.status === '404');
    expect(nginx.accessLog()).not.toContain(offered);
  });

  it('keeps it on artifacts nginx answers alone, too', async () => {
    const job = await svc.waitForJob(
      (
        (await (
          await fetch(nginx.url('/sources'), {
            method: 'POST',
            headers: { authorization: `Bearer ${svc.apiKey}`, 'content-type': 'application/json' },
            body: JSON.stringify({ url: media.url('/log.m4a') }),
          })
        ).json()) as { job_id: string }
      ).job_id,
      ['done'],
    );
    const signed = job.result!.artifacts[0]!.signed_url;
    for (const [offered, kept] of [
      [`${WELL_FORMED}.signed`, true],
      ['not kept', false],
    ] as const) {
      const res = await rawRequest(nginx.port, 'GET', signed, { range: 'bytes=0-3', 'x-request-id': offered });
      expect(res.status).toBe(206);
      const used = res.headers.get('x-request-id')!;
      if (kept) expect(used).toBe(offered);
      else expect(used).toMatch(/^[0-9a-f]{32}$/);
      await expectEventually(() => lineWith(used)?.status === '206');
    }
  });
});

describe('bytes that are not UTF-8, from a client', () => {
  /** Each line of the log file as written: valid UTF-8, else the error (a fatal decoder's). */
  const decodeLines = (bytes: Buffer): Array<string | Error> => {
    const lines: Array<string | Error> = [];
    let start = 0;
    for (let nl = bytes.indexOf(0x0a); nl >= 0; start = nl + 1, nl = bytes.indexOf(0x0a, start)) {
      try {
        lines.push(new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(start, nl)));
      } catch (err) {
        lines.push(err as Error);
      }
    }
    return lines;
  };
  /** GoAccess's count of the lines it read and of those it could not parse, as docs/observability.md runs it. */
  const goaccess = async (log: Buffer): Promise<{ total: number; failed: number }> => {
    const dir = await mkdtemp(path.join(tmpdir(), 'sf-goaccess-bytes-'));
    try {
      await writeFile(path.join(dir, 'access.json'), log);
      const args = [
        path.join(dir, 'access.json'),
        `--log-format=${GOACCESS_LOG_FORMAT}`,
        '--date-format=%Y-%m-%d',
        '--time-format=%H:%M:%S',
        '-o',
        path.join(dir, 'report.json'),
      ];
      await run('goaccess', args);
      const { general } = JSON.parse(await readFile(path.join(dir, 'report.json'), 'utf8')) as {
        general: { total_requests: number; failed_requests: number };
      };
      return { total: general.total_requests, failed: general.failed_requests };
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };
  const R = '\ufffd';
  // Header values and the path are written byte for byte (latin1): '\xff' is the byte 0xff.
  const cases: Array<[string, string, Record<string, string>, Record<string, string>]> = [
    ['a 0xff in the path', '/jobs/\xff\xfe', {}, { uri: `/jobs/${R}${R}` }],
    ['a cut sequence in the path, and a query', '/jobs/a\xc3?x=\xff', {}, { uri: `/jobs/a${R}?redacted` }],
    ['a 0xff in the User-Agent', '/healthz', { 'user-agent': 'agent \xff/1' }, { user_agent: `agent ${R}/1` }],
    [
      'an overlong form and a surrogate in the User-Agent',
      '/healthz',
      { 'user-agent': '\xc0\xaf \xed\xa0\x80' },
      { user_agent: `${R}${R} ${R}${R}${R}` },
    ],
    [
      'a 0xff in the Referer',
      '/healthz',
      { referer: 'http://ref.example/\xff' },
      { referer: `http://ref.example/${R}` },
    ],
    ['a 0xff in the Range', '/healthz', { range: 'bytes=\xff-' }, { range: `bytes=${R}-` }],
    [
      'well-formed UTF-8 (é, ♫, 𝄞) kept as it is, with a quote and a backslash',
      '/healthz',
      { 'user-agent': 'caf\xc3\xa9 \xe2\x99\xab \xf0\x9d\x84\x9e "q" \\' },
      { user_agent: 'café ♫ 𝄞 "q" \\' },
    ],
  ];

  it('every line is valid UTF-8 JSON, each such byte logged as U+FFFD, and GoAccess reads every line', async () => {
    for (const [i, [, target, headers]] of cases.entries()) {
      const res = await rawRequest(nginx.port, 'GET', target, { ...headers, 'x-request-id': `bytes-${i}` });
      expect(res.status).toBeGreaterThan(0);
    }
    await nginx.accessLines(
      () => true,
      (all) => cases.every((_, i) => all.some((line) => line.request_id === `bytes-${i}`)),
    );
    const bytes = await readFile(nginx.accessLogPath);
    const lines = decodeLines(bytes);
    expect(lines.filter((line) => line instanceof Error)).toEqual([]);
    const parsed = (lines as string[]).map((line) => JSON.parse(line) as AccessLine);
    // The control: the bytes reached nginx and its log, in the field they were sent in.
    for (const [i, [label, , , expected]] of cases.entries()) {
      expect(
        parsed.find((line) => line.request_id === `bytes-${i}`),
        label,
      ).toMatchObject(expected);
    }
    expect(await goaccess(bytes)).toEqual({ total: parsed.length, failed: 0 });
  });

  it('the control: the same line with the raw byte is not UTF-8, and GoAccess does not read it', async () => {
    const bytes = await readFile(nginx.accessLogPath);
    const line = decodeLines(bytes).find(
      (text) => typeof text === 'string' && text.includes('"request_id":"bytes-2"'),
    ) as string;
    expect(line).toBeDefined();
    const raw = Buffer.concat([Buffer.from(line.replace(R, '\uE000'), 'utf8'), Buffer.from('\n')]);
    // U+E000's bytes as a stand-in, then swapped for the single byte the client sent.
    const at = raw.indexOf(Buffer.from('\uE000', 'utf8'));
    const withRawByte = Buffer.concat([raw.subarray(0, at), Buffer.from([0xff]), raw.subarray(at + 3)]);
    expect(decodeLines(withRawByte)[0]).toBeInstanceOf(Error);
    const valid = Buffer.from(`${line}\n`, 'utf8');
    expect(await goaccess(Buffer.concat([valid, valid]))).toEqual({ total: 2, failed: 0 });
    const read = await goaccess(Buffer.concat([valid, withRawByte]));
    expect(read.total - read.failed).toBeLessThan(2);
  });
});

/** The service's log lines and nginx's arrive a moment after the answer. */
async function expectEventually(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 3000;
  while (!check() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25));
  expect(check()).toBe(true);
}
