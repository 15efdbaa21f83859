/**
 * The `source-fetch` CLI from the built package (dist/cli/main.js; `npx source-fetch` through the
 * node_modules/.bin entry scripts/link-cli.sh makes at install), against the
 * real service and a media server on loopback: in a pseudo-terminal (util-linux `script`), where it
 * draws a progress bar (the download's percentage, then converting), and through a pipe, where it
 * prints plain lines; the WAV it writes hashes to its content id; every documented exit code.
 */
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT } from '../../src/cli/exit-codes.js';
import { artifactRelativePath } from '../../src/store/layout.js';
import { readDoc, relocate, shellBlocks } from '../support/doc-blocks.js';
import { writeSlowFfmpeg } from '../support/fake-tools.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { freePort } from '../support/nginx.js';
import { ROOT, startService, type ServiceHandle } from '../support/service.js';
import { rssFeed } from '../support/feeds.js';

const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const CLI = path.join(ROOT, 'dist/cli/main.js');

/**
 * The README's line that runs the CLI, in its walk-through (test/e2e/readme.test.ts runs the whole
 * walk-through), with the media URL it names; run here under npm 10 and npm 11 against this file's
 * media server.
 */
const README_MEDIA_URL = 'http://127.0.0.1:8000/tone.m4a';
const README_CLI_LINE = (() => {
  const lines = shellBlocks(readDoc('README.md'), '## Walk-through')
    .flatMap((block) => block.split('\n'))
    .filter((line) => line.includes('npx source-fetch'));
  if (lines.length !== 1)
    throw new Error(`the README's walk-through runs npx source-fetch ${lines.length} times, not once`);
  return lines[0]!;
})();

/**
 * npm of one major version, whose npx the README's line is run with: .ci/run installs npm 10 and 11
 * from the registry into .cache/npm/<major> (SOURCE_FETCH_NPM_DIR names another folder).
 */
function npmOfMajor(major: number): string {
  const bin = path.join(
    process.env.SOURCE_FETCH_NPM_DIR ?? path.join(ROOT, '.cache/npm'),
    String(major),
    'node_modules/.bin',
  );
  if (!existsSync(path.join(bin, 'npx')))
    throw new Error(
      `npm ${major} is not in ${bin}: npm install --prefix ${path.dirname(path.dirname(bin))} npm@${major} (as .ci/run does)`,
    );
  const version = execFileSync(path.join(bin, 'npm'), ['--version'], { encoding: 'utf8' }).trim();
  if (!version.startsWith(`${major}.`)) throw new Error(`${bin}/npm is ${version}, not npm ${major}`);
  return bin;
}

let media: MediaServer;
let svc: ServiceHandle;
let work: string;

beforeAll(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'sf-cli-'));
  media = await startMediaServer();
  // 6 s of 44.1 kHz stereo WAV (1 MB) at 256 KB/s: a download of about 4 s, with progress.
  const tone = await makeTone(FIXTURE_DIR, { seconds: 6, channels: 2, sampleRate: 44100, format: 'wav' });
  for (const name of ['tty', 'pipe-npm10', 'pipe-npm11', 'interrupted'])
    media.serveFile(`/${name}.wav`, tone.path, { contentType: 'audio/wav', throttleBytesPerSec: 256 * 1024 });
  const short = await makeTone(FIXTURE_DIR, { seconds: 1, channels: 1, sampleRate: 44100, format: 'wav' });
  media.serveFile('/short.wav', short.path, { contentType: 'audio/wav' });
  media.route('/hang.wav', () => {});
  // ffmpeg ends 2 s late: the conversion lasts long enough for "converting" to be seen.
  const ffmpeg = await writeSlowFfmpeg(path.join(work, 'tools'), 2);
  svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort, FFMPEG_PATH: ffmpeg, LOUDNESS: 'on' } });
});

afterAll(async () => {
  await svc?.stop();
  await media?.close();
  await rm(work, { recursive: true, force: true });
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function cliEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? '/root',
    SHELL: '/bin/sh',
    SOURCE_FETCH_URL: svc.baseUrl,
    SOURCE_FETCH_API_KEY: svc.apiKey,
    ...extra,
  };
}

/** Runs a command to its end; `onStdout` sees the output as it comes. */
function run(
  command: string,
  args: string[],
  opts: {
    env?: Record<string, string>;
    cwd?: string;
    onStdout?: (text: string, kill: (signal: NodeJS.Signals) => void) => void;
  } = {},
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      env: opts.env ?? cliEnv(),
      cwd: opts.cwd ?? work,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      opts.onStdout?.(stdout, (signal) => child.kill(signal));
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** The CLI with stdout a pipe. */
const cli = (args: string[], opts: Parameters<typeof run>[2] = {}) => run(CLI, args, opts);

/** The CLI in a pseudo-terminal: `script -qfec` runs it on a pty and exits with its code. */
function cliInTerminal(args: string[]): Promise<Run> {
  const quoted = [CLI, ...args].map((arg) => `'${arg.replaceAll("'", `'\\''`)}'`).join(' ');
  return run('script', ['-qfec', quoted, '/dev/null']);
}

const sha256 = async (file: string) =>
  createHash('sha256')
    .update(await readFile(file))
    .digest('hex');
const contentIdIn = (output: string) => /content id ([0-9a-f]{64})/.exec(output)?.[1];
const jobIdIn = (output: string) => /job ([0-9a-f-]{36})/.exec(output)?.[1];

describe('source-fetch fetch', () => {
  it('in a terminal: a progress bar with the download percentage, then converting; the WAV written hashes to its content id', async () => {
    const result = await cliInTerminal(['fetch', media.url('/tty.wav'), '-o', 'tty.wav']);
    expect(result.code, result.stdout).toBe(EXIT.ok);
    const screen = result.stdout;
    // Each redraw starts with a carriage return and an erase-line.
    const frames = screen.split('\r\x1b[2K').map((frame) => frame.replace(/\r?\n$/, ''));
    const percentages = frames
      .map((frame) => /^downloading \[[#-]+\]\s+(\d+\.\d)%/.exec(frame)?.[1])
      .filter((p): p is string => p !== undefined)
      .map(Number);
    expect(percentages.length).toBeGreaterThanOrEqual(2);
    expect(percentages).toEqual([...percentages].sort((a, b) => a - b));
    expect(percentages.some((p) => p > 0 && p < 100)).toBe(true);
    const converting = frames.findIndex((frame) => frame.startsWith('converting  [##########'));
    expect(converting).toBeGreaterThan(frames.findIndex((frame) => frame.startsWith('downloading [')));
    expect(screen).toMatch(
      /wrote tty\.wav \([\d.]+ MiB, 6\.0 s, 2 ch, -\d+\.\d LUFS, LRA \d+\.\d LU, true peak -\d+\.\d dBTP\): SHA-256 matches the content id/,
    );

    const cid = contentIdIn(screen)!;
    expect(await sha256(path.join(work, 'tty.wav'))).toBe(cid);
    expect((await svc.getJob(jobIdIn(screen)!)).result!.content_id).toBe(cid);
  });

  it.each([10, 11])(
    "through a pipe, as the README's line runs it (npx, npm %i): plain lines, no escape codes; the WAV hashes to its content id; nothing installed",
    async (major) => {
      const npmBin = npmOfMajor(major);
      // A folder inside the checkout, as a reader's shell in it: npx finds node_modules/.bin above.
      await mkdir(path.join(ROOT, '.tmp'), { recursive: true });
      const cwd = await mkdtemp(path.join(ROOT, '.tmp', 'cli-readme-'));
      const npmCache = await mkdtemp(path.join(tmpdir(), 'sf-npm-cache-'));
      try {
        const line = relocate(README_CLI_LINE, [[README_MEDIA_URL, media.url(`/pipe-npm${major}.wav`)]]);
        const result = await run('sh', ['-c', line], {
          cwd,
          env: {
            PATH: `${npmBin}:${process.env.PATH ?? '/usr/bin:/bin'}`,
            HOME: process.env.HOME ?? '/root',
            SOURCE_FETCH_URL: svc.baseUrl,
            KEY: svc.apiKey,
            // A cache of its own, to see that npx installed nothing into it; and never the registry.
            npm_config_cache: npmCache,
            npm_config_update_notifier: 'false',
            npm_config_offline: 'true',
          },
        });
        expect(result.code, result.stderr).toBe(EXIT.ok);
        expect(result.stdout).not.toMatch(/[\x1b\r]/);
        const jobId = jobIdIn(result.stdout)!;
        const lines = result.stdout.trimEnd().split('\n');
        for (const printed of lines.slice(0, -1)) {
          expect(printed).toMatch(
            new RegExp(
              `^job ${jobId}: (queued|starting|downloading \\d+%|converting|saving the WAV|done, content id [0-9a-f]{64})$`,
            ),
          );
        }
        const percents = lines
          .map((printed) => /downloading (\d+)%/.exec(printed)?.[1])
          .filter((p): p is string => p !== undefined)
          .map(Number);
        expect(percents.length).toBeGreaterThanOrEqual(2);
        expect(percents).toEqual([...percents].sort((a, b) => a - b));
        expect(lines).toContain(`job ${jobId}: converting`);
        expect(lines.at(-1)).toMatch(/^wrote tone\.wav \(.*\): SHA-256 matches the content id$/);
        expect(await sha256(path.join(cwd, 'tone.wav'))).toBe(contentIdIn(result.stdout));
        // npx ran the checkout's CLI as it is: no package in its cache, so no install and no build.
        expect(existsSync(path.join(npmCache, '_npx'))).toBe(false);
      } finally {
        await rm(cwd, { recursive: true, force: true });
        await rm(npmCache, { recursive: true, force: true });
      }
    },
  );

  it("writes the source's title by default (a direct link's own name when the file has no title tag); a URL already stored is born done", async () => {
    const first = await cli(['fetch', media.url('/short.wav')]);
    expect(first.code, first.stderr).toBe(EXIT.ok);
    const cid = contentIdIn(first.stdout)!;
    expect(first.stdout).toContain('wrote short.wav (');
    expect(await sha256(path.join(work, 'short.wav'))).toBe(cid);
    const again = await cli(['fetch', media.url('/short.wav'), '-o', 'again.wav']);
    expect(again.code).toBe(EXIT.ok);
    expect(again.stdout).toContain(`done (already stored), content id ${cid}`);
    expect(await sha256(path.join(work, 'again.wav'))).toBe(cid);
  });
});

describe('source-fetch fetch --playlist', () => {
  it('saves each entry of a feed into the folder as "<index> - <title>.wav", one line per entry; a failed and a refused entry make it exit 1, all saved 0', async () => {
    const feedBody = rssFeed('CLI Feed', media.url('/'), [
      { title: 'Short one', url: media.url('/short.wav?feed=1') },
      { title: 'Gone', url: media.url('/missing-in-feed.wav') },
      { title: 'Passwords', url: 'file:///etc/passwd' },
    ]);
    media.route('/feed.xml', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/rss+xml' });
      res.end(feedBody);
    });
    // The folder is made; each entry's line comes as it ends, the collection's final line last.
    const dir = path.join(work, 'feed');
    const result = await cli(['fetch', media.url('/feed.xml'), '--playlist', '-o', `${dir}/`]);
    expect(result.code, result.stderr).toBe(EXIT.jobFailed);
    const lines = result.stdout.trimEnd().split('\n');
    expect(lines.at(-1)).toMatch(/^collection [0-9a-f-]{36}: done: 3 found, 1 done, 1 failed, 1 refused$/);
    expect(lines).toContainEqual(expect.stringMatching(/^03 Passwords: refused: .+ \(url_scheme_not_allowed\)$/));
    expect(lines).toContainEqual(expect.stringMatching(/^01 Short one: wrote 01 - Short one\.wav \(/));
    expect(lines).toContainEqual('02 Gone: failed: Nothing was found at the source (HTTP 404). (http_not_found)');
    expect(await readdir(dir)).toEqual(['01 - Short one.wav']);
    const parentId = /^collection ([0-9a-f-]{36})/.exec(result.stdout)![1]!;
    const items = (await (await svc.request(`/jobs/${parentId}/items`)).json()) as {
      items: Array<{ job?: { result: { content_id: string } | null } }>;
    };
    expect(await sha256(path.join(dir, '01 - Short one.wav'))).toBe(items.items[0]!.job!.result!.content_id);

    // Cut at one entry, born done: all saved (0), beside the first file, not over it.
    const again = await cli(['fetch', media.url('/feed.xml'), '--playlist', '--max-items', '1', '-o', dir]);
    expect(again.code, again.stderr).toBe(EXIT.ok);
    expect(again.stdout).toMatch(
      /\n01 Short one: wrote 01 - Short one \(2\)\.wav \(.*, already stored\)\ncollection [0-9a-f-]{36}: done: 1 found, 1 done, 0 failed, 0 refused, cut at 1\n$/,
    );
    expect((await readdir(dir)).sort()).toEqual(['01 - Short one (2).wav', '01 - Short one.wav']);
  });
});

describe('source-fetch fetch --playlist, entry by entry', () => {
  it('saves an entry as soon as it ends, while another is still downloading', async () => {
    const tone = await makeTone(FIXTURE_DIR, { seconds: 1, channels: 1, sampleRate: 22050, format: 'wav' });
    const bytes = await readFile(tone.path);
    // The second entry's source answers nothing until the first entry's line is out.
    let released = false;
    const held: Array<() => void> = [];
    const release = () => {
      released = true;
      for (const answer of held.splice(0)) answer();
    };
    media.route('/held.wav', (_req, res) => {
      const answer = () => {
        res.writeHead(200, { 'content-type': 'audio/wav', 'content-length': bytes.length });
        res.end(bytes);
      };
      if (released) answer();
      else held.push(answer);
    });
    const feedBody = rssFeed('Held Feed', media.url('/'), [
      { title: 'Early', url: media.url('/short.wav?feed=early') },
      { title: 'Late', url: media.url('/held.wav') },
    ]);
    media.route('/held-feed.xml', (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/rss+xml' });
      res.end(feedBody);
    });
    const dir = path.join(work, 'held');
    let earlyWhileHeld: string[] | undefined;
    const result = await cli(['fetch', media.url('/held-feed.xml'), '--playlist', '-o', dir], {
      onStdout: (text) => {
        if (earlyWhileHeld === undefined && text.includes('01 Early: wrote ')) {
          earlyWhileHeld = readdirSync(dir);
          release();
        }
      },
    });
    expect(result.code, result.stderr).toBe(EXIT.ok);
    expect(earlyWhileHeld).toEqual(['01 - Early.wav']);
    expect((await readdir(dir)).sort()).toEqual(['01 - Early.wav', '02 - Late.wav']);
    expect(result.stdout).toMatch(
      /\n01 Early: wrote .*\n02 Late: wrote .*\ncollection [0-9a-f-]{36}: done: 2 found, 2 done/,
    );
  });
});

describe('exit codes', () => {
  it("1: the job failed (its sentence and code printed, the downloader's words below)", async () => {
    const result = await cli(['fetch', media.url('/missing.wav')]);
    expect(result.code).toBe(EXIT.jobFailed);
    expect(result.stdout).toMatch(
      /: failed: Nothing was found at the source \(HTTP 404\)\. \(http_not_found\)\n {2}detail: ERROR: .*HTTP Error 404/,
    );
    const status = await cli(['status', jobIdIn(result.stdout)!]);
    expect(status.stdout).toMatch(
      /\nerror {4}Nothing was found at the source \(HTTP 404\)\. \(http_not_found\)\ndetail {3}ERROR: .*HTTP Error 404/,
    );
  });

  it('2: usage: unknown command, missing argument, missing key, bad URL', async () => {
    expect((await cli(['frobnicate'])).code).toBe(EXIT.usage);
    expect((await cli(['fetch'])).code).toBe(EXIT.usage);
    expect((await cli(['status', 'a', 'b'])).code).toBe(EXIT.usage);
    const noKey = await cli(['status', 'x'], { env: cliEnv({ SOURCE_FETCH_API_KEY: '' }) });
    expect(noKey.code).toBe(EXIT.usage);
    expect(noKey.stderr).toContain('SOURCE_FETCH_API_KEY is not set');
    expect((await cli(['status', 'x'], { env: cliEnv({ SOURCE_FETCH_URL: 'ftp://127.0.0.1/' }) })).code).toBe(
      EXIT.usage,
    );
    // The control: help is not an error.
    const help = await cli(['--help']);
    expect(help.code).toBe(EXIT.ok);
    expect(help.stdout).toContain('Exit codes:');
  });

  it('3: the service refused: a refused destination, a wrong key, no such job, a finished job', async () => {
    const refused = await cli(['fetch', 'http://10.1.2.3/a.wav']);
    expect(refused.code).toBe(EXIT.refused);
    expect(refused.stderr).toContain('422 address_private');
    const wrongKey = await cli(['status', 'x'], { env: cliEnv({ SOURCE_FETCH_API_KEY: 'not-the-key-0123456789' }) });
    expect(wrongKey.code).toBe(EXIT.refused);
    expect(wrongKey.stderr).toContain('401 unauthorized');
    const missing = await cli(['status', 'no-such-job']);
    expect(missing.code).toBe(EXIT.refused);
    expect(missing.stderr).toContain('404 job_not_found');
    const done = await cli(['fetch', media.url('/short.wav'), '-o', 'short-again.wav']);
    const finished = await cli(['cancel', jobIdIn(done.stdout)!]);
    expect(finished.code).toBe(EXIT.refused);
    expect(finished.stderr).toContain('409 job_already_finished');
  });

  it('4: the service cannot be reached', async () => {
    // A port nothing listens on.
    const result = await cli(['status', 'x'], {
      env: cliEnv({ SOURCE_FETCH_URL: `http://127.0.0.1:${await freePort()}` }),
    });
    expect(result.code).toBe(EXIT.unavailable);
    expect(result.stderr).toContain('ECONNREFUSED');
  });

  it('5: a WAV whose SHA-256 is not its content id is not kept', async () => {
    const first = await cli(['fetch', media.url('/short.wav'), '-o', 'intact.wav']);
    const cid = contentIdIn(first.stdout)!;
    // The stored file is damaged behind the service's back, keeping its size.
    const stored = path.join(svc.dataDir, 'artifacts', artifactRelativePath(cid, 'audio.wav'));
    const bytes = await readFile(stored);
    const flipLastByte = () => bytes.writeUInt8(bytes.readUInt8(bytes.length - 1) ^ 0xff, bytes.length - 1);
    flipLastByte();
    await writeFile(stored, bytes);
    try {
      const dir = await mkdtemp(path.join(work, 'mismatch-'));
      const result = await cli(['fetch', media.url('/short.wav'), '-o', 'damaged.wav'], { cwd: dir });
      expect(result.code).toBe(EXIT.checksumMismatch);
      expect(result.stderr).toContain(`is not its content id ${cid}`);
      expect(await readdir(dir)).toEqual([]);
    } finally {
      flipLastByte();
      await writeFile(stored, bytes);
    }
  });

  it('6: the output cannot be written', async () => {
    const result = await cli(['fetch', media.url('/short.wav'), '-o', path.join(work, 'no-such-dir', 'x.wav')]);
    expect(result.code).toBe(EXIT.writeFailed);
    expect(result.stderr).toContain('ENOENT');
  });

  it('130: interrupted while following; the job goes on in the service', async () => {
    let sent = false;
    const result = await cli(['fetch', media.url('/interrupted.wav')], {
      onStdout: (text, kill) => {
        if (!sent && /downloading \d+%/.test(text)) {
          sent = true;
          kill('SIGINT');
        }
      },
    });
    expect(result.code).toBe(EXIT.interrupted);
    const jobId = jobIdIn(result.stdout)!;
    expect(result.stderr).toContain(`interrupted; job ${jobId} goes on in the service`);
    expect(['running', 'done']).toContain((await svc.getJob(jobId)).status);
    expect(existsSync(path.join(work, 'interrupted.wav'))).toBe(false);
  });
});

describe('source-fetch status and cancel', () => {
  it('status shows a job; --json gives its record', async () => {
    const done = await cli(['fetch', media.url('/short.wav'), '-o', 'status.wav']);
    const jobId = jobIdIn(done.stdout)!;
    const status = await cli(['status', jobId]);
    expect(status.code).toBe(EXIT.ok);
    expect(status.stdout).toMatch(new RegExp(`^job {6}${jobId}\\nstatus {3}done\\n`));
    expect(status.stdout).toContain(`content  ${contentIdIn(done.stdout)}`);
    const { loudness } = (await svc.getJob(jobId)).result!;
    expect(status.stdout).toContain(
      `loudness ${loudness!.integrated_lufs.toFixed(1)} LUFS, LRA ${loudness!.range_lu.toFixed(1)} LU, true peak ${loudness!.true_peak_dbtp.toFixed(1)} dBTP\n`,
    );
    const json = await cli(['status', jobId, '--json']);
    expect(json.code).toBe(EXIT.ok);
    expect(JSON.parse(json.stdout)).toMatchObject({
      job_id: jobId,
      status: 'done',
      result: { content_id: contentIdIn(done.stdout) },
    });
  });

  it('cancel stops a running job', async () => {
    const job = await svc.submit(media.url('/hang.wav'));
    await svc.waitForJob(job.job_id, ['running']);
    const result = await cli(['cancel', job.job_id]);
    expect(result.code).toBe(EXIT.ok);
    expect(result.stdout).toBe(`job ${job.job_id}: canceled\n`);
    expect((await svc.getJob(job.job_id)).status).toBe('canceled');
  });
});
