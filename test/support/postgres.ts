/**
 * A throwaway PostgreSQL cluster for tests: Debian's server binaries (/usr/lib/postgresql/<version>/bin,
 * installed by .ci/run), initdb on a temp folder, run as the `postgres` system user when the tests
 * run as root (postgres refuses root), listening on 127.0.0.1 at a free port with its Unix socket
 * inside that folder. Never the system cluster on 5432. Tuned for tests: no fsync, 200 connections.
 *
 * The e2e project starts one cluster per run (globalSetup test/support/postgres-global.ts); a test
 * file takes a fresh empty database from it:
 *
 *   const url = await freshDatabaseUrl();                 // postgres://postgres:…@127.0.0.1:…/test_…
 *   const svc = await startService({ env: { DATABASE_URL: url } });
 *
 * A unit test (or a bench script) starts its own:
 *
 *   const cluster = await startPostgresCluster();
 *   const url = await cluster.createDatabase();
 *   await psql(url, 'select 1');                          // tuples-only text output
 *   await cluster.stop();                                  // stops postgres, removes the folder
 *
 * If the process that started a cluster dies without stop() (vitest on Ctrl-C or SIGTERM calls
 * process.exit without tearing down; or SIGKILL), a watchdog that waits for the end of a pipe from
 * that process stops postgres and removes the folder.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { closeSync, existsSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { chown, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { inject } from 'vitest';
import { freePort } from './nginx.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The e2e run's cluster, as its superuser's URL (set by test/support/postgres-global.ts). */
    postgresAdminUrl: string;
  }
}

export interface PostgresCluster {
  /** Superuser URL of the `postgres` database: postgres://postgres:<password>@127.0.0.1:<port>/postgres */
  readonly adminUrl: string;
  /** cluster_name, which every process of the cluster shows in its command line (ps). */
  readonly name: string;
  /** The temp folder holding data directory, socket and log; removed by stop(). */
  readonly dir: string;
  /** Creates an empty database (from template0) and returns its URL. */
  createDatabase(name?: string): Promise<string>;
  /** Fast shutdown, then removes the folder. Safe to call twice. */
  stop(): Promise<void>;
}

/**
 * Durability off: a test cluster's data dies with it anyway. Connections: three service processes
 * with a pool of 10 each, plus the tests' own, with room to spare.
 */
const TEST_SETTINGS: Record<string, string> = {
  fsync: 'off',
  synchronous_commit: 'off',
  full_page_writes: 'off',
  max_connections: '200',
};

const PACKAGE_ROOT = '/usr/lib/postgresql';
let binDirCache: string | undefined;

/** The newest installed server version's bin folder (Debian: one folder per major version). */
export function postgresBinDir(): string {
  if (binDirCache) return binDirCache;
  const versions = existsSync(PACKAGE_ROOT)
    ? readdirSync(PACKAGE_ROOT).filter(
        (v) => /^\d+$/.test(v) && existsSync(path.join(PACKAGE_ROOT, v, 'bin', 'initdb')),
      )
    : [];
  const newest = versions.sort((a, b) => Number(b) - Number(a))[0];
  if (!newest)
    throw new Error(
      `no PostgreSQL server under ${PACKAGE_ROOT}/<version>/bin: apt-get install postgresql (bash .ci/run does)`,
    );
  binDirCache = path.join(PACKAGE_ROOT, newest, 'bin');
  return binDirCache;
}

/**
 * Runs SQL through psql against `url` and returns its unaligned, tuples-only output (rows on lines,
 * columns separated by |). The password travels in PGPASSWORD, not on the command line, where ps
 * would show it to anyone on the machine.
 */
export async function psql(url: string, sql: string): Promise<string> {
  const target = new URL(url);
  const password = decodeURIComponent(target.password);
  target.password = '';
  const { stdout } = await promisify(execFile)(
    path.join(postgresBinDir(), 'psql'),
    [
      '--no-psqlrc',
      '--quiet',
      '--no-align',
      '--tuples-only',
      '--set=ON_ERROR_STOP=1',
      '--dbname',
      target.href,
      '--command',
      sql,
    ],
    // Only what psql needs: a PGHOST, PGSERVICE or PGPORT from the caller must not redirect it.
    { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', PGPASSWORD: password, PGCONNECT_TIMEOUT: '10' } },
  );
  return stdout.trim();
}

/** Creates an empty database in the cluster behind `adminUrl` and returns its URL. */
export async function createDatabase(
  adminUrl: string,
  name = `test_${randomBytes(6).toString('hex')}`,
): Promise<string> {
  // Plain lower-case names need no quoting anywhere (URLs, SQL, psql's \c).
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name))
    throw new Error(`database name must match [a-z_][a-z0-9_]{0,62}: ${JSON.stringify(name)}`);
  await psql(adminUrl, `CREATE DATABASE ${name} TEMPLATE template0`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.href;
}

/**
 * PostgreSQL's answer to a startup message naming a database that does not exist (an
 * ErrorResponse, SQLSTATE 3D000): what a server sends a node whose database is gone, before it
 * hangs up. For servers of a test's own that refuse connections.
 */
export function databaseGoneMessage(): Buffer {
  const fields = Buffer.from('SFATAL\0C3D000\0Mdatabase "test" does not exist\0\0');
  const head = Buffer.alloc(5);
  head.write('E', 0);
  head.writeInt32BE(fields.length + 4, 1);
  return Buffer.concat([head, fields]);
}

/** Inside an e2e test file: a new empty database in the run's cluster, as a postgres:// URL. */
export async function freshDatabaseUrl(name?: string): Promise<string> {
  const adminUrl = inject('postgresAdminUrl');
  if (!adminUrl)
    throw new Error(
      'no PostgreSQL cluster was provided: freshDatabaseUrl() works in the e2e project; elsewhere use startPostgresCluster()',
    );
  return createDatabase(adminUrl, name);
}

/**
 * `durable`: PostgreSQL's own defaults for fsync and synchronous commit, as a deployment runs it;
 * benchmarks that compare against SQLite (which syncs its commits) need it. Tests do not.
 */
export async function startPostgresCluster(options: { durable?: boolean } = {}): Promise<PostgresCluster> {
  const binDir = postgresBinDir();
  const dir = await mkdtemp(path.join(tmpdir(), 'sf-pg-'));
  const name = path.basename(dir);
  const dataDir = path.join(dir, 'data');
  const socketDir = path.join(dir, 'socket');
  const logPath = path.join(dir, 'postgres.log');
  const password = randomBytes(16).toString('hex');
  const user = await serverUser();
  try {
    await mkdir(socketDir);
    const passwordFile = path.join(dir, 'password');
    await writeFile(passwordFile, `${password}\n`, { mode: 0o600 });
    if (user) for (const owned of [dir, socketDir, passwordFile]) await chown(owned, user.uid, user.gid);

    await run(
      path.join(binDir, 'initdb'),
      [
        '--pgdata',
        dataDir,
        '--username',
        'postgres',
        `--pwfile=${passwordFile}`,
        // The socket is reachable only by postgres and root (its folder is 0700); TCP needs the password.
        '--auth-local=trust',
        '--auth-host=scram-sha-256',
        '--encoding=UTF8',
        '--no-locale',
        '--no-sync',
        '--no-instructions',
      ],
      user,
      dir,
    );
    await rm(passwordFile);

    // A free port can be taken by someone else before postgres binds it: then try another.
    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      const postmaster = spawnPostmaster(
        binDir,
        dataDir,
        socketDir,
        port,
        name,
        logPath,
        user,
        options.durable ?? false,
      );
      const exited = new Promise<void>((resolve) => postmaster.once('exit', () => resolve()));
      if (postmaster.pid === undefined) throw (await once(postmaster, 'error'))[0];
      const watchdog = startWatchdog(postmaster.pid, dir);
      if (await becomesReady(dataDir, postmaster, exited)) {
        return clusterHandle({
          name,
          dir,
          adminUrl: `postgres://postgres:${password}@127.0.0.1:${port}/postgres`,
          postmaster,
          exited,
          watchdog,
        });
      }
      watchdog.kill('SIGKILL');
      const log = readLog(logPath);
      if (attempt === 3 || !/could not bind/.test(log)) throw new Error(`postgres did not start:\n${log}`);
    }
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

function clusterHandle(parts: {
  name: string;
  dir: string;
  adminUrl: string;
  postmaster: ChildProcess;
  exited: Promise<void>;
  watchdog: ChildProcess;
}): PostgresCluster {
  const { name, dir, adminUrl, postmaster, exited, watchdog } = parts;
  let stopping: Promise<void> | undefined;
  const stop = async () => {
    if (postmaster.exitCode === null && postmaster.signalCode === null) {
      postmaster.kill('SIGINT'); // fast shutdown: disconnects clients, no waiting for them
      // A shutdown stuck for seconds is a bug elsewhere; immediate shutdown still ends it.
      const escalation = setTimeout(() => postmaster.kill('SIGQUIT'), 10_000);
      await exited;
      clearTimeout(escalation);
    }
    await rm(dir, { recursive: true, force: true });
    // Only now: until here, the watchdog still covers a death of this process.
    if (watchdog.exitCode === null && watchdog.signalCode === null) {
      watchdog.ref(); // unref'd, its exit would not be awaited if nothing else kept this process alive
      const watchdogExited = once(watchdog, 'exit');
      watchdog.kill('SIGKILL');
      await watchdogExited;
    }
  };
  return {
    adminUrl,
    name,
    dir,
    createDatabase: (database) => createDatabase(adminUrl, database),
    stop: () => (stopping ??= stop()),
  };
}

/** The `postgres` user's ids when we are root (postgres will not run as root); null otherwise. */
async function serverUser(): Promise<{ uid: number; gid: number } | null> {
  if (process.getuid?.() !== 0) return null;
  const entry = (await readFile('/etc/passwd', 'utf8')).split('\n').find((line) => line.startsWith('postgres:'));
  const [, , uid, gid] = entry?.split(':') ?? [];
  if (uid === undefined || gid === undefined)
    throw new Error(
      "running as root, but there is no `postgres` user to run the server as (Debian's postgresql package creates it)",
    );
  return { uid: Number(uid), gid: Number(gid) };
}

function serverEnv(): NodeJS.ProcessEnv {
  // No PG* variables from the caller (PGDATA, PGPORT…), no locale surprises.
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C' };
}

async function run(
  file: string,
  args: string[],
  user: { uid: number; gid: number } | null,
  cwd: string,
): Promise<void> {
  try {
    await promisify(execFile)(file, args, { cwd, env: serverEnv(), ...(user ?? {}) });
  } catch (err) {
    const { stdout = '', stderr = '' } = err as { stdout?: string; stderr?: string };
    throw new Error(`${path.basename(file)} failed:\n${stdout}${stderr}`, { cause: err });
  }
}

function spawnPostmaster(
  binDir: string,
  dataDir: string,
  socketDir: string,
  port: number,
  name: string,
  logPath: string,
  user: { uid: number; gid: number } | null,
  durable: boolean,
): ChildProcess {
  const tuning = durable ? { max_connections: TEST_SETTINGS.max_connections! } : TEST_SETTINGS;
  const settings = {
    ...tuning,
    listen_addresses: '127.0.0.1',
    port: String(port),
    unix_socket_directories: socketDir,
    cluster_name: name,
  };
  // The log is a file, not a pipe to us: postgres must not depend on this process staying alive.
  const logFd = openSync(logPath, 'a');
  try {
    return spawn(
      path.join(binDir, 'postgres'),
      ['-D', dataDir, ...Object.entries(settings).flatMap(([key, value]) => ['-c', `${key}=${value}`])],
      {
        cwd: path.dirname(dataDir),
        env: serverEnv(),
        stdio: ['ignore', logFd, logFd],
        ...(user ?? {}),
      },
    );
  } finally {
    closeSync(logFd);
  }
}

/**
 * Ready once postmaster.pid's status line (the 8th) says so: that is what pg_ctl waits for, and it
 * comes after recovery, when connections are accepted. False when postgres exits first.
 */
async function becomesReady(dataDir: string, postmaster: ChildProcess, exited: Promise<void>): Promise<boolean> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (postmaster.exitCode !== null || postmaster.signalCode !== null) return false;
    const status = (await readFile(path.join(dataDir, 'postmaster.pid'), 'utf8').catch(() => ''))
      .split('\n')[7]
      ?.trim();
    if (status === 'ready') return true;
    await sleep(20);
  }
  postmaster.kill('SIGQUIT');
  await exited;
  return false;
}

/**
 * A shell that ignores the terminal's signals and waits for the end of its stdin, a pipe only this
 * process writes to: that end comes when this process dies. Then it stops the postmaster (if that pid
 * is still our postgres) and removes the folder. stop() kills it once it has done the same itself.
 */
function startWatchdog(postmasterPid: number, dir: string): ChildProcess {
  const script = `
    trap '' INT TERM HUP
    while read -r _; do :; done
    if grep -qF -- "$2" /proc/$1/cmdline 2>/dev/null; then
      kill -QUIT $1
      # Bounded: a postmaster left a zombie by a non-reaping init would answer kill -0 forever.
      i=0
      while kill -0 $1 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    fi
    rm -rf -- "$2"`;
  const watchdog = spawn('/bin/sh', ['-c', script, 'sf-pg-watchdog', String(postmasterPid), dir], {
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  // It must never keep this process alive.
  watchdog.unref();
  (watchdog.stdin as unknown as Socket).unref();
  return watchdog;
}

function readLog(logPath: string): string {
  try {
    return readFileSync(logPath, 'utf8');
  } catch {
    return '';
  }
}
