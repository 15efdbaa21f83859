import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { open, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { eq } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { createFetchTask } from '../../src/jobs/fetch/task.js';
import { claimNextJob, enqueueJob, getJobRow } from '../../src/jobs/queue.js';
import { createLogger } from '../../src/logger.js';
import { createSandbox } from '../../src/sandbox/sandbox.js';
import { makeFifo } from '../../src/tools/fifo.js';
import { resolveAlias, setAlias } from '../../src/store/aliases.js';
import { cacheEntryFor, recordCacheEntry, SOURCE_WAV_KIND } from '../../src/store/cache-entries.js';
import type { ContentStore } from '../../src/store/content-store.js';
import { evictToCap } from '../../src/store/eviction.js';
import { AUDIO_ARTIFACT_NAME } from '../../src/store/layout.js';
import type { runProcess, RunProcessResult } from '../../src/tools/process.js';
import { createStoreFixture, type StoreFixture } from '../support/store-fixture.js';
import { BACKENDS } from '../support/test-database.js';

/**
 * The fetch task on a real database (each kind) and artifact root, with stand-ins for yt-dlp and
 * ffmpeg: yt-dlp prints a fixed media identity, waits at its gate (a FIFO, as the real one) and,
 * let through, writes a small file; the conversion writes a fixed WAV.
 */
const OK: RunProcessResult = {
  exitCode: 0,
  signal: null,
  timedOut: false,
  aborted: false,
  stderrTail: '',
  notFound: false,
  spawnError: null,
  stdout: '',
  stdoutTruncated: false,
};

/** A tenth of a second of 44.1 kHz mono 16-bit silence (the format the conversion asks for) with a distinct first sample. */
function wav(seed: number): Buffer {
  const data = Buffer.alloc(8_820);
  data.writeInt16LE(seed, 0);
  const fmt = Buffer.alloc(16);
  fmt.writeUInt16LE(1, 0);
  fmt.writeUInt16LE(1, 2);
  fmt.writeUInt32LE(44_100, 4);
  fmt.writeUInt32LE(88_200, 8);
  fmt.writeUInt16LE(2, 12);
  fmt.writeUInt16LE(16, 14);
  const chunk = (id: string, body: Buffer) => {
    const head = Buffer.alloc(8);
    head.write(id, 0, 'latin1');
    head.writeUInt32LE(body.length, 4);
    return Buffer.concat([head, body]);
  };
  const body = Buffer.concat([Buffer.from('WAVE', 'latin1'), chunk('fmt ', fmt), chunk('data', data)]);
  const head = Buffer.alloc(8);
  head.write('RIFF', 0, 'latin1');
  head.writeUInt32LE(body.length, 4);
  return Buffer.concat([head, body]);
}

function fakeTools(media: { extractorKey: string; id: string; page?: string }, wavBytes: Buffer) {
  const calls: string[] = [];
  const run: typeof runProcess = async (wrapped) => {
    // Each tool runs under prlimit, which sets its limits and execs it.
    expect(wrapped.command).toBe('prlimit');
    const separator = wrapped.args.indexOf('--');
    const opts = { ...wrapped, command: wrapped.args[separator + 1]!, args: wrapped.args.slice(separator + 2) };
    if (opts.command === 'yt-dlp') {
      calls.push('ytdlp');
      const info = {
        extractor: media.extractorKey.toLowerCase(),
        extractor_key: media.extractorKey,
        id: media.id,
        webpage_url: media.page,
        formats: [{ protocol: 'https' }],
      };
      opts.onStdoutLine?.(`INFO ${JSON.stringify(info)}`);
      const fifo = path.join(opts.cwd!, 'gate');
      execFileSync('mkfifo', [fifo]);
      const gate = (async () => {
        const handle = await open(fifo, 'r');
        try {
          await handle.read(Buffer.alloc(16));
        } finally {
          await handle.close();
        }
      })();
      opts.onStdoutLine?.('GATE');
      const stopped = new Promise((resolve) => opts.signal?.addEventListener('abort', resolve, { once: true }));
      if ((await Promise.race([gate.then(() => 'go'), stopped])) !== 'go') {
        // Stopped at the gate: a writer of its own lets its read end.
        await (await open(fifo, 'r+')).close();
        await gate;
        return { ...OK, exitCode: null, signal: 'SIGTERM', aborted: true };
      }
      calls.push('download');
      const file = opts.args[opts.args.indexOf('-o') + 1]!.replace('%(ext)s', 'm4a');
      await writeFile(file, 'media bytes');
      opts.onStdoutLine?.(file);
      return OK;
    }
    if (opts.args.some((arg) => arg.startsWith('async:'))) {
      // Started early on the FIFO: the download here ('media bytes') is converted whole, so this
      // one is stopped unfed, as the real one would be.
      await new Promise((resolve) => opts.signal?.addEventListener('abort', resolve, { once: true }));
      return { ...OK, exitCode: null, signal: 'SIGTERM', aborted: true };
    }
    calls.push('ffmpeg');
    // The WAV is the output after `-f wav` (the input's tags are another, after it).
    await writeFile(opts.args[opts.args.indexOf('wav') + 1]!.replace(/^file:/, ''), wavBytes);
    return OK;
  };
  return { run, calls };
}

/** hostsContacted: the hosts the egress guard says the downloader fetched from. */
async function runJob(
  fx: StoreFixture,
  opts: {
    id?: string;
    url: string;
    run: typeof runProcess;
    store?: ContentStore;
    now: number;
    hostsContacted?: string[];
  },
) {
  const id = opts.id ?? 'job';
  await enqueueJob(fx.database, { id, url: opts.url, urlKey: opts.url, createdAt: 1 });
  const job = (await claimNextJob(fx.database, { owner: 'node', now: 1, leaseMs: 60_000 }))!;
  const task = createFetchTask({
    database: fx.database,
    store: opts.store ?? fx.store,
    now: () => opts.now,
    mountView: false,
    sandbox: createSandbox({
      mode: 'off',
      run: opts.run,
      guardAuthority: '127.0.0.1:9',
      guardSocket: null,
      unshare: 'unshare',
      python: 'python3',
      hostNetns: 'net:[1]',
    }),
    tools: { ytdlp: 'yt-dlp', ffmpeg: 'ffmpeg' },
    makeFifo,
    workDir: path.join(fx.dir, 'work'),
    limits: {
      timeoutMs: 10_000,
      metadataTimeoutMs: 10_000,
      downloadStall: { windowMs: 10_000, minBytes: 1 },
      maxDownloadBytes: 1_000_000,
      maxOutputBytes: 1_000_000,
      maxDurationS: 3600,
      tool: { memoryBytes: 256 * 1024 ** 2, cpuSeconds: 60, processes: 64 },
    },
    openEgressSession: () => ({
      proxyUrlAt: (at) => `http://job:secret@${at}`,
      refusals: () => [],
      upstreamFailures: () => [],
      hostsContacted: () => opts.hostsContacted ?? [],
      overByteLimit: () => false,
      close: () => {},
    }),
  });
  await task(job, { signal: new AbortController().signal, log: createLogger('silent'), owner: 'node' });
  return (await getJobRow(fx.database, id))!;
}

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

describe.each(BACKENDS)('fetch task on %s', (kind) => {
  it('a job done through the media alias records the use of that content, in the same transaction', async () => {
    const fx = await createStoreFixture(kind);
    const known = await fx.addArtifact(1000, 1000, 'https://media.example/watch?v=abc');
    await setAlias(fx.database, 'media', 'youtube:www.youtube.com:abc', known, 1000);
    const other = await fx.addArtifact(1000, 2000);
    const tools = fakeTools(
      { extractorKey: 'Youtube', id: 'abc', page: 'https://www.youtube.com/watch?v=abc' },
      wav(1),
    );

    const job = await runJob(fx, {
      url: 'https://youtu.be/abc',
      run: tools.run,
      now: 5000,
      hostsContacted: ['youtu.be', 'www.youtube.com'],
    });
    expect(job).toMatchObject({ status: 'done', contentId: known });
    expect(tools.calls).toEqual(['ytdlp']);
    expect(await resolveAlias(fx.database, 'url', 'https://youtu.be/abc')).toBe(known);
    expect((await cacheEntryFor(fx.database, known, AUDIO_ARTIFACT_NAME))?.lastUsedAt).toBe(5000);

    // The reused content is now the hottest: eviction takes the other one.
    await evictToCap({ database: fx.database, store: fx.store, capBytes: 1000, now: Date.now });
    expect(await fx.contentIdsOnDisk()).toEqual([known]);
    expect(fx.store.hasSync(other, AUDIO_ARTIFACT_NAME)).toBe(false);
  });

  it('an extractor that names a page on a host the downloader never fetched from neither reuses nor plants a media alias', async () => {
    const fx = await createStoreFixture(kind);
    // The real video's audio, stored from the real site.
    const real = await fx.addArtifact(1000, 1000, 'https://video.example/w/abc');
    await setAlias(fx.database, 'media', 'peertube:video.example:abc', real, 1000);
    // A host that says PeerTube and names the real site's page and id as its own.
    const tools = fakeTools({ extractorKey: 'PeerTube', id: 'abc', page: 'https://video.example/w/abc' }, wav(3));

    const job = await runJob(fx, {
      url: 'https://attacker.example/w/abc',
      run: tools.run,
      now: 5000,
      hostsContacted: ['attacker.example'],
    });
    expect(tools.calls).toEqual(['ytdlp', 'download', 'ffmpeg']);
    expect(job.status).toBe('done');
    expect(job.contentId).not.toBe(real);
    // The real media's alias still points at the real audio; nothing else was aliased as media.
    expect(await resolveAlias(fx.database, 'media', 'peertube:video.example:abc')).toBe(real);
    expect(
      await fx.database.db.select().from(fx.database.t.aliases).where(eq(fx.database.t.aliases.kind, 'media')),
    ).toHaveLength(1);
  });

  it('the same id on two hosts of a self-hosted platform are two media', async () => {
    const fx = await createStoreFixture(kind);
    const first = fakeTools({ extractorKey: 'PeerTube', id: 'abc', page: 'https://one.example/w/abc' }, wav(4));
    const one = await runJob(fx, {
      id: 'one',
      url: 'https://one.example/w/abc',
      run: first.run,
      now: 5000,
      hostsContacted: ['one.example'],
    });
    const second = fakeTools({ extractorKey: 'PeerTube', id: 'abc', page: 'https://two.example/w/abc' }, wav(5));
    const two = await runJob(fx, {
      id: 'two',
      url: 'https://two.example/w/abc',
      run: second.run,
      now: 6000,
      hostsContacted: ['two.example'],
    });
    expect(second.calls).toContain('download');
    expect(two.contentId).not.toBe(one.contentId);
    expect(await resolveAlias(fx.database, 'media', 'peertube:one.example:abc')).toBe(one.contentId);
    expect(await resolveAlias(fx.database, 'media', 'peertube:two.example:abc')).toBe(two.contentId);
  });

  it('content a job is storing is never evicted, not even an identical copy stored earlier from another URL', async () => {
    const fx = await createStoreFixture(kind);
    const bytes = wav(2);
    const cid = sha256(bytes);
    // The same bytes are already stored (from another URL), and are the coldest content.
    const earlier = path.join(fx.dir, 'earlier.wav');
    await writeFile(earlier, bytes);
    await (await fx.store.put(earlier, AUDIO_ARTIFACT_NAME)).release();
    await recordCacheEntry(
      fx.database,
      {
        contentId: cid,
        name: AUDIO_ARTIFACT_NAME,
        kind: SOURCE_WAV_KIND,
        bytes: bytes.length,
        contentType: 'audio/wav',
        sampleRate: 8000,
        channels: 1,
        durationS: 1,
      },
      1000,
    );
    // Eviction runs right after the job's put finds the stored copy, before the job records it.
    const evictedDuringStore: string[][] = [];
    const store: ContentStore = {
      ...fx.store,
      async put(source, name) {
        const stored = await fx.store.put(source, name);
        evictedDuringStore.push(
          (await evictToCap({ database: fx.database, store: fx.store, capBytes: 0, now: Date.now })).evictedContentIds,
        );
        return stored;
      },
    };
    const tools = fakeTools({ extractorKey: 'Generic', id: 'x' }, bytes);

    const job = await runJob(fx, { url: 'https://media.example/x.m4a', run: tools.run, store, now: 5000 });
    expect(evictedDuringStore).toEqual([[]]);
    expect(job).toMatchObject({ status: 'done', contentId: cid });
    expect(await cacheEntryFor(fx.database, cid, AUDIO_ARTIFACT_NAME)).toMatchObject({
      bytes: bytes.length,
      lastUsedAt: 5000,
    });
    expect(sha256(await readFile(fx.store.pathOf(cid, AUDIO_ARTIFACT_NAME)))).toBe(cid);
    // Recorded and released: from now on it is ordinary content, evicted when cold.
    expect(
      (await evictToCap({ database: fx.database, store: fx.store, capBytes: 0, now: Date.now })).evictedContentIds,
    ).toEqual([cid]);
  });
});
