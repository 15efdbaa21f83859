/**
 * Collections (issue 47), run by hand:
 *   npm run build && npx tsx bench/collection.ts [resubmissions, default 7] [--ytdlp LAUNCHER]... [--logs DIR] [--no-hand]
 *
 * A loopback origin in a process of its own serves 100 distinct 3-second mp3 clips (44.1 kHz
 * stereo, each its own pitch) and an RSS feed listing them as enclosures (test/support/feeds.ts).
 * For each yt-dlp (--ytdlp, repeatable; default Debian's /usr/bin/yt-dlp and, when
 * scripts/fetch-current-ytdlp.sh has put one there, .cache/yt-dlp/current/yt-dlp), a service of
 * its own (dist/main.js, SQLite, its defaults: WORKER_CONCURRENCY=2, tools confined, resident
 * sandbox; YTDLP_PATH that yt-dlp; FETCH_ALLOW_HOSTS the origin), one warm-up job, then:
 *   1. the feed submitted as a collection (`POST /sources {"url", "playlist": {"max_items": 100}}`):
 *      POST → the parent's done, against what a user would do by hand over the same 100 entries:
 *      a shell loop, per entry `yt-dlp -q -f bestaudio/best` then `ffmpeg -ar 44100 -c:a
 *      pcm_s16le`, fresh processes one after the other, unconfined; beside them that yt-dlp
 *      listing the feed alone (`--flat-playlist --lazy-playlist`, printing each entry's URL);
 *   2. the same feed submitted again, as many times as the first argument says: every child born
 *      done from its stored URL; POST → the parent's done, p50 and max, and where the time goes
 *      (from the service's log lines and the parent's record, see resubmissionProfile).
 * The parent's done is the final record on its event stream (GET /jobs/{id}/events, opened as the
 * POST answers; the stream ends with it), then read back and checked: 100 entries, 100 children
 * all done, none refused; in a resubmission every child born done, in the first none. Beside each
 * figure: the load average, and the CPU seconds of the service's whole process tree (tools
 * included) or of the hand-run processes.
 * --logs DIR writes each service's JSON log lines to DIR/service-<yt-dlp version>.log; --no-hand
 * leaves the shell loop out (its figures then read NaN).
 */
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { rssFeed } from '../test/support/feeds.js';
import { makeTone } from '../test/support/media.js';
import { startMediaServer } from '../test/support/media-server.js';
import { readEventStream } from '../test/support/event-stream.js';
import { startService, type JobBody, type LogLine, type ServiceHandle } from '../test/support/service.js';
import { reapedChildrenCpuSeconds, treeCpuSeconds } from './process-cpu.js';

const ENTRIES = 100;
const CLIP = { seconds: 3, channels: 2, sampleRate: 44100, format: 'mp3' } as const;
const fixtureDir = path.join(tmpdir(), 'source-fetch-fixtures');
const run = promisify(execFile);

interface Collection {
  entries_found: number;
  children: number;
  done: number;
  failed: number;
  refused: number;
  truncated: boolean;
}
type ParentBody = JobBody & {
  collection: Collection | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
};
interface ItemPage {
  items: Array<{ index: number; outcome: string; job?: JobBody }>;
  next_after: number | null;
}

// --- The origin: this file again, in a process of its own -------------------------------------

/** Serves clip-1.mp3 … clip-N.mp3 and /feed.xml listing the first ENTRIES; says where on stdout; ends with stdin. */
async function serveOrigin(files: string[]): Promise<void> {
  const media = await startMediaServer();
  files.forEach((file, n) => media.serveFile(`/clip-${n + 1}.mp3`, file, { contentType: 'audio/mpeg' }));
  const feed = rssFeed(
    'Bench feed',
    media.url('/'),
    files.slice(0, ENTRIES).map((_, n) => ({ title: `Clip ${n + 1}`, url: media.url(`/clip-${n + 1}.mp3`) })),
  );
  media.route('/feed.xml', (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/rss+xml' });
    res.end(feed);
  });
  process.stdout.write(`${JSON.stringify({ hostPort: media.hostPort })}\n`);
  process.stdin.resume();
  await once(process.stdin, 'end');
  await media.close();
}

interface Origin {
  hostPort: string;
  url(urlPath: string): string;
  close(): Promise<void>;
}

async function startOrigin(files: string[]): Promise<Origin> {
  const child = spawn(process.execPath, ['--import', 'tsx', import.meta.filename, '--origin', JSON.stringify(files)], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const exited = once(child, 'exit');
  const [line] = (await Promise.race([
    once(createInterface({ input: child.stdout }), 'line'),
    exited.then(() => Promise.reject(new Error('the origin exited at start'))),
  ])) as [string];
  const { hostPort } = JSON.parse(line) as { hostPort: string };
  return {
    hostPort,
    url: (urlPath) => `http://${hostPort}${urlPath}`,
    async close() {
      child.stdin.end();
      await exited;
    },
  };
}

// --- The bench -------------------------------------------------------------------------------

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const seconds = (ms: number) => (ms / 1000).toFixed(2);
const loadAverage = () =>
  loadavg()
    .map((value) => value.toFixed(2))
    .join(' ');
const print = (text: string) => process.stdout.write(text);

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const resubmissions = Number(args.find((arg) => /^\d+$/.test(arg)) ?? 7);
  const named = args.flatMap((arg, i) => (args[i - 1] === '--ytdlp' ? [path.resolve(arg)] : []));
  const current = path.resolve(import.meta.dirname, '../.cache/yt-dlp/current/yt-dlp');
  const ytdlps = named.length > 0 ? named : ['/usr/bin/yt-dlp', ...(existsSync(current) ? [current] : [])];
  const logsAt = args.indexOf('--logs');
  const logsDir = logsAt >= 0 ? path.resolve(args[logsAt + 1]!) : undefined;

  const trueMs: number[] = [];
  for (let i = 0; i < 21; i++) {
    const started = performance.now();
    await run('/bin/true');
    trueMs.push(performance.now() - started);
  }
  print(
    `machine: ${cpus().length} cores (${cpus()[0]?.model}); /bin/true started and waited for from Node: ` +
      `${median(trueMs).toFixed(1)} ms (median of 21); load average ${loadAverage()}\n`,
  );

  // The feed's clips and one more for the warm-up job, two made at a time, kept in fixtureDir.
  const files: string[] = [];
  for (let first = 1; first <= ENTRIES + 1; first += 2) {
    const made = await Promise.all(
      [first, first + 1].filter((n) => n <= ENTRIES + 1).map((variant) => makeTone(fixtureDir, { ...CLIP, variant })),
    );
    files.push(...made.map((tone) => tone.path));
  }
  const origin = await startOrigin(files);
  try {
    for (const ytdlp of ytdlps)
      await benchWith(ytdlp, origin, { resubmissions, logsDir, byHand: !args.includes('--no-hand') });
  } finally {
    await origin.close();
  }
}

async function benchWith(
  ytdlp: string,
  origin: Origin,
  { resubmissions, logsDir, byHand }: { resubmissions: number; logsDir: string | undefined; byHand: boolean },
) {
  const version = (await run(ytdlp, ['--version'])).stdout.trim();
  const versionMs: number[] = [];
  for (let i = 0; i < 5; i++) {
    const started = performance.now();
    await run(ytdlp, ['--version']);
    versionMs.push(performance.now() - started);
  }
  const feedUrl = origin.url('/feed.xml');
  const entryUrls = Array.from({ length: ENTRIES }, (_, n) => origin.url(`/clip-${n + 1}.mp3`));
  const svc = await startService({ env: { FETCH_ALLOW_HOSTS: origin.hostPort, YTDLP_PATH: ytdlp } });
  try {
    const toolRuns = await residentRuns(svc);
    print(
      `\nyt-dlp ${version} (${ytdlp}; \`--version\` ${median(versionMs).toFixed(0)} ms, median of 5); ` +
        `service's tool runs: ${JSON.stringify(toolRuns)}\n`,
    );
    const warm = await svc.submit(origin.url(`/clip-${ENTRIES + 1}.mp3`));
    await svc.waitForJob(warm.job_id, ['done'], 60_000);

    const listing = await listingAlone(ytdlp, feedUrl);
    const first = await submitFeed(svc, feedUrl, false);
    const loadFirst = loadAverage();
    const hand = byHand ? await byHandLoop(ytdlp, entryUrls) : { wallMs: Number.NaN, cpuS: Number.NaN };
    print(
      `${ENTRIES} entries of 3 s, first submission (load average ${loadFirst}, then ${loadAverage()}):\n` +
        `  service, POST → parent done:         ${seconds(first.wallMs)} s   cpu ${first.cpuS.toFixed(1)} s   ` +
        `(end recorded at ${seconds(first.recordedMs)} s; POST answered in ${first.answeredMs.toFixed(0)} ms)\n` +
        `  by hand, shell loop yt-dlp + ffmpeg: ${seconds(hand.wallMs)} s   cpu ${hand.cpuS.toFixed(1)} s\n` +
        `  ratio service / by hand:             ${(first.wallMs / hand.wallMs).toFixed(3)} (wall)   ` +
        `${(first.cpuS / hand.cpuS).toFixed(2)} (cpu)\n` +
        `  yt-dlp listing the feed alone, by hand: ${listing.toFixed(0)} ms\n`,
    );

    const runs: Submission[] = [];
    const loads: string[] = [];
    for (let i = 0; i < resubmissions; i++) {
      loads.push(loadAverage());
      runs.push(await submitFeed(svc, feedUrl, true));
    }
    const walls = runs.map((r) => r.wallMs);
    print(
      `the same feed again, every child born done, ${resubmissions} runs (load average ${loads[0]} … ${loads.at(-1)}):\n` +
        `  POST → parent done: p50 ${median(walls).toFixed(0)} ms, max ${Math.max(...walls).toFixed(0)} ms   ` +
        `cpu p50 ${median(runs.map((r) => r.cpuS)).toFixed(2)} s   (runs: ${walls.map((ms) => ms.toFixed(0)).join(', ')})\n`,
    );
    resubmissionProfile(svc, runs);
  } finally {
    if (logsDir) {
      await mkdir(logsDir, { recursive: true });
      await writeFile(path.join(logsDir, `service-${version}.log`), svc.logs.map((l) => JSON.stringify(l)).join('\n'));
    }
    await svc.stop();
  }
}

/** Waits until the service's tools run in its resident sandbox (a service that has one says so), and says how they run. */
async function residentRuns(svc: ServiceHandle): Promise<unknown> {
  for (let i = 0; i < 300 && !svc.logs.some((line) => line.msg === 'tool runs' && line.runs === 'resident'); i++)
    await sleep(100);
  const line = svc.logs.filter((l) => l.msg === 'tool runs').at(-1);
  return line && { runs: line.runs, ytdlp: line.ytdlp, reason: line.reason };
}

interface Submission {
  parentId: string;
  /** Date.now() at the POST, comparable with the record's timestamps (same machine). */
  postedAt: number;
  answeredMs: number;
  /** POST → the final record on the parent's event stream. */
  wallMs: number;
  /** POST → the parent's finished_at. */
  recordedMs: number;
  parent: ParentBody;
  cpuS: number;
  /** POST → the first and the last child's created_at. */
  children: { firstMs: number; lastMs: number };
}

/** Submits the feed as a collection and follows the parent to its done; checks its counts and its children. */
async function submitFeed(svc: ServiceHandle, feedUrl: string, bornDone: boolean): Promise<Submission> {
  const pid = svc.process.pid!;
  const cpu = await treeCpuSeconds(pid);
  const postedAt = Date.now();
  const started = performance.now();
  const res = await svc.request('/sources', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ url: feedUrl, playlist: { max_items: ENTRIES } }),
  });
  const submitted = (await res.json()) as ParentBody;
  if (res.status !== 202) throw new Error(`submit answered ${res.status}: ${JSON.stringify(submitted)}`);
  const answeredMs = performance.now() - started;
  const openedAt = Date.now();
  const response = await fetch(`${svc.baseUrl}/jobs/${submitted.job_id}/events`, {
    headers: { accept: 'text/event-stream', authorization: `Bearer ${svc.apiKey}` },
  });
  const stream = readEventStream(response, openedAt);
  await stream.ended;
  const last = stream.arrivals.filter((arrival) => arrival.kind === 'event').at(-1)!;
  const wallMs = openedAt + last.at - postedAt;
  const cpuS = (await treeCpuSeconds(pid)) - cpu;
  if (stream.records.at(-1)?.status !== 'done') throw new Error(`the stream ended at ${stream.records.at(-1)?.status}`);

  const parent = (await svc.getJob(submitted.job_id)) as ParentBody;
  const c = parent.collection;
  if (parent.status !== 'done' || !c || c.entries_found !== ENTRIES || c.children !== ENTRIES || c.done !== ENTRIES)
    throw new Error(`the parent ended ${parent.status}: ${JSON.stringify(c)}`);
  const page = (await (await svc.request(`/jobs/${parent.job_id}/items?limit=${ENTRIES}`)).json()) as ItemPage;
  const born = page.items.filter((item) => item.job?.born_done === true).length;
  if (born !== (bornDone ? ENTRIES : 0)) throw new Error(`${born} of ${page.items.length} children born done`);
  const recordedMs = Date.parse(parent.finished_at!) - postedAt;
  const childrenAt = page.items.map((item) => Date.parse(item.job!.created_at as string) - postedAt);
  const children = { firstMs: Math.min(...childrenAt), lastMs: Math.max(...childrenAt) };
  return { parentId: parent.job_id, postedAt, answeredMs, wallMs, recordedMs, parent, cpuS, children };
}

/** The shell loop a user would write over the entries: fresh yt-dlp then ffmpeg per entry, one after the other. */
async function byHandLoop(ytdlp: string, urls: string[]): Promise<{ wallMs: number; cpuS: number }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-bench-collection-'));
  const script =
    'dir=$1; ytdlp=$2; shift 2; n=0\n' +
    'for url in "$@"; do\n' +
    '  n=$((n+1))\n' +
    '  "$ytdlp" -q -f bestaudio/best -o "$dir/$n.src.%(ext)s" "$url" || exit 1\n' +
    '  ffmpeg -v error -i "$dir/$n".src.* -ar 44100 -c:a pcm_s16le "$dir/$n.wav" || exit 1\n' +
    'done\n';
  const cpu = await reapedChildrenCpuSeconds();
  const started = performance.now();
  await run('bash', ['-c', script, 'loop', dir, ytdlp, ...urls], { maxBuffer: 1 << 24 });
  const wallMs = performance.now() - started;
  const cpuS = (await reapedChildrenCpuSeconds()) - cpu;
  const wavs = (await readdir(dir)).filter((name) => name.endsWith('.wav')).length;
  await rm(dir, { recursive: true, force: true });
  if (wavs !== urls.length) throw new Error(`by hand made ${wavs} WAVs of ${urls.length}`);
  return { wallMs, cpuS };
}

/** That yt-dlp listing the feed as the service's listing does (flat, lazy, one entry past the limit), unconfined: ms. */
async function listingAlone(ytdlp: string, feedUrl: string): Promise<number> {
  const args = ['--no-config', '--yes-playlist', '--flat-playlist', '--lazy-playlist', '-I', `1:${ENTRIES + 1}`];
  const started = performance.now();
  const { stdout } = await run(ytdlp, [...args, '--print', 'url', feedUrl]);
  const ms = performance.now() - started;
  const listed = stdout.trim().split('\n').length;
  if (listed !== ENTRIES) throw new Error(`the listing printed ${listed} entries`);
  return ms;
}

/**
 * Where a resubmission's time goes, means over the runs (ms after the POST): the parent's row
 * created, claimed (started_at), its listing's first and last child created (the children's
 * created_at, read through its items), the 'collection listed' line, the end recorded
 * (finished_at), and its final record on the event stream.
 */
function resubmissionProfile(svc: ServiceHandle, runs: Submission[]): void {
  const mean = (values: number[]) => values.reduce((sum, v) => sum + v, 0) / values.length;
  const at = (of: (r: Submission) => number | undefined) => {
    const values = runs.map(of).filter((v): v is number => v !== undefined && Number.isFinite(v));
    return values.length === 0 ? '   -' : String(Math.round(mean(values))).padStart(4);
  };
  const ms = (iso: unknown) => (typeof iso === 'string' ? Date.parse(iso) : Number.NaN);
  const listed = (r: Submission) =>
    ms(svc.logs.find((l: LogLine) => l.msg === 'collection listed' && l.job_id === r.parentId)?.time) - r.postedAt;
  print(
    `  where the time goes (mean ms after the POST):\n` +
      `    POST answered           ${at((r) => r.answeredMs)}\n` +
      `    parent created          ${at((r) => ms(r.parent.created_at) - r.postedAt)}\n` +
      `    parent claimed          ${at((r) => ms(r.parent.started_at) - r.postedAt)}\n` +
      `    first child created     ${at((r) => r.children.firstMs)}\n` +
      `    last child created      ${at((r) => r.children.lastMs)}\n` +
      `    'collection listed'     ${at(listed)}\n` +
      `    end recorded            ${at((r) => r.recordedMs)}\n` +
      `    final event on stream   ${at((r) => r.wallMs)}\n`,
  );
}

// This file is the bench, or (started by it) the origin.
if (process.argv[2] === '--origin') await serveOrigin(JSON.parse(process.argv[3]!) as string[]);
else await main();
