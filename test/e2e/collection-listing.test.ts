import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTcpDialer, startEgressGuard, type EgressGuard, type GuardSession } from '../../src/egress/guard.js';
import { jobError, type JobError } from '../../src/job-errors.js';
import type { CollectionEntry, ListingEnd } from '../../src/jobs/collection/listing.js';
import { createListCollection, type ListCollectionDeps } from '../../src/jobs/collection/list-entries.js';
import { createLogger } from '../../src/logger.js';
import { parseAllowHosts } from '../../src/policy/destination.js';
import { createResidentSandbox, type ResidentSandbox } from '../../src/sandbox/resident.js';
import { createSandbox, readHostNetns, type Sandbox } from '../../src/sandbox/sandbox.js';
import { runProcess } from '../../src/tools/process.js';
import { startCountingListener, type CountingListener } from '../support/counting-listener.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { processesMatching } from '../support/processes.js';
import { until } from '../support/until.js';
import { CURRENT_YTDLP, DEBIAN_YTDLP } from '../support/ytdlp-under-test.js';
import { rssFeed } from '../support/feeds.js';

/**
 * Listing a collection (src/jobs/collection/list-entries.ts) with the real yt-dlp (Debian's, and a
 * current one in vitest.config.ts's FETCH_FILES projects), confined in the sandbox, through the
 * egress guard, against a loopback media server: what the generic extractor lists of an RSS
 * feed, an XSPF playlist and a page of <audio> elements; that listing an entry makes no
 * connection to it; and the bounds (maxItems, bytes, time, abort).
 */
const MIB = 1024 * 1024;
const TOOL_MEMORY_BYTES = 512 * MIB;

let dir: string;
let media: MediaServer;
let trap: CountingListener;
let guard: EgressGuard;
/** The guard sessions the listings opened, by job id. */
const sessions = new Map<string, GuardSession>();
let hugeFeed: string;
const YTDLP = CURRENT_YTDLP ?? DEBIAN_YTDLP;
/** A sandbox of its own per run; and the resident sandbox's children, as the service runs yt-dlp. */
let spawned: Sandbox;
let resident: ResidentSandbox;

function deps(
  listing: Partial<ListCollectionDeps['listing']> = {},
  sandbox: ListCollectionDeps['sandbox'] = spawned,
  memoryBytes = TOOL_MEMORY_BYTES,
): ListCollectionDeps {
  return {
    store: { root: path.join(dir, 'store') },
    sandbox,
    mountView: false,
    tools: { ytdlp: YTDLP, ffmpeg: 'ffmpeg' },
    workDir: path.join(dir, 'work'),
    limits: {
      timeoutMs: 60_000,
      metadataTimeoutMs: 60_000,
      downloadStall: { windowMs: 30_000, minBytes: 1 },
      maxDownloadBytes: 100 * MIB,
      maxOutputBytes: 100 * MIB,
      maxDurationS: 3600,
      tool: { memoryBytes, cpuSeconds: 120, processes: 64 },
    },
    openEgressSession: (label, options) => {
      const session = guard.openSession(label, options);
      sessions.set(label, session);
      return session;
    },
    listing: { maxBytes: 32 * MIB, timeoutMs: 60_000, ...listing },
    log: createLogger('silent'),
  };
}

let jobs = 0;

/** A new job id, and the listing folder whose path names its run's processes (their --config-locations). */
function newJob(): { jobId: string; folder: string } {
  const jobId = `listing-${++jobs}`;
  return { jobId, folder: path.join(dir, 'work', `${jobId}.listing`) };
}

/** Lists `url` to its end; the entries as onEntries got them, in order. */
async function list(
  url: string,
  opts: {
    maxItems?: number;
    signal?: AbortSignal;
    listing?: Partial<ListCollectionDeps['listing']>;
    sandbox?: ListCollectionDeps['sandbox'];
    memoryBytes?: number;
    jobId?: string;
  } = {},
): Promise<{ entries: CollectionEntry[]; end: ListingEnd; jobId: string }> {
  const jobId = opts.jobId ?? newJob().jobId;
  const entries: CollectionEntry[] = [];
  const end = await createListCollection(deps(opts.listing, opts.sandbox, opts.memoryBytes))(
    { url, maxItems: opts.maxItems ?? 100, signal: opts.signal ?? new AbortController().signal, jobId },
    (handed) => {
      entries.push(...handed);
      return Promise.resolve();
    },
  );
  return { entries, end, jobId };
}

/** The feed at the media server's root link. */
const rss = (title: string, items: Parameters<typeof rssFeed>[2]) => rssFeed(title, media.url('/'), items);

function serveText(urlPath: string, contentType: string, body: string): void {
  media.route(urlPath, (_req, res) => {
    res.writeHead(200, { 'content-type': contentType });
    res.end(body);
  });
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-collection-listing-'));
  media = await startMediaServer();
  trap = await startCountingListener('127.0.0.1');
  // The trap is allow-listed: only not fetching it keeps it at zero connections.
  guard = await startEgressGuard({
    resolve: () => Promise.resolve([]),
    dial: createTcpDialer(),
    allowHosts: parseAllowHosts([media.hostPort, trap.authority]),
    socketPath: path.join(dir, 'guard.sock'),
  });
  spawned = createSandbox({
    mode: 'netns',
    unshare: 'unshare',
    python: '/usr/bin/python3',
    guardSocket: guard.socketPath,
    guardAuthority: null,
    hostNetns: readHostNetns(),
    run: runProcess,
  });
  resident = createResidentSandbox({
    spawned,
    ytdlpPath: YTDLP,
    python: '/usr/bin/python3',
    socketPath: path.join(dir, 'resident.sock'),
    hostNetns: readHostNetns(),
    guardSocket: guard.socketPath,
    enabled: true,
    log: createLogger('silent'),
  });
  await resident.start();
  await until('the resident sandbox ready', () => (resident.runs() === 'resident' ? true : undefined), 60_000);
  hugeFeed = path.join(dir, 'huge.xml');
  const items: string[] = [];
  for (let i = 1; i <= 100_000; i++) {
    items.push(
      `<item><title>Episode ${i}</title><enclosure url="${media.url(`/e/${i}.mp3`)}" type="audio/mpeg" length="1"/><guid>${i}</guid></item>\n`,
    );
  }
  await writeFile(hugeFeed, rss('Huge', []).replace('</channel>', `${items.join('')}</channel>`));
  media.serveFile('/huge.xml', hugeFeed, { contentType: 'application/rss+xml' });
}, 120_000);

afterAll(async () => {
  await resident?.stop();
  await guard?.close();
  await trap?.close();
  await media?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const WAYS = [
  ['in a sandbox of its own', () => spawned],
  ['in the resident sandbox', () => resident],
] as const;

describe.each(WAYS)('an RSS feed, %s', (_way, sandboxOf) => {
  it('every entry in order, with its index and display-safe title, smuggled data stripped, none of them contacted', async () => {
    serveText(
      '/feed.xml',
      'application/rss+xml',
      rss('My &lt;b&gt;Feed&lt;/b&gt;', [
        { title: 'One', url: media.url('/one.mp3') },
        { title: 'Metadata', url: 'http://169.254.169.254/x' },
        { title: 'Passwords', url: 'file:///etc/passwd' },
        { title: 'Nested', url: media.url('/nested.xml'), link: true },
        { title: 'Trap', url: `http://${trap.authority}/x.mp3` },
        { title: 'Five &lt;script&gt;x&lt;/script&gt;\u202egnp.exe', url: media.url('/five.mp3') },
      ]),
    );
    serveText('/nested.xml', 'application/rss+xml', rss('Nested', [{ title: 'Inner', url: media.url('/inner.mp3') }]));

    const before = media.requests.length;
    await trap.settle();
    const trapBefore = trap.connections;
    const { entries, end, jobId } = await list(media.url('/feed.xml'), { sandbox: sandboxOf() });

    expect(end).toEqual({ title: 'My Feed', truncated: false, error: null });
    expect(entries).toEqual([
      { index: 1, url: media.url('/one.mp3'), title: 'One', nested: false },
      { index: 2, url: 'http://169.254.169.254/x', title: 'Metadata', nested: false },
      { index: 3, url: 'file:///etc/passwd', title: 'Passwords', nested: false },
      // The generic extractor cannot tell a feed from media without fetching it: an entry like any.
      { index: 4, url: media.url('/nested.xml'), title: 'Nested', nested: false },
      { index: 5, url: `http://${trap.authority}/x.mp3`, title: 'Trap', nested: false },
      { index: 6, url: media.url('/five.mp3'), title: 'Five xgnp.exe', nested: false },
    ]);
    // Listed, not fetched: the feed was the only request, nothing refused, nothing reached the trap.
    expect(media.requests.slice(before).map((r) => r.path)).toEqual(['/feed.xml']);
    expect(sessions.get(jobId)!.refusals()).toEqual([]);
    await trap.settle();
    expect(trap.connections).toBe(trapBefore);
    // The control: the trap counts what the downloader does reach through the guard (and
    // answers nothing, so that listing is stopped once it got there).
    const aborter = new AbortController();
    const reaching = list(`http://${trap.authority}/x.mp3`, { signal: aborter.signal, sandbox: sandboxOf() });
    await until('the trap reached', () => (trap.connections > trapBefore ? true : undefined));
    aborter.abort();
    await reaching;
    // And the listing's folder is gone.
    expect(await readdir(path.join(dir, 'work'))).toEqual([]);
  });
});

describe('what the generic extractor lists', () => {
  it('an XSPF playlist: its tracks, with their titles (the extractor gives the playlist no title)', async () => {
    serveText(
      '/list.xspf',
      'application/xspf+xml',
      `<?xml version="1.0" encoding="UTF-8"?>\n<playlist version="1" xmlns="http://xspf.org/ns/0/"><title>X</title><trackList>
<track><location>${media.url('/xa.mp3')}</location><title>Track A</title></track>
<track><location>${media.url('/xb.mp3')}</location><title>Track B</title></track>
</trackList></playlist>\n`,
    );
    const { entries, end } = await list(media.url('/list.xspf'));
    expect(end).toEqual({ title: null, truncated: false, error: null });
    expect(entries).toEqual([
      { index: 1, url: media.url('/xa.mp3'), title: 'Track A', nested: false },
      { index: 2, url: media.url('/xb.mp3'), title: 'Track B', nested: false },
    ]);
    expect(media.requestsFor('/xa.mp3')).toEqual([]);
  });

  it("a page with several <audio> elements: each element's source, titled after the page", async () => {
    serveText(
      '/page.html',
      'text/html',
      `<html><head><title>Concert</title></head><body><audio src="a.mp3"></audio><audio src="b.mp3"></audio>` +
        `<audio><source src="c.mp3" type="audio/mpeg"></audio></body></html>`,
    );
    const { entries, end } = await list(media.url('/page.html'));
    expect(end).toEqual({ title: 'Concert', truncated: false, error: null });
    expect(entries).toEqual(
      ['a', 'b', 'c'].map((name, i) => ({
        index: i + 1,
        url: media.url(`/${name}.mp3`),
        title: `Concert (${i + 1})`,
        nested: false,
      })),
    );
  });

  it('a URL that is one item is not a collection: not_a_collection, no entry', async () => {
    serveText('/single.mp3', 'audio/mpeg', 'ID3 not really audio');
    const { entries, end } = await list(media.url('/single.mp3'));
    expect(entries).toEqual([]);
    expect(end.error?.code).toBe('not_a_collection');
  });
});

/** The peak RSS (VmHWM, KiB) of the processes whose command line names `needle`, sampled while `running` runs. */
async function peakRssKiB<T>(needle: string, running: Promise<T>): Promise<{ value: T; peakKiB: number }> {
  let peakKiB = 0;
  let done = false;
  const sampling = (async () => {
    while (!done) {
      for (const pid of await processesMatching(needle)) {
        const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
        const hwm = /^VmHWM:\s+(\d+) kB/m.exec(status);
        if (hwm) peakKiB = Math.max(peakKiB, Number(hwm[1]));
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })();
  try {
    return { value: await running, peakKiB };
  } finally {
    done = true;
    await sampling;
  }
}

describe.each(WAYS)('bounds, %s', (way, sandboxOf) => {
  it('maxItems on a 100,000-entry feed: exactly maxItems entries, truncated, within its time, bytes and memory', async () => {
    const { jobId, folder } = newJob();
    const started = performance.now();
    const { value, peakKiB } = await peakRssKiB(
      folder,
      list(media.url('/huge.xml'), { maxItems: 50, sandbox: sandboxOf(), jobId }),
    );
    const seconds = (performance.now() - started) / 1000;
    const { entries, end } = value;
    console.log(
      `${YTDLP} ${way}: 100,000-entry feed (${(await stat(hugeFeed)).size} bytes), maxItems 50: ` +
        `${seconds.toFixed(1)} s, peak RSS ${Math.round(peakKiB / 1024)} MiB`,
    );
    expect(end).toEqual({ title: 'Huge', truncated: true, error: null });
    expect(entries.map((e) => e.index)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    expect(entries[49]).toEqual({ index: 50, url: media.url('/e/50.mp3'), title: 'Episode 50', nested: false });
    // The control of the sampling: it saw the run.
    expect(peakKiB).toBeGreaterThan(0);
    expect(peakKiB * 1024).toBeLessThan(TOOL_MEMORY_BYTES);
    expect(sessions.get(jobId)!.overByteLimit()).toBe(false);
    expect(media.requestsFor('/e/1.mp3')).toEqual([]);
  });

  it("the tools' memory ceiling: a feed whose listing needs more is stopped (memory_exceeded with Debian's yt-dlp)", async () => {
    // The 100,000-entry feed's listing peaks above 200 MiB (the maxItems test above, its control).
    const { entries, end } = await list(media.url('/huge.xml'), {
      maxItems: 50,
      memoryBytes: 96 * MIB,
      sandbox: sandboxOf(),
    });
    expect(entries).toEqual([]);
    // A MemoryError, or a Python fatal error (such as "Cannot recover from stack overflow") that
    // yt-dlp at the ceiling sometimes dies of instead: memory either way (src/sandbox/limits.ts).
    expect(end.error?.code).toBe('memory_exceeded');
  });

  it('an abort mid-listing stops the run: its reason is the error, no yt-dlp process is left', async () => {
    const { jobId, folder } = newJob();
    let reached: () => void;
    const requested = new Promise<void>((resolve) => (reached = resolve));
    media.route(`/slow-${jobId}.xml`, (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/rss+xml' });
      res.write('<?xml version="1.0"?><rss version="2.0"><channel><title>Slow</title>');
      reached();
    });
    const aborter = new AbortController();
    const listing = list(media.url(`/slow-${jobId}.xml`), { signal: aborter.signal, sandbox: sandboxOf(), jobId });
    await requested;
    // The control: the run is there to be stopped, and seen.
    expect((await processesMatching(folder)).length).toBeGreaterThan(0);
    const reason: JobError = jobError('internal_error', { detail: 'canceled' });
    aborter.abort(reason);
    const { entries, end } = await listing;
    expect(entries).toEqual([]);
    expect(end.error).toBe(reason);
    expect(await processesMatching(folder)).toEqual([]);
    expect(await readdir(path.join(dir, 'work'))).toEqual([]);
  });
});

describe('bounds', () => {
  it('exactly maxItems entries in the feed: all of them, not truncated', async () => {
    const items = Array.from({ length: 3 }, (_, i) => ({ title: `E${i + 1}`, url: media.url(`/x${i + 1}.mp3`) }));
    serveText('/three.xml', 'application/rss+xml', rss('Three', items));
    const exact = await list(media.url('/three.xml'), { maxItems: 3 });
    expect(exact.entries).toHaveLength(3);
    expect(exact.end).toEqual({ title: 'Three', truncated: false, error: null });
    const fewer = await list(media.url('/three.xml'), { maxItems: 2 });
    expect(fewer.entries.map((e) => e.title)).toEqual(['E1', 'E2']);
    expect(fewer.end.truncated).toBe(true);
  });

  it('a feed larger than the byte limit: listing_too_large, the feed cut within the limit', async () => {
    const { entries, end, jobId } = await list(media.url('/huge.xml'), {
      maxItems: 50,
      listing: { maxBytes: MIB },
    });
    expect(entries).toEqual([]);
    expect(end.error?.code).toBe('listing_too_large');
    expect(sessions.get(jobId)!.overByteLimit()).toBe(true);
    // The feed was never sent whole (the 32 MiB listings above are the control: it was).
    expect(media.requestsFor('/huge.xml').at(-1)!.completed).toBe(false);
    expect(media.requestsFor('/huge.xml')[0]!.completed).toBe(true);
  });

  it('the time limit: a feed that never comes ends with listing_timeout, and no process is left', async () => {
    media.route('/silent.xml', () => {});
    const { jobId, folder } = newJob();
    const { entries, end } = await list(media.url('/silent.xml'), { listing: { timeoutMs: 2000 }, jobId });
    expect(entries).toEqual([]);
    expect(end.error).toEqual(jobError('listing_timeout', { values: { limit: 2 } }));
    expect(await processesMatching(folder)).toEqual([]);
  });
});
