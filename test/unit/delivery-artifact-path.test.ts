import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, realpath, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createArtifactResolver, resolveArtifactPath } from '../../src/delivery/artifact-path.js';
import { ServiceError } from '../../src/errors.js';
import { artifactRelativePath } from '../../src/store/layout.js';

let dir: string;
let root: string;
let cid: string;
const linkCid = 'e'.repeat(64);
const dirLinkCid = 'f'.repeat(64);
const innerLinkCid = 'c'.repeat(64);
const evilCid = `ab${'0'.repeat(62)}`;

async function place(relative: string, bytes: string | Buffer): Promise<string> {
  const file = path.join(root, relative);
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, bytes);
  return file;
}

beforeAll(async () => {
  dir = await realpath(await mkdtemp(path.join(tmpdir(), 'sf-artifact-path-')));
  root = path.join(dir, 'root');
  await mkdir(root);
  await writeFile(path.join(dir, 'secret.txt'), 'secret');
  await mkdir(path.join(dir, 'outside'));
  await writeFile(path.join(dir, 'outside', 'audio.wav'), 'outside');
  // A sibling whose name extends the root's: a prefix check without the separator would pass it.
  await mkdir(path.join(dir, 'root-evil', 'ab', evilCid), { recursive: true });
  await writeFile(path.join(dir, 'root-evil', 'ab', evilCid, 'audio.wav'), 'evil');

  const bytes = Buffer.from('RIFF....WAVE');
  cid = createHash('sha256').update(bytes).digest('hex');
  const target = await place(artifactRelativePath(cid, 'audio.wav'), bytes);
  await mkdir(path.join(root, artifactRelativePath(cid, 'folder.wav')));
  // Symlinks inside the root: to a file outside, to a folder outside, and to a file inside.
  await mkdir(path.join(root, 'ee', linkCid), { recursive: true });
  await symlink(path.join(dir, 'secret.txt'), path.join(root, artifactRelativePath(linkCid, 'audio.wav')));
  await mkdir(path.join(root, 'ff'));
  await symlink(path.join(dir, 'outside'), path.join(root, 'ff', dirLinkCid));
  await mkdir(path.join(root, 'cc', innerLinkCid), { recursive: true });
  await symlink(target, path.join(root, artifactRelativePath(innerLinkCid, 'audio.wav')));
  await symlink(path.join(dir, 'root-evil', 'ab'), path.join(root, 'ab'));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function refusal(promise: Promise<unknown>): Promise<ServiceError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ServiceError);
  return err as ServiceError;
}

describe('resolveArtifactPath', () => {
  it('resolves a stored artifact to its real path, relative path, size and mtime', async () => {
    const found = await resolveArtifactPath(root, cid, 'audio.wav');
    expect(found.absolutePath).toBe(path.join(root, artifactRelativePath(cid, 'audio.wav')));
    expect(found.relativePath).toBe(artifactRelativePath(cid, 'audio.wav'));
    expect(found.size).toBe(12);
    expect(found.mtimeMs).toBeGreaterThan(0);
  });

  it('follows a symlink that stays inside the root, and reports where it really lands', async () => {
    const found = await resolveArtifactPath(root, innerLinkCid, 'audio.wav');
    expect(found.relativePath).toBe(artifactRelativePath(cid, 'audio.wav'));
  });

  it('works through a root that is itself a symlink', async () => {
    const alias = path.join(dir, 'root-alias');
    await symlink(root, alias);
    const found = await resolveArtifactPath(alias, cid, 'audio.wav');
    expect(found.relativePath).toBe(artifactRelativePath(cid, 'audio.wav'));
  });

  it.each([
    ['upper-case hex', () => cid.toUpperCase()],
    ['63 digits', () => cid.slice(1)],
    ['65 digits', () => `${cid}0`],
    ['traversal', () => '../../../../../../etc'],
    ['absolute', () => '/etc/passwd'],
    ['trailing newline', () => `${cid}\n`],
    ['empty', () => ''],
  ])('refuses a malformed cid (%s) with 400', async (_label, make) => {
    const err = await refusal(resolveArtifactPath(root, make(), 'audio.wav'));
    expect([err.kind, err.code]).toEqual(['invalid_input', 'artifact_path_invalid']);
  });

  it.each([
    ['..'],
    ['.'],
    ['../secret.txt'],
    ['../../../secret.txt'],
    ['..\\..\\secret.txt'],
    ['a\\b'],
    ['/etc/passwd'],
    ['sub/audio.wav'],
    ['audio.wav\0.txt'],
    ['\0'],
    ['audio\n.wav'],
    ['audio\u007f.wav'],
    ['audio\u0085.wav'],
    ['.hidden'],
    ['a'.repeat(256)],
    ['é'.repeat(128)], // 256 bytes of UTF-8
    [''],
    ['bad\ud800name'],
  ])('refuses the name %j with 400', async (name) => {
    const err = await refusal(resolveArtifactPath(root, cid, name));
    expect([err.kind, err.code]).toEqual(['invalid_input', 'artifact_path_invalid']);
    expect(err.message).not.toContain(root);
  });

  it.each([
    ['an unknown cid', () => 'd'.repeat(64), 'audio.wav'],
    ['an unknown name', () => cid, 'other.wav'],
    ['a folder', () => cid, 'folder.wav'],
    ['a symlink to a file outside the root', () => linkCid, 'audio.wav'],
    ['a symlinked folder pointing outside the root', () => dirLinkCid, 'audio.wav'],
    ['a symlink into a sibling whose name extends the root', () => evilCid, 'audio.wav'],
    ['percent-encoded dots taken literally', () => cid, '%2e%2e%2fsecret.txt'],
    ['double-encoded dots taken literally', () => cid, '%252e%252e%252fsecret.txt'],
    ['255 bytes that do not exist', () => cid, 'a'.repeat(255)],
  ])('answers %s with 404, saying nothing of paths', async (_label, makeCid, name) => {
    const err = await refusal(resolveArtifactPath(root, makeCid(), name));
    expect([err.kind, err.code]).toEqual(['not_found', 'artifact_not_found']);
    expect(err.message).not.toContain(dir);
  });

  it('a missing root is a 404, not a crash', async () => {
    const err = await refusal(resolveArtifactPath(path.join(dir, 'nope'), cid, 'audio.wav'));
    expect(err.kind).toBe('not_found');
  });

  it('property: any cid and name either is refused or resolves to a file inside the root', async () => {
    const rootReal = await realpath(root);
    const fragments = [
      '..',
      '.',
      '/',
      '\\',
      '\0',
      '%2e',
      '%2f',
      '%5c',
      '%00',
      'audio.wav',
      'secret.txt',
      'outside',
      '\n',
      'é',
      ':',
      '~',
    ];
    const name = fc.oneof(
      fc.string({ maxLength: 300 }),
      fc.array(fc.constantFrom(...fragments), { maxLength: 8 }).map((parts) => parts.join('')),
      fc.constant('audio.wav'),
    );
    const anyCid = fc.oneof(
      fc.constantFrom(cid, linkCid, dirLinkCid, innerLinkCid, evilCid, cid.toUpperCase()),
      fc.string({ maxLength: 70 }),
      fc.stringMatching(/^[0-9a-f]{64}$/),
    );
    await fc.assert(
      fc.asyncProperty(anyCid, name, async (c, n) => {
        try {
          const found = await resolveArtifactPath(root, c, n);
          expect(found.absolutePath.startsWith(rootReal + path.sep)).toBe(true);
          expect(path.relative(rootReal, found.absolutePath).split(path.sep)).not.toContain('..');
        } catch (err) {
          expect(err).toBeInstanceOf(ServiceError);
          expect(['invalid_input', 'not_found']).toContain((err as ServiceError).kind);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('createArtifactResolver', () => {
  it('remembers a resolution for the time it is told, then looks again', async () => {
    let now = 0;
    const bytes = Buffer.from('remembered for a moment');
    const memoCid = createHash('sha256').update(bytes).digest('hex');
    const file = await place(artifactRelativePath(memoCid, 'audio.wav'), bytes);
    const resolve = createArtifactResolver(root, { now: () => now, ttlMs: 1000 });
    const first = await resolve(memoCid, 'audio.wav');
    await unlink(file);
    // Within the time: the remembered answer (the caller's open then finds the file gone).
    now = 999;
    expect(await resolve(memoCid, 'audio.wav')).toBe(first);
    // After it: resolved again, and the removal shows.
    now = 1000;
    const err = await refusal(resolve(memoCid, 'audio.wav'));
    expect(err.kind).toBe('not_found');
  });

  it('never remembers a miss or a refusal', async () => {
    const bytes = Buffer.from('stored a moment after the first request');
    const lateCid = createHash('sha256').update(bytes).digest('hex');
    const resolve = createArtifactResolver(root, { now: () => 0 });
    expect((await refusal(resolve(lateCid, 'audio.wav'))).kind).toBe('not_found');
    await place(artifactRelativePath(lateCid, 'audio.wav'), bytes);
    expect((await resolve(lateCid, 'audio.wav')).size).toBe(bytes.length);
    // Refusals stay refusals, whatever was remembered for valid addresses.
    expect((await refusal(resolve(linkCid, 'audio.wav'))).kind).toBe('not_found');
    expect((await refusal(resolve(cid, '../secret.txt'))).kind).toBe('invalid_input');
    expect((await refusal(resolve(cid.toUpperCase(), 'audio.wav'))).kind).toBe('invalid_input');
  });

  it('keeps at most maxEntries addresses, forgetting the oldest', async () => {
    const cids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const bytes = Buffer.from(`bounded ${i}`);
      cids.push(createHash('sha256').update(bytes).digest('hex'));
      await place(artifactRelativePath(cids[i]!, 'audio.wav'), bytes);
    }
    const resolve = createArtifactResolver(root, { now: () => 0, maxEntries: 2 });
    for (const c of cids) await resolve(c, 'audio.wav');
    // The oldest was forgotten: its removal shows at once; the two newest are still remembered.
    await unlink(path.join(root, artifactRelativePath(cids[0]!, 'audio.wav')));
    await unlink(path.join(root, artifactRelativePath(cids[2]!, 'audio.wav')));
    expect((await refusal(resolve(cids[0]!, 'audio.wav'))).kind).toBe('not_found');
    expect((await resolve(cids[2]!, 'audio.wav')).size).toBe(9);
  });
});
