import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GuardSession } from '../../src/egress/guard.js';
import type { CollectionEntry } from '../../src/jobs/collection/listing.js';
import { createListCollection } from '../../src/jobs/collection/list-entries.js';
import { createLogger } from '../../src/logger.js';
import type { SandboxedResult, SandboxRunOptions } from '../../src/sandbox/sandbox.js';
import { LISTING_PREFIX } from '../../src/tools/ytdlp-args.js';
import { fakeGuardSession, TEST_FETCH_LIMITS } from '../support/fetch-task-fakes.js';

/**
 * What the listing (src/jobs/collection/list-entries.ts) makes of a run's lines, with a stand-in
 * for the sandboxed yt-dlp that prints given lines: what no extractor on loopback prints (a
 * collection listed inside another), and how entries are handed on and the run stopped.
 * test/e2e/collection-listing.test.ts runs the real yt-dlp.
 */
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-list-entries-'));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

const line = (fields: Record<string, unknown>) => `${LISTING_PREFIX}${JSON.stringify(fields)}`;
const top = (index: number, more: Record<string, unknown> = {}) =>
  line({
    url: `http://h/${index}.mp3`,
    title: `T${index}`,
    playlist_index: index,
    playlist_id: 'P',
    playlist_title: 'Top',
    ...more,
  });

interface FakeRun {
  args: string[];
  /** Lines the run printed before it ended or was stopped. */
  printed: number;
}

/** A sandbox whose yt-dlp prints `lines` one by one (a macrotask apart), then exits with `exitCode`. */
function fakeSandbox(lines: string[], end: { exitCode?: number; stderrTail?: string } = {}) {
  const runs: FakeRun[] = [];
  const run = async (opts: SandboxRunOptions): Promise<SandboxedResult> => {
    const seen: FakeRun = { args: opts.args, printed: 0 };
    runs.push(seen);
    const result = (exitCode: number | null, aborted = false): SandboxedResult => ({
      exitCode,
      signal: exitCode === null ? 'SIGTERM' : null,
      timedOut: false,
      aborted,
      stderrTail: end.stderrTail ?? '',
      notFound: false,
      spawnError: null,
      stdout: '',
      stdoutTruncated: false,
      confinementFailure: null,
    });
    for (const text of lines) {
      await new Promise((resolve) => setImmediate(resolve));
      if (opts.signal?.aborted) return result(null, true);
      seen.printed++;
      opts.onStdoutLine!(text);
    }
    return result(end.exitCode ?? 0);
  };
  return { runs, sandbox: { mode: 'off' as const, guardAuthority: '127.0.0.1:9', run } };
}

function listWith(sandbox: ReturnType<typeof fakeSandbox>['sandbox'], session: Partial<GuardSession> = {}) {
  return createListCollection({
    store: { root: path.join(dir, 'store') },
    sandbox,
    mountView: false,
    tools: { ytdlp: 'yt-dlp', ffmpeg: 'ffmpeg' },
    workDir: path.join(dir, 'work'),
    limits: TEST_FETCH_LIMITS,
    openEgressSession: () => fakeGuardSession(session),
    listing: { maxBytes: 1_000_000, timeoutMs: 10_000 },
    log: createLogger('silent'),
  });
}

const request = (maxItems = 10) => ({
  url: 'http://h/feed.xml',
  maxItems,
  signal: new AbortController().signal,
  jobId: 'job-1',
});

async function collect(
  fake: ReturnType<typeof fakeSandbox>,
  maxItems?: number,
  session?: Partial<GuardSession>,
): Promise<{ entries: CollectionEntry[]; end: Awaited<ReturnType<ReturnType<typeof createListCollection>>> }> {
  const entries: CollectionEntry[] = [];
  const end = await listWith(fake.sandbox, session)(request(maxItems), (handed) => {
    entries.push(...handed);
    return Promise.resolve();
  });
  return { entries, end };
}

describe('entries', () => {
  it('a collection listed inside the collection is one nested entry, its own entries left out', async () => {
    const fake = fakeSandbox([
      top(1),
      line({
        url: 'http://h/q1',
        title: 'Q1',
        playlist_index: 1,
        playlist_id: 'Q',
        playlist_title: 'Inner',
        playlist_webpage_url: 'http://h/q',
      }),
      line({
        url: 'http://h/q2',
        title: 'Q2',
        playlist_index: 2,
        playlist_id: 'Q',
        playlist_title: 'Inner',
        playlist_webpage_url: 'http://h/q',
      }),
      top(3, { _type: 'playlist', url: 'http://h/other-list' }),
      top(4),
    ]);
    const { entries, end } = await collect(fake);
    expect(end).toEqual({ title: 'Top', truncated: false, error: null });
    expect(entries).toEqual([
      { index: 1, url: 'http://h/1.mp3', title: 'T1', nested: false },
      { index: 2, url: 'http://h/q', title: 'Inner', nested: true },
      { index: 3, url: 'http://h/other-list', title: 'T3', nested: true },
      { index: 4, url: 'http://h/4.mp3', title: 'T4', nested: false },
    ]);
    expect(await readdir(path.join(dir, 'work'))).toEqual([]);
  });

  it('maxItems: one more entry is asked for; once it comes the run is stopped and the listing says truncated', async () => {
    const fake = fakeSandbox([1, 2, 3, 4, 5].map((i) => top(i)));
    const { entries, end } = await collect(fake, 2);
    expect(fake.runs[0]!.args).toContain('1:3');
    expect(entries.map((e) => e.index)).toEqual([1, 2]);
    expect(end).toEqual({ title: 'Top', truncated: true, error: null });
    expect(fake.runs[0]!.printed).toBe(3);
    // The control: as many entries as maxItems, and no more, is not truncated.
    const exact = await collect(fakeSandbox([1, 2].map((i) => top(i))), 2);
    expect(exact.end.truncated).toBe(false);
    expect(exact.entries).toHaveLength(2);
  });

  it('onEntries is awaited before its next call, which takes the entries listed meanwhile, in order, 64 at most', async () => {
    const fake = fakeSandbox(Array.from({ length: 70 }, (_, i) => top(i + 1)));
    const calls: string[] = [];
    const end = await listWith(fake.sandbox)(request(100), async (entries) => {
      calls.push(`start ${entries[0]!.index}-${entries.at(-1)!.index}`);
      // The first call is busy until the run has printed every line.
      while (entries[0]!.index === 1 && fake.runs[0]!.printed < 70) await new Promise((r) => setImmediate(r));
      calls.push(`end ${entries[0]!.index}-${entries.at(-1)!.index}`);
    });
    expect(calls).toEqual(['start 1-1', 'end 1-1', 'start 2-65', 'end 2-65', 'start 66-70', 'end 66-70']);
    expect(end.error).toBeNull();
  });

  it('an onEntries that throws stops the run, and the listing rejects with its error', async () => {
    const fake = fakeSandbox([1, 2, 3, 4, 5, 6].map((i) => top(i)));
    const seen: number[] = [];
    const listing = listWith(fake.sandbox)(request(), (entries) => {
      seen.push(...entries.map((entry) => entry.index));
      return seen.includes(2) ? Promise.reject(new Error('the parent could not take it')) : Promise.resolve();
    });
    await expect(listing).rejects.toThrow('the parent could not take it');
    expect(seen).toEqual([1, 2]);
    expect(fake.runs[0]!.printed).toBeLessThan(6);
  });
});

describe('errors', () => {
  it('a first line without a playlist index: not_a_collection, the run stopped', async () => {
    const fake = fakeSandbox([line({ url: 'http://h/a.mp3', title: 'a' }), top(2)]);
    const { entries, end } = await collect(fake);
    expect(entries).toEqual([]);
    expect(end.error?.code).toBe('not_a_collection');
    expect(fake.runs[0]!.printed).toBe(1);
  });

  it("a malformed line: metadata_invalid; a failed run: yt-dlp's words read; the guard's byte limit comes first", async () => {
    expect((await collect(fakeSandbox([`${LISTING_PREFIX}{`]))).end.error?.code).toBe('metadata_invalid');
    const unsupported = {
      exitCode: 1,
      stderrTail:
        'WARNING: [generic] Falling back on generic information extractor\nERROR: Unsupported URL: http://h/x',
    };
    expect((await collect(fakeSandbox([], unsupported))).end.error?.code).toBe('not_media');
    const cut = { exitCode: 1, stderrTail: 'ERROR: Unable to download webpage: IncompleteRead' };
    const tooLarge = await collect(fakeSandbox([], cut), 10, { overByteLimit: () => true });
    expect(tooLarge.end.error).toMatchObject({ code: 'listing_too_large' });
    expect(tooLarge.end.error!.message).toContain('1000000 bytes');
  });

  it('an empty collection: no entry, no title, no error', async () => {
    expect(await collect(fakeSandbox([]))).toEqual({
      entries: [],
      end: { title: null, truncated: false, error: null },
    });
  });
});
