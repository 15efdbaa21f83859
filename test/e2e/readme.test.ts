/**
 * The README's walk-through, run as it is written: its shell blocks, in order, in one bash, from a
 * checkout of its own (this one's files linked into a temp folder, so that its `data/` and the
 * files it writes are its own) inside a network namespace of its own, so that its fixed ports
 * (8080, 8000) are free and nothing it starts can reach past loopback. The blocks start the file
 * server and the service themselves; this test checks what each printed and wrote, that the file
 * server shows the tone and nothing else, and that the last block stops everything.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readDoc, shellBlocks } from '../support/doc-blocks.js';
import { HEAVY_TEST_TIMEOUT_MS, ROOT } from '../support/service.js';

/** The checkout's own state, which the walk-through makes afresh. */
const NOT_LINKED = new Set(['.git', 'data', '.tmp', 'test-results', 'coverage']);

let checkout: string;
let result: { code: number | null; stdout: string; stderr: string; segments: Map<string, string> };

beforeAll(async () => {
  checkout = await mkdtemp(path.join(tmpdir(), 'sf-readme-'));
  for (const entry of await readdir(ROOT)) {
    if (!NOT_LINKED.has(entry)) await symlink(path.join(ROOT, entry), path.join(checkout, entry));
  }
  const blocks = shellBlocks(readDoc('README.md'), '## Walk-through');
  expect(blocks.length).toBe(8);
  const marker = (name: string) => `printf '\\n::%s::\\n' '${name}'`;
  const script = [
    'set -eo pipefail',
    // The namespace's loopback starts down.
    'ip link set lo up',
    ...blocks.flatMap((block, i) => [
      marker(`block ${i}`),
      block,
      ...(i === 0 ? [marker('media'), 'echo "$MEDIA"'] : []),
      // Before the last block (which stops it): what the file server serves.
      ...(i === blocks.length - 2
        ? [
            marker('served'),
            // The tone; this checkout's key, were /tmp served (the checkout is in it); the listing.
            ...['/tone.m4a', `/${path.basename(checkout)}/data/api-key`].map(
              (target) => `curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:8000${target}`,
            ),
            marker('listing'),
            'curl -s http://127.0.0.1:8000/',
          ]
        : []),
    ]),
    marker('end'),
    // What the last block stopped: the script ends when they have.
    'wait',
  ].join('\n');
  const child = spawn('unshare', ['--net', '--', 'bash', '-c', script], {
    cwd: checkout,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      TMPDIR: tmpdir(),
      // The service's JSON log kept to errors, so that it does not run into the blocks' output.
      LOG_LEVEL: 'error',
      // No registry from a namespace without a network.
      npm_config_update_notifier: 'false',
    },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), HEAVY_TEST_TIMEOUT_MS - 30_000);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(timer);
  // Whatever the script left behind (it should have left nothing).
  try {
    process.kill(-child.pid!, 'SIGKILL');
  } catch {
    // the group is gone
  }
  const segments = new Map<string, string>();
  const parts = stdout.split(/\n::([^:\n]+)::\n/);
  for (let i = 1; i < parts.length; i += 2) segments.set(parts[i]!, parts[i + 1]!);
  result = { code, stdout, stderr, segments };
}, HEAVY_TEST_TIMEOUT_MS);

afterAll(async () => {
  const media = result?.segments.get('media')?.trim();
  if (media && media.startsWith(tmpdir())) await rm(media, { recursive: true, force: true });
  if (checkout) await rm(checkout, { recursive: true, force: true });
});

const segment = (name: string) => {
  const text = result.segments.get(name);
  if (text === undefined)
    throw new Error(`the walk-through never reached ${name}:\n${result.stdout}\n${result.stderr}`);
  return text;
};
const sha256 = async (file: string) =>
  createHash('sha256')
    .update(await readFile(file))
    .digest('hex');
/** The job's content id, from the record the third block prints. */
const contentId = () => /"content_id":"([0-9a-f]{64})"/.exec(segment('block 2'))?.[1];

describe("the README's walk-through, run as written", () => {
  it('runs to its end, and its last block stops the file server and the service', () => {
    expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0);
    expect(result.segments.has('end')).toBe(true);
  });

  it('starts the service, which generates the key and says in plain words where it is and what to open', async () => {
    const keyFile = path.join(checkout, 'data/api-key');
    expect((await stat(keyFile)).mode & 0o777).toBe(0o600);
    expect(result.stderr).toContain('source-fetch is ready: open http://127.0.0.1:8080/ in a browser.');
    expect(result.stderr).toContain(`The API key was generated into ${keyFile}`);
    const key = (await readFile(keyFile, 'utf8')).trim();
    expect(result.stdout + result.stderr).not.toContain(key);
  });

  it('fetches the tone: the record is done, and the WAV downloaded by curl hashes to its content id', () => {
    expect(segment('block 2')).toMatch(/"status":"done"/);
    expect(contentId()).toMatch(/^[0-9a-f]{64}$/);
    expect(segment('block 3').trim()).toBe(`${contentId()}  audio.wav`);
  });

  it('answers the same URL born done, and cancels another one', () => {
    const again = segment('block 4');
    expect(again).toContain('"born_done":true');
    expect(again).toContain(`"content_id":"${contentId()}"`);
    expect(segment('block 5')).toMatch(/"status":"canceled"/);
  });

  it("runs the CLI line: the WAV it writes hashes to the job's content id", async () => {
    expect(segment('block 6')).toMatch(/wrote tone\.wav \(.*\): SHA-256 matches the content id/);
    expect(await sha256(path.join(checkout, 'tone.wav'))).toBe(contentId());
  });

  it('serves the tone from a folder of its own, and nothing else; the last block removes it', () => {
    expect(segment('served')).toBe('200 404 ');
    const listed = [...segment('listing').matchAll(/<a href="([^"]+)">/g)].map((link) => link[1]);
    expect(listed).toEqual(['tone.m4a']);
    const media = segment('media').trim();
    expect(path.dirname(media)).toBe(tmpdir());
    expect(existsSync(media)).toBe(false);
  });
});
