import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { Job } from '../../src/cli/api.js';
import { runCli, type CliDeps } from '../../src/cli/commands.js';
import { EXIT } from '../../src/cli/exit-codes.js';
import { createPlainView, createTerminalView, phaseOf } from '../../src/cli/progress.js';
import { createEventStreamReader } from '../../src/cli/sse.js';

/** The CLI's logic: reading event streams, its two progress displays, its arguments. */

describe('event stream reader', () => {
  it('reads events split anywhere, with CRLF, CR or LF line ends, comments and multi-line data', () => {
    const reader = createEventStreamReader();
    const text =
      'retry: 1500\r\n\r\n: keep-alive\n\nid: a1\nevent: job\ndata: {"x":\ndata: 1}\r\rid: b2\ndata:plain\n\nevent: job\ndata: cut off';
    const events = [];
    for (let i = 0; i < text.length; i += 3) events.push(...reader.push(text.slice(i, i + 3)));
    expect(events).toEqual([
      { event: 'job', data: '{"x":\n1}', id: 'a1' },
      { event: 'message', data: 'plain', id: 'b2' },
    ]);
    expect(reader.retryMs).toBe(1500);
  });

  it('carries the last id over to later events, ignores unknown fields and a bad retry', () => {
    const reader = createEventStreamReader();
    expect(reader.push('id: 7\ndata: one\n\nfoo: bar\nretry: soon\ndata: two\n\n')).toEqual([
      { event: 'message', data: 'one', id: '7' },
      { event: 'message', data: 'two', id: '7' },
    ]);
    expect(reader.retryMs).toBeUndefined();
  });
});

const job = (overrides: Partial<Job>): Job => ({
  job_id: 'j-1',
  kind: 'source',
  parent_id: null,
  collection: null,
  status: 'queued',
  url: 'http://m.example/a.wav',
  born_done: false,
  created_at: '2026-01-01T00:00:00.000Z',
  started_at: null,
  finished_at: null,
  attempts: 0,
  progress: null,
  media: null,
  result: null,
  error: null,
  callback: null,
  ...overrides,
});
const downloading = (done: number, total: number | null) =>
  job({
    status: 'running',
    progress: { bytes_done: done, bytes_total: total, percent: total ? Math.round((done / total) * 1000) / 10 : null },
  });

describe('progress', () => {
  it('tells the phase from the record: a download at 100 % is being converted', () => {
    expect(phaseOf(job({}))).toBe('queued');
    expect(phaseOf(job({ status: 'running' }))).toBe('starting');
    expect(phaseOf(downloading(10, 100))).toBe('downloading');
    expect(phaseOf(downloading(100, 100))).toBe('converting');
    expect(phaseOf(downloading(100, null))).toBe('downloading');
    expect(phaseOf(job({ status: 'failed' }))).toBe('failed');
  });

  it('plain: a line per phase and per 10 % of the download, no escape codes', () => {
    let out = '';
    const view = createPlainView({ write: (text) => (out += text) }, 'j-1');
    for (const record of [
      job({}),
      job({}),
      job({ status: 'running' }),
      downloading(1, 100),
      downloading(5, 100),
      downloading(12, 100),
      downloading(19, 100),
      downloading(57, 100),
      downloading(100, 100),
      downloading(100, 100),
    ]) {
      view.job(record);
    }
    view.saving(10, 20);
    view.saving(20, 20);
    expect(out).toBe(
      ['queued', 'starting', 'downloading 1%', 'downloading 12%', 'downloading 57%', 'converting', 'saving the WAV']
        .map((line) => `job j-1: ${line}\n`)
        .join(''),
    );
  });

  it('terminal: one line redrawn in place, a bar with the percentage, then converting', () => {
    const writes: string[] = [];
    const view = createTerminalView({ write: (text) => writes.push(text), columns: 85 });
    view.job(job({ status: 'running' }));
    view.job(job({ status: 'running' }));
    view.job(downloading(512 * 1024, 2 * 1024 * 1024));
    view.job(downloading(2 * 1024 * 1024, 2 * 1024 * 1024));
    view.finish();
    expect(writes).toEqual([
      '\r\x1b[2Kstarting…',
      `\r\x1b[2Kdownloading [${'#'.repeat(10)}${'-'.repeat(30)}]  25.0%  512.0 KiB / 2.0 MiB`,
      `\r\x1b[2Kconverting  [${'#'.repeat(40)}]  to a 44.1 kHz WAV…`,
      '\r\x1b[2K',
    ]);
  });
});

describe('arguments', () => {
  async function cli(argv: string[], env: Record<string, string> = { SOURCE_FETCH_API_KEY: 'k-0123456789abcdef' }) {
    let stdout = '';
    let stderr = '';
    const deps: CliDeps = {
      argv,
      env,
      stdout: { isTTY: false, write: (text) => (stdout += text) },
      stderr: { write: (text) => (stderr += text) },
      cwd: '/tmp',
      version: '9.9.9',
      signal: new AbortController().signal,
      fetch: () => {
        throw new Error('no request expected');
      },
    };
    return { code: await runCli(deps), stdout, stderr };
  }

  it.each([
    [['fetch'], 'fetch needs a URL'],
    [['fetch', 'http://a/', '--json'], '--json does not apply to fetch'],
    [['fetch', 'http://a/', '-o', ''], '-o needs a file name'],
    [['status'], 'status needs a job id'],
    [['cancel', 'j', '-o', 'x'], '-o does not apply to cancel'],
    [['status', 'j', 'extra'], 'unexpected argument: extra'],
    [['frobnicate'], 'unknown command: frobnicate'],
    [['status', 'j', '--frob'], "Unknown option '--frob'"],
  ])('%j is a usage error (2): %s', async (argv, message) => {
    const result = await cli(argv);
    expect(result.code).toBe(EXIT.usage);
    expect(result.stderr).toContain(message);
  });

  it('needs a key and an http(s) base URL before any request', async () => {
    expect((await cli(['status', 'j'], {})).stderr).toContain('SOURCE_FETCH_API_KEY is not set');
    expect((await cli(['status', 'j'], { SOURCE_FETCH_API_KEY: 'k', SOURCE_FETCH_URL: 'not a url' })).code).toBe(
      EXIT.usage,
    );
  });

  it('--help and --version answer without a key', async () => {
    expect(await cli(['--help'], {})).toMatchObject({
      code: EXIT.ok,
      stdout: expect.stringContaining('source-fetch fetch <url>'),
    });
    expect(await cli([], {})).toMatchObject({ code: EXIT.ok, stdout: expect.stringContaining('Exit codes:') });
    expect(await cli(['--version'], {})).toMatchObject({ code: EXIT.ok, stdout: '9.9.9\n' });
  });
});

describe('the default output file', () => {
  const wav = Buffer.from('RIFF....WAVE: stands in for the WAV');
  const cid = createHash('sha256').update(wav).digest('hex');
  /** A service whose every submission is born done with `downloadName` for its WAV. */
  function bornDone(downloadName: string): typeof fetch {
    const record = job({
      status: 'done',
      born_done: true,
      result: {
        content_id: cid,
        artifacts: [
          {
            name: 'audio.wav',
            download_name: downloadName,
            path: `/artifacts/${cid}/audio.wav`,
            signed_url: `/artifacts/${cid}/audio.wav?expires=1&sig=x`,
            signed_url_expires_at: '2026-01-01T00:00:00.000Z',
            bytes: wav.length,
            content_type: 'audio/wav',
            sample_rate: 44100,
            channels: 2,
            duration: null,
          },
        ],
        loudness: null,
        evicted: null,
      },
    });
    return ((url: URL) =>
      Promise.resolve(
        url.pathname === '/sources'
          ? new Response(JSON.stringify(record), { status: 202, headers: { 'content-type': 'application/json' } })
          : new Response(wav, { headers: { 'content-length': String(wav.length) } }),
      )) as unknown as typeof fetch;
  }
  async function fetchInto(folder: string, downloadName: string, argv: string[] = []) {
    let stdout = '';
    let stderr = '';
    const code = await runCli({
      argv: ['fetch', 'http://m.example/a.mp3', ...argv],
      env: { SOURCE_FETCH_API_KEY: 'k-0123456789abcdef' },
      stdout: { isTTY: false, write: (text) => (stdout += text) },
      stderr: { write: (text) => (stderr += text) },
      cwd: folder,
      version: '9.9.9',
      signal: new AbortController().signal,
      fetch: bornDone(downloadName),
    });
    return { code, stdout, stderr };
  }
  async function folder() {
    const dir = await mkdtemp(path.join(tmpdir(), 'sf-cli-name-'));
    onTestFinished(() => rm(dir, { recursive: true, force: true }));
    return dir;
  }

  it("is the download's name from the record, and never replaces a file: the next free '<name> (n).wav'", async () => {
    const dir = await folder();
    const name = 'Ein _Lied_ – שיר 🎵.wav';
    await writeFile(path.join(dir, name), 'another song with the same title');
    const first = await fetchInto(dir, name);
    expect(first.code, first.stderr).toBe(EXIT.ok);
    expect(first.stdout).toContain(`wrote Ein _Lied_ – שיר 🎵 (2).wav (`);
    const second = await fetchInto(dir, name);
    expect(second.stdout).toContain(`wrote Ein _Lied_ – שיר 🎵 (3).wav (`);
    expect((await readdir(dir)).sort()).toEqual(
      [name, 'Ein _Lied_ – שיר 🎵 (2).wav', 'Ein _Lied_ – שיר 🎵 (3).wav'].sort(),
    );
    expect(await readFile(path.join(dir, name), 'utf8')).toBe('another song with the same title');
    expect((await readFile(path.join(dir, 'Ein _Lied_ – שיר 🎵 (2).wav'))).equals(wav)).toBe(true);
    // -o replaces, as it always did.
    const given = await fetchInto(dir, name, ['-o', name]);
    expect(given.stdout).toContain(`wrote ${name} (`);
    expect((await readFile(path.join(dir, name))).equals(wav)).toBe(true);
  });

  it('is made safe again, whatever the answer says; without a title it is <content id>.wav', async () => {
    const dir = await folder();
    expect((await fetchInto(dir, '../../escape\u202e.wav')).code).toBe(EXIT.ok);
    expect((await fetchInto(dir, 'audio.wav')).code).toBe(EXIT.ok);
    expect((await readdir(dir)).sort()).toEqual(['_.._escape.wav', `${cid}.wav`].sort());
    expect((await readdir(path.dirname(dir))).filter((entry) => entry.startsWith('escape'))).toEqual([]);
  });
});
