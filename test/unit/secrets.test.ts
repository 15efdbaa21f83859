import { writeFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadOrCreateSecret, loadOrCreateServiceSecret } from '../../src/secrets.js';
import { webhookSecretProblem, whsecOf } from '../../src/webhooks/signature.js';
import { openTestDatabase } from '../support/test-database.js';

/** loadOrCreateSecret: the API key and URL signing secret kept in the data dir when the configuration gives none. */
let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'secrets-unit-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const BASE64URL = /^[A-Za-z0-9_-]+$/;

describe('loadOrCreateSecret', () => {
  it('creates the file at first call: mode 0600, 32 random bytes as base64url, one line', async () => {
    const first = loadOrCreateSecret(dir, 'api-key');
    expect(first).toEqual({ value: expect.stringMatching(BASE64URL), file: path.join(dir, 'api-key'), created: true });
    expect(first.value).toHaveLength(43);
    const info = await stat(first.file);
    expect(info.isFile()).toBe(true);
    expect(info.mode & 0o777).toBe(0o600);
    expect(await readFile(first.file, 'utf8')).toBe(`${first.value}\n`);
  });

  it('is 0600 whatever the umask lets through', async () => {
    const previous = process.umask(0o000);
    try {
      const made = loadOrCreateSecret(dir, 'url-signing-secret');
      expect((await stat(made.file)).mode & 0o777).toBe(0o600);
    } finally {
      process.umask(previous);
    }
  });

  it('returns the same value at every later call, without rewriting the file', async () => {
    const first = loadOrCreateSecret(dir, 'api-key');
    const before = await stat(first.file);
    const again = loadOrCreateSecret(dir, 'api-key');
    expect(again).toEqual({ value: first.value, file: first.file, created: false });
    const after = await stat(first.file);
    expect(after.ino).toBe(before.ino);
    expect(after.mtimeMs).toBe(before.mtimeMs);
    expect(loadOrCreateSecret(dir, 'api-key').value).toBe(first.value);
  });

  it('keeps each name apart, and two data dirs get different secrets', () => {
    const key = loadOrCreateSecret(dir, 'api-key');
    const signing = loadOrCreateSecret(dir, 'url-signing-secret');
    expect(signing.file).toBe(path.join(dir, 'url-signing-secret'));
    expect(signing.value).not.toBe(key.value);
    const other = loadOrCreateSecret(path.join(dir, 'other'), 'api-key');
    expect(other.value).not.toBe(key.value);
  });

  it('makes the data dir when it does not exist yet', async () => {
    const nested = path.join(dir, 'a', 'b', 'data');
    const made = loadOrCreateSecret(nested, 'api-key');
    expect(made.created).toBe(true);
    expect(await readFile(path.join(nested, 'api-key'), 'utf8')).toBe(`${made.value}\n`);
  });

  it('honours the byte count', () => {
    expect(loadOrCreateSecret(dir, 'short', 16).value).toHaveLength(22);
    expect(loadOrCreateSecret(dir, 'long', 48).value).toHaveLength(64);
  });

  it('reads a secret an operator wrote, trimmed, and leaves the file as it was', async () => {
    const file = path.join(dir, 'api-key');
    await writeFile(file, '  operator-chosen-key-0123456789 \n\n', { mode: 0o640 });
    await chmod(file, 0o640);
    expect(loadOrCreateSecret(dir, 'api-key')).toEqual({
      value: 'operator-chosen-key-0123456789',
      file,
      created: false,
    });
    expect(await readFile(file, 'utf8')).toBe('  operator-chosen-key-0123456789 \n\n');
    expect((await stat(file)).mode & 0o777).toBe(0o640);
  });

  it('throws, rather than replacing it, when the file cannot be read', async () => {
    await mkdir(path.join(dir, 'api-key'));
    expect(() => loadOrCreateSecret(dir, 'api-key')).toThrow(expect.objectContaining({ code: 'EISDIR' }));
  });

  // An empty or blank file (a crash mid-write in an older version, or a `touch`) once made the
  // create fail with EEXIST and retry forever: the service could not start.
  it('replaces an empty or blank file with a fresh secret, mode 0600, kept from then on', async () => {
    for (const content of ['', ' \n']) {
      const name = content === '' ? 'empty' : 'blank';
      writeFileSync(path.join(dir, name), content, { mode: 0o644 });
      const made = loadOrCreateSecret(dir, name);
      expect(made).toMatchObject({ value: expect.stringMatching(BASE64URL), created: true });
      expect(made.value).toHaveLength(43);
      expect((await stat(made.file)).mode & 0o777).toBe(0o600);
      expect(loadOrCreateSecret(dir, name)).toEqual({ ...made, created: false });
    }
  });

  it('leaves no temporary file behind', async () => {
    loadOrCreateSecret(dir, 'api-key');
    loadOrCreateSecret(dir, 'api-key');
    expect(await readdir(dir)).toEqual(['api-key']);
  });
});

describe('loadOrCreateServiceSecret', () => {
  it('on SQLite, keeps the secret in the data dir', async () => {
    const database = await openTestDatabase('sqlite');
    try {
      const made = await loadOrCreateServiceSecret({
        database,
        dataDir: dir,
        name: 'webhook-secret',
        now: 1,
        mirror: true,
      });
      expect(made).toMatchObject({ created: true, file: path.join(dir, 'webhook-secret') });
      expect((await readFile(path.join(dir, 'webhook-secret'), 'utf8')).trim()).toBe(made.value);
      expect(
        await loadOrCreateServiceSecret({ database, dataDir: dir, name: 'webhook-secret', now: 2, mirror: true }),
      ).toEqual({ ...made, created: false });
    } finally {
      await database.close();
    }
  });

  it("on PostgreSQL, makes one secret for every node and copies it to each node's data dir when it must be read", async () => {
    const database = await openTestDatabase('postgres');
    const otherDir = await mkdtemp(path.join(tmpdir(), 'secrets-unit-'));
    try {
      const [one, two] = await Promise.all(
        [dir, otherDir].map((dataDir) =>
          loadOrCreateServiceSecret({ database, dataDir, name: 'webhook-secret', now: 1, mirror: true }),
        ),
      );
      expect(one!.value).toBe(two!.value);
      expect([one!.created, two!.created].sort()).toEqual([false, true]);
      for (const dataDir of [dir, otherDir]) {
        const file = path.join(dataDir, 'webhook-secret');
        expect((await readFile(file, 'utf8')).trim()).toBe(one!.value);
        expect((await stat(file)).mode & 0o777).toBe(0o600);
      }
      // Not mirrored: nothing in the data dir.
      const unmirrored = await loadOrCreateServiceSecret({
        database,
        dataDir: dir,
        name: 'url-signing-secret',
        now: 1,
        mirror: false,
      });
      expect(unmirrored.file).toBeUndefined();
      await expect(stat(path.join(dir, 'url-signing-secret'))).rejects.toMatchObject({ code: 'ENOENT' });
    } finally {
      await database.close();
      await rm(otherDir, { recursive: true, force: true });
    }
  });

  it.each(['sqlite', 'postgres'] as const)(
    'on %s, writes a secret with a form of its own in that form (the whsec_ of callbacks), base64url otherwise',
    async (kind) => {
      const database = await openTestDatabase(kind);
      try {
        const made = await loadOrCreateServiceSecret({
          database,
          dataDir: dir,
          name: `webhook-secret-${kind}`,
          now: 1,
          mirror: true,
          encode: whsecOf,
        });
        expect(made.value).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
        expect(webhookSecretProblem(made.value)).toBeNull();
        expect((await readFile(made.file!, 'utf8')).trim()).toBe(made.value);
        const plain = await loadOrCreateServiceSecret({
          database,
          dataDir: dir,
          name: `api-key-${kind}`,
          now: 1,
          mirror: true,
        });
        expect(plain.value).toMatch(BASE64URL);
      } finally {
        await database.close();
      }
    },
  );
});
