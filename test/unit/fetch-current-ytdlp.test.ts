/**
 * scripts/fetch-current-ytdlp.sh, which the image's build (Dockerfile) and .ci/run fetch yt-dlp
 * with, against a Debian archive of this test's own (a file: archive signed with a key made here,
 * holding two yt-dlp packages whose launchers print their versions): a pin the archive offers is
 * taken and checked against its SHA-256; a pin that has left it is replaced by the newest with
 * --or-newest, as the image's build does, saying so; without --or-newest it stops (the control);
 * a pinned version whose package differs is refused either way.
 */
import { execFile, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../support/service.js';

const run = promisify(execFile);
const SCRIPT = path.join(ROOT, 'scripts/fetch-current-ytdlp.sh');
const OLDER = { debian: '2030.01.01-1', upstream: '2030.01.01' };
const NEWER = { debian: '2030.02.01-1', upstream: '2030.02.01' };
const GONE = '2029.12.01-1';

let archive: string;
let keyring: string;
const digests = new Map<string, string>();
const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

/** A yt-dlp package as Debian's is laid out: the launcher script, the module, the copyright file. */
function buildPackage(version: { debian: string; upstream: string }, pool: string): string {
  const tree = mkdtempSync(path.join(archive, 'tree-'));
  const file = (relative: string, text: string, mode = 0o644) => {
    const target = path.join(tree, relative);
    mkdirSync(path.dirname(target), { recursive: true });
    writeFileSync(target, text);
    chmodSync(target, mode);
  };
  file(
    'DEBIAN/control',
    `Package: yt-dlp\nVersion: ${version.debian}\nArchitecture: all\nMaintainer: Test <test@localhost>\nDescription: a stand-in for the test\n`,
  );
  file('usr/bin/yt-dlp', '#! /usr/bin/python3\nimport sys\nfrom yt_dlp import main\nsys.exit(main())\n', 0o755);
  file(
    'usr/lib/python3/dist-packages/yt_dlp/__init__.py',
    `import sys\n\ndef main():\n    print('${version.upstream}' if '--version' in sys.argv else 'usage')\n    return 0\n`,
  );
  file('usr/share/doc/yt-dlp/copyright', 'Public domain, for the test.\n');
  const deb = path.join(pool, `yt-dlp_${version.debian}_all.deb`);
  execFileSync('dpkg-deb', ['--root-owner-group', '--build', tree, deb], { stdio: 'pipe' });
  rmSync(tree, { recursive: true, force: true });
  return deb;
}

beforeAll(() => {
  archive = mkdtempSync(path.join(tmpdir(), 'sf-debian-archive-'));
  // Readable by apt's _apt user when the test runs as root.
  chmodSync(archive, 0o755);
  const gnupg = mkdtempSync(path.join(tmpdir(), 'sf-gnupg-'));
  try {
    const gpg = (...args: string[]) =>
      execFileSync('gpg', ['--batch', '--homedir', gnupg, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    gpg(
      '--passphrase',
      '',
      '--quick-gen-key',
      'source-fetch test archive <test@localhost>',
      'ed25519',
      'sign',
      'never',
    );
    keyring = path.join(archive, 'keyring.gpg');
    writeFileSync(keyring, gpg('--export'));

    const pool = path.join(archive, 'pool');
    mkdirSync(pool);
    const arch = execFileSync('dpkg', ['--print-architecture'], { encoding: 'utf8' }).trim();
    const stanzas = [OLDER, NEWER].map((version) => {
      const deb = buildPackage(version, pool);
      const bytes = readFileSync(deb);
      digests.set(version.debian, sha256(bytes));
      return [
        'Package: yt-dlp',
        `Version: ${version.debian}`,
        'Architecture: all',
        'Maintainer: Test <test@localhost>',
        `Filename: pool/${path.basename(deb)}`,
        `Size: ${bytes.length}`,
        `SHA256: ${sha256(bytes)}`,
        'Description: a stand-in for the test',
        '',
      ].join('\n');
    });
    const packagesPath = `main/binary-${arch}/Packages`;
    const dists = path.join(archive, 'dists/unstable');
    mkdirSync(path.join(dists, path.dirname(packagesPath)), { recursive: true });
    const packages = Buffer.from(stanzas.join('\n'));
    writeFileSync(path.join(dists, packagesPath), packages);
    writeFileSync(
      path.join(dists, 'Release'),
      [
        'Origin: source-fetch test',
        'Suite: unstable',
        'Codename: sid',
        `Date: ${new Date().toUTCString()}`,
        `Architectures: ${arch} all`,
        'Components: main',
        'SHA256:',
        ` ${sha256(packages)} ${packages.length} ${packagesPath}`,
        '',
      ].join('\n'),
    );
    gpg('--clearsign', '--output', path.join(dists, 'InRelease'), path.join(dists, 'Release'));
  } finally {
    rmSync(gnupg, { recursive: true, force: true });
  }
}, 60_000);

afterAll(() => {
  if (archive) rmSync(archive, { recursive: true, force: true });
});

/** The script against the test's archive (checked with its key); its launcher's path, or the failure. */
async function fetchYtdlp(
  args: string[],
  archiveKeyring = keyring,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return run(SCRIPT, args, {
    env: {
      PATH: process.env.PATH,
      DEBIAN_MIRROR: `file:${archive}`,
      YTDLP_SUITES: 'unstable',
      DEBIAN_ARCHIVE_KEYRING: archiveKeyring,
    },
  }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (err: { code: number; stdout: string; stderr: string }) => ({
      code: err.code,
      stdout: err.stdout,
      stderr: err.stderr,
    }),
  );
}

const into = () => path.join(mkdtempSync(path.join(archive, 'into-')), 'yt-dlp');
const versionOf = (launcher: string) => execFileSync(launcher, ['--version'], { encoding: 'utf8' }).trim();

describe('fetch-current-ytdlp.sh', () => {
  it('takes a pin the archive offers, checked against its SHA-256, with or without --or-newest', async () => {
    for (const orNewest of [[], ['--or-newest']]) {
      const folder = into();
      const fetched = await fetchYtdlp([
        '--version',
        OLDER.debian,
        '--sha256',
        digests.get(OLDER.debian)!,
        ...orNewest,
        '--into',
        folder,
      ]);
      expect(fetched.code, fetched.stderr).toBe(0);
      expect(fetched.stdout.trim()).toBe(path.join(folder, 'yt-dlp'));
      expect(versionOf(path.join(folder, 'yt-dlp'))).toBe(OLDER.upstream);
      expect(fetched.stderr).not.toContain('no longer');
      expect(readFileSync(path.join(folder, 'debian-package.sha256'), 'utf8')).toContain(digests.get(OLDER.debian));
    }
  });

  it('replaces a pin that has left the archive by the newest with --or-newest, saying so (the image build)', async () => {
    const folder = into();
    const fetched = await fetchYtdlp(['--version', GONE, '--sha256', 'a'.repeat(64), '--or-newest', '--into', folder]);
    expect(fetched.code, fetched.stderr).toBe(0);
    expect(fetched.stderr).toContain(
      `yt-dlp ${GONE}, the pin, is no longer in file:${archive} (unstable): taking the newest it offers, ${NEWER.debian}, unpinned`,
    );
    expect(fetched.stderr).toContain(`(Debian ${NEWER.debian}, ${digests.get(NEWER.debian)}) unpacked into ${folder}`);
    expect(versionOf(fetched.stdout.trim())).toBe(NEWER.upstream);
    expect(statSync(path.join(folder, 'yt-dlp')).mode & 0o111).not.toBe(0);
  });

  it('stops at a pin that has left the archive without --or-newest (the control)', async () => {
    const folder = into();
    const fetched = await fetchYtdlp(['--version', GONE, '--into', folder]);
    expect(fetched.code).toBe(1);
    expect(fetched.stderr).toContain(
      `yt-dlp ${GONE} is not in file:${archive} (unstable), which offers ${NEWER.debian}`,
    );
  });

  it('refuses a pinned version whose package is not the pinned one, --or-newest or not', async () => {
    const fetched = await fetchYtdlp([
      '--version',
      OLDER.debian,
      '--sha256',
      'b'.repeat(64),
      '--or-newest',
      '--into',
      into(),
    ]);
    expect(fetched.code).toBe(1);
    expect(fetched.stderr).toContain(`yt-dlp ${OLDER.debian}'s package is not the pinned one`);
  });

  it("refuses an archive its keyring does not vouch for (Debian's own keyring, here)", async () => {
    const fetched = await fetchYtdlp(
      ['--version', 'newest', '--into', into()],
      '/usr/share/keyrings/debian-archive-keyring.gpg',
    );
    expect(fetched.code).not.toBe(0);
    expect(fetched.stderr).toMatch(/NO_PUBKEY|not signed|signature/i);
  });
});
