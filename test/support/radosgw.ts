/**
 * A one-node Ceph with radosgw for a test file, started by scripts/radosgw.sh in a temp folder
 * (RADOSGW_DIR) and stopped by it: the real S3-compatible store the object-store tests talk to
 * (docs/object-storage.md). Some 20–50 s to start on two busy cores, so once per test file:
 *
 *   const gw = await startRadosgw();          // throws in CI when the Ceph packages are missing
 *   if ('missing' in gw) ctx.skip(gw.missing); // outside CI: the reason to skip
 *   gw.env.S3_ENDPOINT                         // http://127.0.0.1:<port>, and the test user's keys
 *   await gw.stop();                           // stops the daemons, removes the folder
 *
 * If the process that started it dies without stop(), a watchdog that waits for the end of a
 * pipe from that process runs the script's stop and removes the folder.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export const RADOSGW_SCRIPT = fileURLToPath(new URL('../../scripts/radosgw.sh', import.meta.url));
/** What the script runs, from Debian's radosgw, ceph-mon and ceph-osd packages (.ci/run installs them). */
const CEPH_BINARIES = ['/usr/bin/radosgw', '/usr/bin/radosgw-admin', '/usr/bin/ceph-mon', '/usr/bin/ceph-osd'];

export interface RadosgwEnv {
  S3_ENDPOINT: string;
  S3_REGION: string;
  S3_ACCESS_KEY_ID: string;
  S3_SECRET_ACCESS_KEY: string;
}

export interface Radosgw {
  /** The folder the script keeps the cluster in (its ceph.conf is in every daemon's command line). */
  readonly dir: string;
  readonly env: RadosgwEnv;
  /** Runs the script with this cluster's folder: its stdout, or a rejection with its stderr. */
  script(command: 'start' | 'stop' | 'status' | 'env'): Promise<string>;
  /** Stops the daemons and removes the folder. Safe to call twice. */
  stop(): Promise<void>;
}

/** The Ceph binaries missing here, or undefined when all are installed. */
export function missingCephBinaries(): string | undefined {
  const missing = CEPH_BINARIES.filter((binary) => !existsSync(binary));
  return missing.length === 0 ? undefined : missing.join(', ');
}

/**
 * Starts a cluster in a fresh temp folder. Without the Ceph packages: outside CI, `{ missing }`
 * says what to install (the caller skips with it); in CI (`CI` set, not to false) it throws, as a
 * test that silently skips there would hide that the store is not tested.
 */
export async function startRadosgw(): Promise<Radosgw | { missing: string }> {
  const missing = missingCephBinaries();
  if (missing !== undefined) {
    const reason = `Ceph is not installed (${missing} missing): apt-get install --no-install-recommends radosgw ceph-mon ceph-osd`;
    if (inCi()) throw new Error(`${reason}; in CI (CI=${process.env.CI}) this test must not be skipped`);
    return { missing: reason };
  }
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-radosgw-'));
  const watchdog = startWatchdog(dir);
  const script = async (command: string) => {
    const { stdout } = await promisify(execFile)(RADOSGW_SCRIPT, [command], {
      env: { ...process.env, RADOSGW_DIR: dir },
      timeout: 240_000,
    }).catch((err: unknown) => {
      const { stderr } = err as { stderr?: string };
      throw new Error(`scripts/radosgw.sh ${command} failed: ${stderr ?? String(err)}`, { cause: err });
    });
    return stdout;
  };
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      await script('stop');
      await rm(dir, { recursive: true, force: true });
      // Only now: until here, the watchdog still covers a death of this process.
      if (watchdog.exitCode === null && watchdog.signalCode === null) {
        watchdog.ref();
        const exited = once(watchdog, 'exit');
        watchdog.kill('SIGKILL');
        await exited;
      }
    })());
  try {
    const env = parseEnv(await script('start'));
    return { dir, env, script, stop };
  } catch (err) {
    await stop().catch(() => undefined);
    throw err;
  }
}

/** Whether CI is set, as CI services set it: to anything but empty, 0 or false. */
function inCi(): boolean {
  const value = (process.env.CI ?? '').trim().toLowerCase();
  return value !== '' && value !== '0' && value !== 'false';
}

/** The script's `KEY=value` lines. */
export function parseEnv(text: string): RadosgwEnv {
  const values = new Map(
    text
      .split('\n')
      .filter((line) => line.includes('='))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)] as const),
  );
  const value = (key: keyof RadosgwEnv) => {
    const found = values.get(key);
    if (!found) throw new Error(`scripts/radosgw.sh printed no ${key}: ${text}`);
    return found;
  };
  return {
    S3_ENDPOINT: value('S3_ENDPOINT'),
    S3_REGION: value('S3_REGION'),
    S3_ACCESS_KEY_ID: value('S3_ACCESS_KEY_ID'),
    S3_SECRET_ACCESS_KEY: value('S3_SECRET_ACCESS_KEY'),
  };
}

function startWatchdog(dir: string): ChildProcess {
  const script = `
    trap '' INT TERM HUP
    while read -r _; do :; done
    RADOSGW_DIR="$2" "$1" stop
    rm -rf -- "$2"`;
  const watchdog = spawn('/bin/sh', ['-c', script, 'sf-radosgw-watchdog', RADOSGW_SCRIPT, dir], {
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  // It must never keep this process alive.
  watchdog.unref();
  (watchdog.stdin as unknown as Socket).unref();
  return watchdog;
}
