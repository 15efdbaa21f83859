import { createHash, randomBytes } from 'node:crypto';
import { link, mkdir, open, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { requestedDownloadName } from '../delivery/download-name.js';
import {
  ApiError,
  createApiClient,
  TransportError,
  type ApiClient,
  type CollectionItem,
  type Job,
  type ScrubReport,
} from './api.js';
import { EXIT, type ExitCode } from './exit-codes.js';
import {
  createPlainView,
  createTerminalView,
  formatBytes,
  phaseOf,
  type Output,
  type ProgressView,
} from './progress.js';

/**
 * `source-fetch fetch|status|cancel|scrub|webhook-secret`: the service's API from a shell. Everything it touches
 * (arguments, environment, output streams, fetch, the working folder, Ctrl-C) comes in through
 * CliDeps; src/cli/main.ts passes the real ones.
 */
export interface CliDeps {
  argv: string[];
  env: Record<string, string | undefined>;
  stdout: Output & { isTTY: boolean };
  stderr: Output;
  cwd: string;
  version: string;
  /** Aborted on Ctrl-C. */
  signal: AbortSignal;
  fetch?: typeof fetch;
}

export const DEFAULT_BASE_URL = 'http://127.0.0.1:8080';

export const USAGE = `Usage:
  source-fetch fetch <url> [-o FILE]   Fetch a URL's audio as a 44.1 kHz WAV: submit it, follow the job's
                                       progress, save the WAV and check that its SHA-256 is the content id.
                                       Default FILE: the source's title (made a safe file name) with .wav,
                                       "<title> (2).wav"... when taken; <content id>.wav without a title.
  source-fetch fetch <url> --playlist [--max-items N] [-o DIR/]
                                       Fetch each entry of a playlist, album or feed (at most N, or the
                                       service's limit) and save it into DIR (default: here; made when
                                       missing) as "01 - <title>.wav"..., never replacing a file, as
                                       soon as it ends; one line per entry.
  source-fetch status <job-id> [--json]
                                       Show a job (--json: its whole record).
  source-fetch cancel <job-id>         Cancel a queued or running job.
  source-fetch scrub [--json]          Check every stored WAV's SHA-256 against its content id now (or
                                       follow the check running); corrupt ones go to the service's
                                       quarantine folder and are downloaded again when next submitted.
                                       Prints the report (--json: as JSON).
  source-fetch webhook-secret          Print the secrets that sign the callbacks of this key's jobs, one
                                       per line, the current one first: what its receivers verify with.

Environment:
  SOURCE_FETCH_URL       the service (or nginx in front of it); default ${DEFAULT_BASE_URL}
  SOURCE_FETCH_API_KEY   an API key (required)

Exit codes: 0 done (--playlist: every entry saved), 1 job failed or canceled (--playlist: an entry
refused, failed or canceled, or the listing failed), 2 usage, 3 refused by the service (4xx),
4 service unreachable or failing (5xx; scrub: the pass failed), 5 SHA-256 mismatch,
6 output not writable, 7 scrub found corrupt, missing or unreadable artifacts, 130 interrupted.
`;

class UsageError extends Error {}

const FINAL = new Set<Job['status']>(['done', 'failed', 'canceled']);
/** Consecutive failed attempts to follow the events before giving up. */
const MAX_STREAM_FAILURES = 5;
const POLL_MS = 1000;
/** How long each scrub request waits for the pass to end before answering with its progress. */
const SCRUB_WAIT_S = 25;

export async function runCli(deps: CliDeps): Promise<ExitCode> {
  const err = (text: string) => deps.stderr.write(`source-fetch: ${text}\n`);
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(deps.argv);
  } catch (e) {
    err((e as Error).message);
    deps.stderr.write(USAGE);
    return EXIT.usage;
  }
  if (parsed.command === 'help') {
    deps.stdout.write(USAGE);
    return EXIT.ok;
  }
  if (parsed.command === 'version') {
    deps.stdout.write(`${deps.version}\n`);
    return EXIT.ok;
  }

  let api: ApiClient;
  try {
    api = createApiClient({
      ...connection(deps.env),
      fetch: deps.fetch,
      userAgent: `source-fetch-cli/${deps.version}`,
    });
  } catch (e) {
    err((e as Error).message);
    return EXIT.usage;
  }

  let jobId: string | undefined;
  try {
    switch (parsed.command) {
      case 'fetch':
        if (parsed.playlist)
          return await fetchPlaylistCommand(
            deps,
            api,
            parsed.url,
            parsed.output,
            parsed.playlist,
            (id) => (jobId = id),
          );
        return await fetchCommand(deps, api, parsed.url, parsed.output, (id) => (jobId = id));
      case 'status':
        return await statusCommand(deps, api, parsed.jobId, parsed.json);
      case 'cancel':
        return await cancelCommand(deps, api, parsed.jobId);
      case 'scrub':
        return await scrubCommand(deps, api, parsed.json);
      case 'webhook-secret':
        return await webhookSecretCommand(deps, api);
    }
  } catch (e) {
    if (deps.signal.aborted) {
      err(jobId ? `interrupted; job ${jobId} goes on in the service (source-fetch status ${jobId})` : 'interrupted');
      return EXIT.interrupted;
    }
    if (e instanceof ApiError) {
      err(`the service answered ${e.status}${e.problem ? ` ${e.problem.code}: ${e.problem.detail}` : ''}`);
      return e.status >= 500 ? EXIT.unavailable : EXIT.refused;
    }
    if (e instanceof TransportError) {
      err(e.message);
      return EXIT.unavailable;
    }
    throw e;
  }
}

type Parsed =
  | { command: 'help' | 'version' }
  | { command: 'fetch'; url: string; output: string | undefined; playlist: { max_items?: number } | null }
  | { command: 'status'; jobId: string; json: boolean }
  | { command: 'cancel'; jobId: string }
  | { command: 'scrub'; json: boolean }
  | { command: 'webhook-secret' };

function parse(argv: string[]): Parsed {
  let values: {
    output?: string;
    json?: boolean;
    playlist?: boolean;
    'max-items'?: string;
    help?: boolean;
    version?: boolean;
  };
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        output: { type: 'string', short: 'o' },
        json: { type: 'boolean' },
        playlist: { type: 'boolean' },
        'max-items': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean' },
      },
    }));
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  if (values.help) return { command: 'help' };
  if (values.version) return { command: 'version' };
  const [command, argument, ...rest] = positionals;
  if (command === undefined || command === 'help') return { command: 'help' };
  if (rest.length > 0) throw new UsageError(`unexpected argument: ${rest[0]}`);
  const only = (option: string, allowed: boolean) => {
    if (!allowed) throw new UsageError(`${option} does not apply to ${command}`);
  };
  if (command !== 'fetch') {
    only('--playlist', values.playlist === undefined);
    only('--max-items', values['max-items'] === undefined);
  }
  switch (command) {
    case 'fetch':
      if (!argument) throw new UsageError('fetch needs a URL');
      only('--json', values.json === undefined);
      if (values.output === '') throw new UsageError(`-o needs a ${values.playlist ? 'folder' : 'file name'}`);
      if (!values.playlist) {
        if (values['max-items'] !== undefined) throw new UsageError('--max-items needs --playlist');
        return { command, url: argument, output: values.output, playlist: null };
      }
      return { command, url: argument, output: values.output, playlist: maxItemsOption(values['max-items']) };
    case 'scrub':
      if (argument !== undefined) throw new UsageError(`unexpected argument: ${argument}`);
      only('-o', values.output === undefined);
      return { command, json: values.json ?? false };
    case 'webhook-secret':
      if (argument !== undefined) throw new UsageError(`unexpected argument: ${argument}`);
      only('-o', values.output === undefined);
      only('--json', values.json === undefined);
      return { command };
    case 'status':
    case 'cancel':
      if (!argument) throw new UsageError(`${command} needs a job id`);
      only('-o', values.output === undefined);
      if (command === 'cancel') only('--json', values.json === undefined);
      return command === 'status'
        ? { command, jobId: argument, json: values.json ?? false }
        : { command, jobId: argument };
    default:
      throw new UsageError(`unknown command: ${command}`);
  }
}

/** --max-items: a whole number from 1; without it, the service's own limit. */
function maxItemsOption(text: string | undefined): { max_items?: number } {
  if (text === undefined) return {};
  if (!/^[1-9][0-9]{0,8}$/.test(text)) throw new UsageError('--max-items needs a whole number from 1');
  return { max_items: Number(text) };
}

function connection(env: Record<string, string | undefined>): { baseUrl: string; apiKey: string } {
  const baseUrl = env.SOURCE_FETCH_URL?.trim() || DEFAULT_BASE_URL;
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new UsageError('SOURCE_FETCH_URL must be an http(s) URL, such as http://127.0.0.1:8080');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new UsageError('SOURCE_FETCH_URL must be an http(s) URL');
  const apiKey = env.SOURCE_FETCH_API_KEY?.trim();
  if (!apiKey)
    throw new UsageError('SOURCE_FETCH_API_KEY is not set (the service keeps a generated key in data/api-key)');
  return { baseUrl, apiKey };
}

async function fetchCommand(
  deps: CliDeps,
  api: ApiClient,
  url: string,
  output: string | undefined,
  onJobId: (id: string) => void,
): Promise<ExitCode> {
  const out = deps.stdout;
  const submitted = await api.submit(url);
  onJobId(submitted.job_id);
  const view = out.isTTY ? createTerminalView(out) : createPlainView(out, submitted.job_id);
  if (out.isTTY) out.write(`job ${submitted.job_id}\n`);
  view.job(submitted);
  let job: Job;
  try {
    job = FINAL.has(submitted.status) ? submitted : await follow(api, submitted, view, deps.signal);
  } finally {
    view.finish();
  }
  if (job.status !== 'done' || !job.result) {
    if (!job.error) out.write(`job ${job.job_id}: ${job.status}\n`);
    else {
      out.write(`job ${job.job_id}: ${job.status}: ${job.error.message} (${job.error.code})\n`);
      if (job.error.detail) out.write(indented('  detail: ', job.error.detail));
      if (job.error.code === 'playlist_not_supported') {
        out.write(`  every entry, each saved in DIR: source-fetch fetch --playlist ${shellWord(url)} -o DIR/\n`);
      }
    }
    return EXIT.jobFailed;
  }
  const contentId = job.result.content_id;
  out.write(`job ${job.job_id}: done${job.born_done ? ' (already stored)' : ''}, content id ${contentId}\n`);
  const artifact = job.result.artifacts.find((a) => a.name === 'audio.wav') ?? job.result.artifacts[0];
  if (!artifact) {
    deps.stderr.write(`source-fetch: job ${job.job_id} is done but lists no artifact\n`);
    return EXIT.unavailable;
  }
  const target = output ?? defaultOutputName(artifact, contentId);
  const saved = await save(deps, api, artifact.path, artifact.bytes, path.resolve(deps.cwd, target), contentId, view, {
    replace: output !== undefined,
  });
  view.finish();
  if (saved.result === 'write_failed') {
    deps.stderr.write(`source-fetch: cannot write ${target}: ${saved.reason}\n`);
    return EXIT.writeFailed;
  }
  if (saved.result === 'mismatch') {
    deps.stderr.write(
      `source-fetch: the WAV's SHA-256 ${saved.digest} is not its content id ${contentId}; nothing was written to ${target}\n`,
    );
    return EXIT.checksumMismatch;
  }
  const details = [
    formatBytes(saved.bytes),
    artifact.duration !== null ? `${artifact.duration.toFixed(1)} s` : null,
    artifact.channels ? `${artifact.channels} ch` : null,
    job.result.loudness ? formatLoudness(job.result.loudness) : null,
  ];
  const written = output ?? path.basename(saved.path);
  out.write(`wrote ${written} (${details.filter(Boolean).join(', ')}): SHA-256 matches the content id\n`);
  return EXIT.ok;
}

/** A collection's items are read in pages of this many (listJobItems takes 1 to 100). */
const ITEMS_PAGE = 100;

/**
 * fetch --playlist: creates the folder, submits the URL as a collection and follows its parent job
 * (a line at each change of its status). Once the listing is over, each entry is saved into the
 * folder as it ends, one line per entry: written, or why not (refused, failed or canceled, with
 * the sentence and code); the parent's final line comes last. Each file is named
 * "<index> - <title>.wav" (made safe as a title's name is), never replacing a file. 0 only when
 * every entry was saved.
 */
async function fetchPlaylistCommand(
  deps: CliDeps,
  api: ApiClient,
  url: string,
  output: string | undefined,
  playlist: { max_items?: number },
  onJobId: (id: string) => void,
): Promise<ExitCode> {
  const out = deps.stdout;
  const folder = path.resolve(deps.cwd, output ?? '.');
  try {
    await mkdir(folder, { recursive: true });
  } catch (e) {
    deps.stderr.write(`source-fetch: cannot make the folder ${output ?? '.'}: ${errorCode(e)}\n`);
    return EXIT.writeFailed;
  }
  const submitted = await api.submit(url, playlist);
  onJobId(submitted.job_id);
  const label = `collection ${submitted.job_id}`;
  const entries = createEntrySaver(deps, api, submitted.job_id, folder);
  let shownStatus: Job['status'] | undefined;
  const view: ProgressView = {
    job(job) {
      if (job.status !== shownStatus && !FINAL.has(job.status)) out.write(`${label}: ${collectionLine(job)}\n`);
      shownStatus = job.status;
      entries.parentChanged(job);
    },
    saving() {},
    finish() {},
  };
  view.job(submitted);
  const parent = FINAL.has(submitted.status) ? submitted : await follow(api, submitted, view, deps.signal);
  const code = await entries.saveRest(parent);
  out.write(`${label}: ${collectionLine(parent)}\n`);
  if (parent.status === 'failed' && parent.error) {
    out.write(`${label}: ${parent.error.message} (${parent.error.code})\n`);
    if (parent.error.detail) out.write(indented('  detail: ', parent.error.detail));
    if (parent.error.code === 'not_a_collection') {
      out.write(`  the one item, saved as FILE: source-fetch fetch ${shellWord(parent.url)} -o FILE.wav\n`);
    }
  }
  return parent.status === 'done' ? code : worseExit(code, EXIT.jobFailed);
}

/** The worse of two exit codes of a playlist's entries: a write failure outranks a mismatch, a failed job... */
function worseExit(a: ExitCode, b: ExitCode): ExitCode {
  const rank: ExitCode[] = [EXIT.ok, EXIT.jobFailed, EXIT.unavailable, EXIT.checksumMismatch, EXIT.writeFailed];
  return rank.indexOf(b) > rank.indexOf(a) ? b : a;
}

/**
 * Saves a collection's entries as they end. parentChanged, at each state of the parent, reads the
 * items again when more have ended (one read at a time: states seen meanwhile make one more), from
 * the first entry not yet handled; saveRest, once the parent has ended, handles every entry left.
 */
function createEntrySaver(deps: CliDeps, api: ApiClient, parentId: string, folder: string) {
  const handled = new Set<number>();
  /** Every entry up to this index is handled. */
  let handledThrough = 0;
  /** Indexes as wide as the last one's (at least two digits), so that the files sort in order; known once listed. */
  let width = 2;
  let code: ExitCode = EXIT.ok;
  let endedSeen = 0;
  let reading: Promise<void> = Promise.resolve();
  let readQueued = false;
  let failure: { thrown: unknown } | null = null;
  const silent: ProgressView = { job() {}, saving() {}, finish() {} };

  async function saveEnded(all: boolean): Promise<void> {
    for (let after = handledThrough; ;) {
      const page = await api.listItems(parentId, after, ITEMS_PAGE);
      for (const item of page.items) {
        if (handled.has(item.index)) continue;
        if (!all && item.outcome === 'accepted' && !FINAL.has(item.job.status)) continue;
        handled.add(item.index);
        while (handled.has(handledThrough + 1)) handledThrough++;
        const index = String(item.index).padStart(width, '0');
        const outcome = await saveItem(deps, api, item, folder, index, silent);
        deps.stdout.write(`${index} ${(item.title ?? '').trim() || item.url}: ${outcome.line}\n`);
        if (outcome.detail) deps.stdout.write(indented('  detail: ', outcome.detail));
        code = worseExit(code, outcome.code);
      }
      if (page.next_after === null || page.items.length === 0) break;
      after = page.next_after;
    }
  }

  return {
    parentChanged(job: Job): void {
      const counts = job.collection;
      if (!counts || job.status === 'queued' || job.status === 'expanding' || FINAL.has(job.status)) return;
      width = Math.max(2, String(counts.entries_found).length);
      const ended = counts.done + counts.failed + counts.canceled + counts.refused;
      if (ended <= endedSeen || readQueued) return;
      endedSeen = ended;
      readQueued = true;
      reading = reading.then(async () => {
        readQueued = false;
        if (failure === null) await saveEnded(false).catch((thrown: unknown) => void (failure = { thrown }));
      });
    },
    async saveRest(parent: Job): Promise<ExitCode> {
      await reading;
      if (failure !== null) throw failure.thrown;
      width = Math.max(2, String(parent.collection?.entries_found ?? 0).length);
      await saveEnded(true);
      return code;
    },
  };
}

/** The parent's line: its status, its counts, and where it was cut. */
function collectionLine(job: Job): string {
  const counts = job.collection;
  if (!counts) return job.status;
  const parts = [`${counts.entries_found} found`, `${counts.done} done`, `${counts.failed} failed`];
  parts.push(`${counts.refused} refused`);
  if (counts.canceled) parts.push(`${counts.canceled} canceled`);
  if (counts.truncated) parts.push(`cut at ${counts.max_items}`);
  return `${job.status === 'expanding' ? 'listing entries' : job.status}: ${parts.join(', ')}`;
}

/** One entry of a collection saved into `folder`, or why it was not: its line, its exit code. */
async function saveItem(
  deps: CliDeps,
  api: ApiClient,
  item: CollectionItem,
  folder: string,
  index: string,
  view: ProgressView,
): Promise<{ line: string; detail?: string; code: ExitCode }> {
  if (item.outcome === 'refused') {
    return {
      line: `refused: ${item.problem.detail ?? item.problem.title} (${item.problem.code})`,
      code: EXIT.jobFailed,
    };
  }
  const job = item.job;
  if (job.status !== 'done' || !job.result) {
    return {
      line: job.error ? `${job.status}: ${job.error.message} (${job.error.code})` : job.status,
      detail: job.error?.detail ?? undefined,
      code: EXIT.jobFailed,
    };
  }
  const artifact = job.result.artifacts.find((a) => a.name === 'audio.wav') ?? job.result.artifacts[0];
  if (!artifact) return { line: `job ${job.job_id} is done but lists no artifact`, code: EXIT.unavailable };
  // The title as listed, else the source's, else the index alone: made safe as a single file's name is.
  const title = (item.title ?? '').trim() || (artifact.download_name ?? '').replace(/\.wav$/i, '');
  const target = path.join(folder, requestedDownloadName(title ? `${index} - ${title}` : index, 'audio.wav'));
  const saved = await save(deps, api, artifact.path, artifact.bytes, target, job.result.content_id, view, {
    replace: false,
  });
  if (saved.result === 'write_failed')
    return { line: `cannot write ${path.basename(target)}: ${saved.reason}`, code: EXIT.writeFailed };
  if (saved.result === 'mismatch')
    return {
      line: `the WAV's SHA-256 ${saved.digest} is not its content id ${job.result.content_id}; nothing was written`,
      code: EXIT.checksumMismatch,
    };
  return {
    line: `wrote ${path.basename(saved.path)} (${formatBytes(saved.bytes)}${job.born_done ? ', already stored' : ''})`,
    code: EXIT.ok,
  };
}

/**
 * -o's default: the download's name the service gives (the source's title with `.wav`), made safe
 * here again (the CLI writes into the user's folder whatever the answer says); without a title,
 * `<content id>.wav`.
 */
function defaultOutputName(artifact: { name: string; download_name?: string }, contentId: string): string {
  const name = requestedDownloadName(artifact.download_name ?? '', artifact.name);
  return name === artifact.name ? `${contentId}.wav` : name;
}

/** Follows the job's events to its end: reconnecting from the last event id, polling when streams are refused. */
async function follow(api: ApiClient, start: Job, view: ProgressView, signal: AbortSignal): Promise<Job> {
  let latest = start;
  let lastEventId: string | undefined;
  let failures = 0;
  const seen = (job: Job) => {
    latest = job;
    failures = 0;
    view.job(job);
  };
  while (!FINAL.has(latest.status)) {
    try {
      const ended = await api.followEvents(start.job_id, lastEventId, (job) => seen(job), signal);
      if (ended === 'ended') {
        // The server says our last state was the final one; read it to be sure.
        seen(await api.getJob(start.job_id));
        continue;
      }
      lastEventId = ended.lastEventId;
      if (FINAL.has(latest.status)) break;
      // The stream ended before the job did (its node is shutting down): resume, on any node.
      failures++;
      if (failures > MAX_STREAM_FAILURES) throw new TransportError('the event stream keeps ending before the job does');
      await sleep(ended.retryMs ?? POLL_MS, undefined, { signal });
    } catch (e) {
      if (e instanceof ApiError && e.status === 429) {
        // Too many streams open (or requests): the job's record, polled, tells the same story.
        await sleep(Math.max(POLL_MS, (e.retryAfterS ?? 0) * 1000), undefined, { signal });
        seen(await api.getJob(start.job_id));
        continue;
      }
      if (!(e instanceof TransportError) || ++failures > MAX_STREAM_FAILURES) throw e;
      await sleep(POLL_MS * failures, undefined, { signal });
    }
  }
  return latest;
}

type Saved =
  | { result: 'ok'; bytes: number; path: string }
  | { result: 'mismatch'; digest: string }
  | { result: 'write_failed'; reason: string };

/** The most other names tried for a default output name that is taken: "<name> (2).wav" to "<name> (100).wav". */
const MAX_NAME_TRIES = 100;

/**
 * Streams the artifact into a temporary file beside the target while hashing it, and moves it
 * into place only when its SHA-256 is the content id: onto the target (`replace`, a name the user
 * gave), or else under the first free one of the target and "<name> (2).wav"... (a name from a
 * title, which another file may have: it is never replaced).
 */
async function save(
  deps: CliDeps,
  api: ApiClient,
  artifactPath: string,
  expectedBytes: number,
  target: string,
  contentId: string,
  view: ProgressView,
  { replace }: { replace: boolean },
): Promise<Saved> {
  const res = await api.download(artifactPath, deps.signal);
  const total = Number(res.headers.get('content-length')) || expectedBytes;
  const partial = path.join(path.dirname(target), `.${path.basename(target)}.${randomBytes(4).toString('hex')}.part`);
  let file: Awaited<ReturnType<typeof open>>;
  try {
    file = await open(partial, 'wx');
  } catch (e) {
    // Unread, the answer would hold its connection (and the process) open.
    await res.body?.cancel();
    return { result: 'write_failed', reason: errorCode(e) };
  }
  const hash = createHash('sha256');
  let bytes = 0;
  let shownAt = 0;
  let kept = false;
  try {
    if (!res.body) throw new TransportError('the artifact answer has no body');
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      hash.update(chunk);
      try {
        await file.write(chunk);
      } catch (e) {
        return { result: 'write_failed', reason: errorCode(e) };
      }
      bytes += chunk.byteLength;
      const now = Date.now();
      if (now - shownAt >= 100 || bytes === total) {
        shownAt = now;
        view.saving(bytes, total);
      }
    }
    await file.sync();
    const digest = hash.digest('hex');
    if (digest !== contentId) return { result: 'mismatch', digest };
    await file.close();
    let written = target;
    if (replace) await rename(partial, target);
    else written = await linkUnderFreeName(partial, target);
    kept = replace;
    return { result: 'ok', bytes, path: written };
  } catch (e) {
    if (e instanceof TransportError || deps.signal.aborted) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    if (code && /^E[A-Z]+$/.test(code)) return { result: 'write_failed', reason: code };
    throw new TransportError(`the artifact download broke off: ${(e as Error).message}`);
  } finally {
    await file.close().catch(() => {});
    if (!kept) await rm(partial, { force: true });
  }
}

/** A file system error's code (ENOENT, ENOSPC...), else its message. */
function errorCode(e: unknown): string {
  return (e as NodeJS.ErrnoException).code ?? (e as Error).message;
}

/**
 * Links `file` under `target`, or, when that name is taken, the first free "<stem> (n)<ext>"; a
 * link (not a rename) fails rather than replace a file. Returns the name used; `file` stays.
 */
async function linkUnderFreeName(file: string, target: string): Promise<string> {
  const extension = path.extname(target);
  const stem = target.slice(0, target.length - extension.length);
  for (let n = 1; n <= MAX_NAME_TRIES; n++) {
    const candidate = n === 1 ? target : `${stem} (${n})${extension}`;
    try {
      await link(file, candidate);
      return candidate;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
  }
  throw Object.assign(new Error(`${target} and ${MAX_NAME_TRIES - 1} other names are taken`), { code: 'EEXIST' });
}

async function statusCommand(deps: CliDeps, api: ApiClient, jobId: string, json: boolean): Promise<ExitCode> {
  const job = await api.getJob(jobId);
  if (json) {
    deps.stdout.write(`${JSON.stringify(job, null, 2)}\n`);
    return EXIT.ok;
  }
  const phase = phaseOf(job);
  const percent = job.progress?.percent;
  const lines: Array<[string, string | null]> = [
    ['job', job.job_id],
    [
      'status',
      phase === 'downloading' && percent != null
        ? `${job.status} (downloading ${percent}%)`
        : job.status === 'running'
          ? `running (${phase})`
          : job.status,
    ],
    ['url', job.url],
    ['created', job.created_at],
    ['started', job.started_at],
    ['finished', job.finished_at],
    ['content', job.result?.content_id ?? null],
    ['loudness', job.result?.loudness ? formatLoudness(job.result.loudness) : null],
    ['error', job.error ? `${job.error.message} (${job.error.code})` : null],
    ['detail', job.error?.detail ?? null],
  ];
  for (const [label, value] of lines) if (value !== null) deps.stdout.write(indented(label.padEnd(9), value));
  return EXIT.ok;
}

/** `text` after `label`, each further line of it aligned under the first. */
function indented(label: string, text: string): string {
  return `${label}${text.split('\n').join(`\n${' '.repeat(label.length)}`)}\n`;
}

/** EBU R128 loudness as people read it: "-23.0 LUFS, LRA 4.2 LU, true peak -1.5 dBTP". */
function formatLoudness(loudness: { integrated_lufs: number; range_lu: number; true_peak_dbtp: number }): string {
  return `${loudness.integrated_lufs.toFixed(1)} LUFS, LRA ${loudness.range_lu.toFixed(1)} LU, true peak ${loudness.true_peak_dbtp.toFixed(1)} dBTP`;
}

async function cancelCommand(deps: CliDeps, api: ApiClient, jobId: string): Promise<ExitCode> {
  const job = await api.cancel(jobId);
  deps.stdout.write(`job ${job.job_id}: ${job.status}\n`);
  return EXIT.ok;
}

/**
 * Asks the service for a scrub pass and follows it to its end on the same node, one request of up
 * to SCRUB_WAIT_S at a time (below the time-outs of proxies in between).
 */
/** The key's callback signing secrets, one per line (the current one first), and nothing else: for a receiver's configuration. */
async function webhookSecretCommand(deps: CliDeps, api: ApiClient): Promise<ExitCode> {
  const { secrets } = await api.webhookSecrets();
  for (const secret of secrets) deps.stdout.write(`${secret}\n`);
  return EXIT.ok;
}

async function scrubCommand(deps: CliDeps, api: ApiClient, json: boolean): Promise<ExitCode> {
  let report = await api.scrub(SCRUB_WAIT_S, deps.signal);
  const passId = report.pass_id;
  while (report.status === 'running') {
    if (!json)
      deps.stdout.write(
        `scrub ${passId} on ${report.node_id}: running, ${report.checked} checked, ${formatBytes(report.bytes_read)} read\n`,
      );
    report = await api.scrubReport(SCRUB_WAIT_S, deps.signal);
    if (report.pass_id !== passId) {
      deps.stderr.write(
        `source-fetch: the service answered about another scrub pass (${report.pass_id}): point SOURCE_FETCH_URL at the node that runs ${passId}\n`,
      );
      return EXIT.unavailable;
    }
  }
  if (json) deps.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  else for (const line of scrubSummary(report)) deps.stdout.write(`${line}\n`);
  if (report.status !== 'done') {
    deps.stderr.write(`source-fetch: scrub pass ${passId} ${report.status}: ${report.error ?? 'no reason given'}\n`);
    return EXIT.unavailable;
  }
  return report.corrupt + report.missing + report.unreadable > 0 ? EXIT.storeProblems : EXIT.ok;
}

function scrubSummary(report: ScrubReport): string[] {
  const lines = [
    `scrub ${report.pass_id} on ${report.node_id}: ${report.status}: ${report.checked} checked, ${formatBytes(report.bytes_read)} read; ` +
      `${report.corrupt} corrupt (${report.moved} moved to the quarantine folder), ${report.missing} missing, ${report.unreadable} unreadable`,
  ];
  for (const finding of report.findings) {
    const artifact = `${finding.content_id}/${finding.name}`;
    if (finding.problem === 'corrupt') {
      const action =
        finding.action === 'quarantined'
          ? `quarantined as ${finding.quarantined_as}`
          : 'left for the next pass (a job was storing it)';
      lines.push(`corrupt ${artifact}: SHA-256 ${finding.sha256}; ${action}`);
    } else {
      lines.push(`${finding.problem} ${artifact}${finding.error ? `: ${finding.error}` : ''}`);
    }
  }
  if (report.findings_omitted > 0) lines.push(`(${report.findings_omitted} more not listed)`);
  return lines;
}

/** `word` as one word of a POSIX shell's command line: as it is when it is plain, else in single quotes. */
function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}
