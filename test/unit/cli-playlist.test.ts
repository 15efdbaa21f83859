import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { Job } from '../../src/cli/api.js';
import { EXIT } from '../../src/cli/exit-codes.js';
import { runScriptedCli } from '../support/scripted-cli.js';

/**
 * `source-fetch fetch <url> --playlist [--max-items N] -o DIR/` against a scripted service: the
 * entries saved into DIR as "<index> - <title>.wav" (made safe, never replacing a file), one line
 * per entry, refused and failed ones with their sentence, and the exit code saying whether every
 * entry was saved. The real service is in test/e2e/cli.test.ts.
 */
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

/** The scripted service answers JSON: a download's bytes are its body's JSON text. */
const wavText = (n: number) => `RIFF stands in for WAV ${n}`;
const cidOf = (n: number) =>
  createHash('sha256')
    .update(JSON.stringify(wavText(n)))
    .digest('hex');

function doneChild(n: number, downloadName = `Source ${n}.wav`): Job {
  const cid = cidOf(n);
  return job({
    job_id: `child-${n}`,
    parent_id: 'p-1',
    status: 'done',
    url: `http://m.example/${n}.wav`,
    result: {
      content_id: cid,
      artifacts: [
        {
          name: 'audio.wav',
          download_name: downloadName,
          path: `/artifacts/${cid}/audio.wav`,
          signed_url: `/artifacts/${cid}/audio.wav?expires=1&sig=x`,
          signed_url_expires_at: '2026-01-01T00:00:00.000Z',
          bytes: JSON.stringify(wavText(n)).length,
          content_type: 'audio/wav',
          sample_rate: 44100,
          channels: 2,
          duration: 1,
        },
      ],
      loudness: null,
      evicted: null,
    },
  });
}

function parent(
  status: Job['status'],
  counts: Partial<NonNullable<Job['collection']>> = {},
  error: Job['error'] = null,
) {
  return job({
    job_id: 'p-1',
    kind: 'collection',
    status,
    url: 'http://m.example/feed.xml',
    error,
    collection: {
      title: 'A Feed',
      max_items: 12,
      entries_found: 0,
      children: 0,
      done: 0,
      failed: 0,
      canceled: 0,
      refused: 0,
      truncated: false,
      listing_error: null,
      ...counts,
    },
  });
}

async function folder() {
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-cli-playlist-'));
  onTestFinished(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

describe('source-fetch fetch --playlist', () => {
  it('saves each entry as "<index> - <title>.wav", never replacing a file, one line per entry; a refused and a failed entry make it exit 1', async () => {
    const dir = await folder();
    await writeFile(path.join(dir, '04 - Four.wav'), 'a file already there');
    const items = [
      { index: 1, title: 'One / Two', url: 'http://m.example/1.wav', outcome: 'accepted', job: doneChild(1) },
      {
        index: 2,
        title: 'Passwords',
        url: 'file:///etc/passwd',
        outcome: 'refused',
        problem: { status: 400, code: 'url_scheme_not_allowed', title: 'Bad Request', detail: 'Only http and https.' },
      },
      {
        index: 3,
        title: 'Missing',
        url: 'http://m.example/3.wav',
        outcome: 'accepted',
        job: job({
          job_id: 'child-3',
          status: 'failed',
          error: {
            code: 'http_not_found',
            message: 'Nothing was found at the source (HTTP 404).',
            detail: 'HTTP Error 404',
          },
        } as Partial<Job>),
      },
      { index: 4, title: 'Four', url: 'http://m.example/4.wav', outcome: 'accepted', job: doneChild(4) },
    ];
    const result = await runScriptedCli(
      ['fetch', 'http://m.example/feed.xml', '--playlist', '--max-items', '12', '-o', `${dir}/`],
      [
        { status: 202, body: parent('done', { entries_found: 4, children: 3, done: 2, failed: 1, refused: 1 }) },
        { status: 200, body: { items, next_after: null } },
        { status: 200, body: wavText(1) },
        { status: 200, body: wavText(4) },
      ],
    );
    expect(result.code, result.stderr).toBe(EXIT.jobFailed);
    expect(result.stdout).toBe(
      [
        '01 One / Two: wrote 01 - One _ Two.wav (26 B)',
        '02 Passwords: refused: Only http and https. (url_scheme_not_allowed)',
        '03 Missing: failed: Nothing was found at the source (HTTP 404). (http_not_found)',
        '  detail: HTTP Error 404',
        '04 Four: wrote 04 - Four (2).wav (26 B)',
        'collection p-1: done: 4 found, 2 done, 1 failed, 1 refused',
        '',
      ].join('\n'),
    );
    expect((await readdir(dir)).sort()).toEqual(['01 - One _ Two.wav', '04 - Four (2).wav', '04 - Four.wav']);
    expect(await readFile(path.join(dir, '04 - Four.wav'), 'utf8')).toBe('a file already there');
    expect(await readFile(path.join(dir, '01 - One _ Two.wav'), 'utf8')).toBe(JSON.stringify(wavText(1)));
    expect(result.requests.map((request) => `${request.method} ${new URL(request.url).pathname}`)).toEqual([
      'POST /sources',
      'GET /jobs/p-1/items',
      `GET /artifacts/${cidOf(1)}/audio.wav`,
      `GET /artifacts/${cidOf(4)}/audio.wav`,
    ]);
  });

  it('exits 0 when every entry is saved, reading the items page by page; an entry without a title is named by its index', async () => {
    const dir = await folder();
    // The answers in the order the CLI asks: a page, its entries' WAVs, the next page.
    const ordered = await runScriptedCli(
      ['fetch', 'http://m.example/feed.xml', '--playlist', '-o', dir],
      [
        {
          status: 202,
          body: parent('done', { entries_found: 2, children: 2, done: 2, truncated: true, max_items: 2 }),
        },
        {
          status: 200,
          body: {
            items: [
              { index: 1, title: null, url: 'http://m.example/1.wav', outcome: 'accepted', job: doneChild(1, '') },
            ],
            next_after: 1,
          },
        },
        { status: 200, body: wavText(1) },
        {
          status: 200,
          body: {
            items: [{ index: 2, title: 'Two', url: 'http://m.example/2.wav', outcome: 'accepted', job: doneChild(2) }],
            next_after: null,
          },
        },
        { status: 200, body: wavText(2) },
      ],
    );
    expect(ordered.code, ordered.stderr).toBe(EXIT.ok);
    expect(ordered.stdout.trimEnd().split('\n').at(-1)).toBe(
      'collection p-1: done: 2 found, 2 done, 0 failed, 0 refused, cut at 2',
    );
    expect(ordered.requests.map((request) => new URL(request.url).search).filter(Boolean)).toEqual([
      '?after=0&limit=100',
      '?after=1&limit=100',
    ]);
    expect((await readdir(dir)).filter((name) => name.endsWith('.wav')).sort()).toContain('02 - Two.wav');
    expect(await readdir(dir)).toContain('01.wav');
  });

  it('makes the folder, and its parents, when it does not exist', async () => {
    const dir = path.join(await folder(), 'new', 'deeper');
    const result = await runScriptedCli(
      ['fetch', 'http://m.example/feed.xml', '--playlist', '-o', `${dir}/`],
      [
        { status: 202, body: parent('done', { entries_found: 1, children: 1, done: 1 }) },
        {
          status: 200,
          body: {
            items: [{ index: 1, title: 'One', url: 'http://m.example/1.wav', outcome: 'accepted', job: doneChild(1) }],
            next_after: null,
          },
        },
        { status: 200, body: wavText(1) },
      ],
    );
    expect(result.code, result.stderr).toBe(EXIT.ok);
    expect(await readdir(dir)).toEqual(['01 - One.wav']);
  });

  it('a folder that cannot be made (a file is in its place): exit 6 before any request', async () => {
    const dir = await folder();
    await writeFile(path.join(dir, 'taken'), 'a file');
    const result = await runScriptedCli(
      ['fetch', 'http://m.example/feed.xml', '--playlist', '-o', `${dir}/taken/`],
      [],
    );
    expect(result.code).toBe(EXIT.writeFailed);
    expect(result.stderr).toBe(`source-fetch: cannot make the folder ${dir}/taken/: EEXIST\n`);
    expect(result.requests).toEqual([]);
  });

  it('a listing that failed: its sentence, no entry, exit 1', async () => {
    const dir = await folder();
    const result = await runScriptedCli(
      ['fetch', 'http://m.example/one.wav', '--playlist', '-o', dir],
      [
        {
          status: 202,
          body: parent('failed', {}, {
            code: 'not_a_collection',
            message: 'The URL is not a playlist, album, channel or feed: it leads to one item.',
          } as Job['error']),
        },
        { status: 200, body: { items: [], next_after: null } },
      ],
    );
    expect(result.code).toBe(EXIT.jobFailed);
    expect(result.stdout).toContain(
      'collection p-1: The URL is not a playlist, album, channel or feed: it leads to one item. (not_a_collection)\n' +
        '  the one item, saved as FILE: source-fetch fetch http://m.example/feed.xml -o FILE.wav\n',
    );
    expect(await readdir(dir)).toEqual([]);
  });

  it('a playlist fetched without --playlist: its sentence and the command that fetches every entry, exit 1', async () => {
    const sentence =
      'The URL is a playlist, album, channel or feed: it is fetched only when asked for as a whole playlist.';
    const failed = (url: string) =>
      job({
        status: 'failed',
        url,
        error: { code: 'playlist_not_supported', message: sentence, detail: null } as Job['error'],
      });
    const quoted = await runScriptedCli(
      ['fetch', "http://m.example/list?id=1&x='2'"],
      [{ status: 202, body: failed("http://m.example/list?id=1&x='2'") }],
    );
    expect(quoted.code).toBe(EXIT.jobFailed);
    expect(quoted.stdout).toContain(
      `job j-1: failed: ${sentence} (playlist_not_supported)\n` +
        `  every entry, each saved in DIR: source-fetch fetch --playlist 'http://m.example/list?id=1&x='\\''2'\\''' -o DIR/\n`,
    );
    // A plain URL stays as it is; another failure gets no such line (the control).
    const plain = await runScriptedCli(
      ['fetch', 'http://m.example/feed.xml'],
      [{ status: 202, body: failed('http://m.example/feed.xml') }],
    );
    expect(plain.stdout).toContain('source-fetch fetch --playlist http://m.example/feed.xml -o DIR/\n');
    const other = await runScriptedCli(
      ['fetch', 'http://m.example/feed.xml'],
      [
        {
          status: 202,
          body: job({
            status: 'failed',
            error: {
              code: 'http_not_found',
              message: 'Nothing was found at the source (HTTP 404).',
              detail: null,
            } as Job['error'],
          }),
        },
      ],
    );
    expect(other.stdout).toContain('(http_not_found)');
    expect(other.stdout).not.toContain('--playlist');
  });

  it.each([
    [['fetch', 'http://a/', '--max-items', '3'], '--max-items needs --playlist'],
    [['fetch', 'http://a/', '--playlist', '--max-items', '0'], '--max-items needs a whole number from 1'],
    [['fetch', 'http://a/', '--playlist', '--max-items', 'x'], '--max-items needs a whole number from 1'],
    [['fetch', 'http://a/', '--playlist', '-o', ''], '-o needs a folder'],
    [['status', 'j', '--playlist'], '--playlist does not apply to status'],
  ])('%j is a usage error (2) before any request: %s', async (argv, message) => {
    const result = await runScriptedCli(argv, []);
    expect(result.code).toBe(EXIT.usage);
    expect(result.stderr).toContain(message);
    expect(result.requests).toEqual([]);
  });
});
