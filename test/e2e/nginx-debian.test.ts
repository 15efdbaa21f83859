/**
 * docs/operations.md's steps for nginx by hand, run as written against Debian's own nginx.conf
 * and default site (copied, unmodified, into a temp folder that stands for /etc/nginx; the paths
 * and port 80 moved there), with the real service behind it: Debian's nginx.conf loads the Lua
 * module through modules-enabled/, the default site has to go, the secret reaches nginx through
 * the environment file, nginx's workers (www-data) read the artifacts. And the TCP options the
 * template sets itself: under Debian's `tcp_nopush on`, nginx never corks this site's connections
 * and turns TCP_NODELAY on, seen in its system calls (strace), beside a server that inherits the
 * corking and does cork (the control). Also: the image's main config loads the module under any
 * prefix.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { chmod, copyFile, mkdir, mkdtemp, readdir, readFile, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import { Agent, get } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUrlSigner } from '../../src/delivery/signed-url.js';
import { artifactRelativePath, artifactUrlPath } from '../../src/store/layout.js';
import { readDoc, relocate, shellBlocks } from '../support/doc-blocks.js';
import { makeTone } from '../support/media.js';
import { freePort } from '../support/nginx.js';
import { ROOT, startService, type ServiceHandle } from '../support/service.js';
import { until } from '../support/until.js';

const run = promisify(execFile);
const HEADING = "### By hand, on Debian's nginx";
/** Debian's files the steps start from, which must be as the package installed them. */
const STOCK = ['/etc/nginx/nginx.conf', '/etc/nginx/sites-available/default'];

let temp: string;
let etc: string;
let logDir: string;
let artifactRoot: string;
let port: number;
let corkedPort: number;
let svc: ServiceHandle;
let nginx: ChildProcess;
let nginxExited: Promise<unknown>;
let secret: string;
let wav: { cid: string; bytes: Buffer };

/** The steps' `nginx`: Debian's binary on the copied /etc/nginx. */
const nginxArgs = () => ['-e', path.join(logDir, 'error.log'), '-c', path.join(etc, 'nginx.conf')];

/** Debian's recorded MD5 of each of its configuration files (dpkg's conffiles). */
async function conffileDigests(): Promise<Map<string, string>> {
  const { stdout } = await run('dpkg-query', ['-W', '-f=${Conffiles}\n', 'nginx-common']);
  return new Map(
    stdout
      .split('\n')
      .map((line) => line.trim().split(/\s+/))
      .filter((parts) => parts.length >= 2)
      .map(([file, digest]) => [file!, digest!]),
  );
}

beforeAll(async () => {
  const digests = await conffileDigests();
  for (const file of STOCK) {
    const digest = createHash('md5')
      .update(await readFile(file))
      .digest('hex');
    expect(digest, `${file} differs from the file Debian's nginx-common installed`).toBe(digests.get(file));
  }
  temp = await mkdtemp(path.join(tmpdir(), 'sf-nginx-debian-'));
  // nginx's workers run as www-data (Debian's `user`): the folders must let them through.
  await chmod(temp, 0o755);
  etc = path.join(temp, 'etc/nginx');
  logDir = path.join(temp, 'log');
  [port, corkedPort] = [await freePort(), await freePort()];
  const appPort = await freePort();
  for (const dir of ['conf.d', 'sites-available', 'sites-enabled', 'modules-enabled']) {
    await mkdir(path.join(etc, dir), { recursive: true });
  }
  await mkdir(logDir);
  await copyFile('/etc/nginx/mime.types', path.join(etc, 'mime.types'));
  for (const entry of await readdir('/etc/nginx/modules-enabled')) {
    await symlink(
      await readlink(path.join('/etc/nginx/modules-enabled', entry)),
      path.join(etc, 'modules-enabled', entry),
    );
  }
  await writeFile(
    path.join(etc, 'nginx.conf'),
    relocate(await readFile('/etc/nginx/nginx.conf', 'utf8'), [
      ['/etc/nginx/', `${etc}/`],
      ['/var/log/nginx/', `${logDir}/`],
      ['/run/nginx.pid', path.join(temp, 'nginx.pid')],
    ]),
  );
  await writeFile(
    path.join(etc, 'sites-available/default'),
    relocate(await readFile('/etc/nginx/sites-available/default', 'utf8'), [
      ['listen 80 default_server;', `listen 127.0.0.1:${port} default_server;`],
      ['listen [::]:80 default_server;', `listen [::1]:${port} default_server;`],
    ]),
  );
  await symlink(path.join(etc, 'sites-available/default'), path.join(etc, 'sites-enabled/default'));

  const blocks = shellBlocks(readDoc('docs/operations.md'), HEADING);
  expect(blocks).toHaveLength(3);
  // The packages the first block installs are the ones this machine has (.ci/run installs them).
  const packages = /^apt-get install -y (.+)$/.exec(blocks[0]!)![1]!.split(' ');
  for (const name of packages) {
    const { stdout } = await run('dpkg-query', ['-W', '-f=${Status}', name]);
    expect(stdout, name).toBe('install ok installed');
  }
  const steps = relocate(blocks[1]!, [
    ['/etc/nginx', etc],
    ['/srv/source-fetch', path.join(temp, 'srv/source-fetch')],
    ['/var/log/nginx', logDir],
    ['NGINX_PORT=80 ', `NGINX_PORT=127.0.0.1:${port} `],
    ['APP_UPSTREAM=127.0.0.1:8080 ', `APP_UPSTREAM=127.0.0.1:${appPort} `],
  ]);
  const script = `nginx() { /usr/sbin/nginx ${nginxArgs().join(' ')} "$@"; }\n${steps}\n`;
  await run('bash', ['-euo', 'pipefail', '-c', script], { cwd: ROOT, env: { PATH: process.env.PATH } });

  // The third block: nginx with the environment file systemd reads, and the app with the
  // settings it names and the secret it sources.
  const service = blocks[2]!;
  const secretFile = '/etc/nginx/source-fetch/secret.env';
  expect(service).toContain(`EnvironmentFile=${secretFile}`);
  expect(service).toContain(`. ${secretFile}`);
  const fromFile = (await readFile(secretFile.replace('/etc/nginx', etc), 'utf8')).trim();
  expect(fromFile).toMatch(/^URL_SIGNING_SECRET=[0-9a-f]{64}$/);
  secret = fromFile.slice('URL_SIGNING_SECRET='.length);
  const appEnv = Object.fromEntries(
    [...service.matchAll(/\b(ACCEL_REDIRECT_PREFIX|ARTIFACT_ROOT|NGINX_USAGE_LOG)=(\S+)/g)].map(([, name, value]) => [
      name!,
      value!.replace('/srv/source-fetch', path.join(temp, 'srv/source-fetch')),
    ]),
  );
  expect(Object.keys(appEnv).sort()).toEqual(['ACCEL_REDIRECT_PREFIX', 'ARTIFACT_ROOT', 'NGINX_USAGE_LOG']);
  artifactRoot = appEnv.ARTIFACT_ROOT!;
  svc = await startService({ env: { ...appEnv, URL_SIGNING_SECRET: secret, PORT: String(appPort) } });

  // Stored after the service's start-up, which removes content its database does not know.
  const tone = await makeTone(path.join(temp, 'media'), { seconds: 3, channels: 2, sampleRate: 44100, format: 'wav' });
  const bytes = await readFile(tone.path);
  wav = { cid: createHash('sha256').update(bytes).digest('hex'), bytes };
  const file = path.join(artifactRoot, artifactRelativePath(wav.cid, 'audio.wav'));
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, bytes);

  // A server that keeps Debian's http-wide corking (tcp_nopush on, with sendfile): the control.
  await writeFile(
    path.join(etc, 'conf.d/zz-corked-control.conf'),
    `server { listen 127.0.0.1:${corkedPort}; location /static/ { alias ${artifactRoot}/; } }\n`,
  );
  await mkdir(path.join(temp, 'trace'));
  nginx = spawn(
    'strace',
    [
      '-ff',
      '-o',
      path.join(temp, 'trace/nginx'),
      '-e',
      'trace=bind,accept,accept4,setsockopt,close',
      '/usr/sbin/nginx',
      ...nginxArgs(),
      '-g',
      'daemon off;',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { PATH: process.env.PATH, URL_SIGNING_SECRET: secret } },
  );
  let stderr = '';
  nginx.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  nginxExited = once(nginx, 'exit');
  const deadline = Date.now() + 20_000;
  while (!(await answers(port)) || !(await answers(corkedPort))) {
    if (nginx.exitCode !== null || Date.now() > deadline)
      throw new Error(`nginx did not start:\n${stderr}${await readFile(path.join(logDir, 'error.log'), 'utf8')}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}, 120_000);

afterAll(async () => {
  await stopNginx();
  await svc?.stop();
  if (temp) await rm(temp, { recursive: true, force: true });
});

async function stopNginx(): Promise<void> {
  if (!nginx || nginx.exitCode !== null) return;
  // The master, not strace: nginx's fast shutdown ends its workers, and strace follows them out.
  const pid = Number((await readFile(path.join(temp, 'nginx.pid'), 'utf8')).trim());
  process.kill(pid, 'SIGTERM');
  await nginxExited;
}

function answers(onPort: number): Promise<boolean> {
  return new Promise((resolve) => {
    get({ host: '127.0.0.1', port: onPort, path: '/' }, (res) => {
      res.resume();
      resolve(true);
    }).on('error', () => resolve(false));
  });
}

/** A GET over `agent` (keep-alive), with a Host header as a browser on the machine sends it. */
function request(
  onPort: number,
  target: string,
  headers: Record<string, string> = {},
  agent?: Agent,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
  return new Promise((resolve, reject) => {
    get({ host: '127.0.0.1', port: onPort, path: target, agent, headers: { host: 'localhost', ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
    }).on('error', reject);
  });
}

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

describe("docs/operations.md's nginx by hand, on Debian's nginx.conf", () => {
  it('refuses to start beside the default site it removes (the control: that step is needed)', async () => {
    const link = path.join(etc, 'sites-enabled/default');
    await symlink(path.join(etc, 'sites-available/default'), link);
    try {
      const refused = await run('/usr/sbin/nginx', [...nginxArgs(), '-t']).then(
        () => '',
        (err: { stderr: string }) => err.stderr,
      );
      expect(refused).toMatch(/duplicate default server for 127\.0\.0\.1:\d+/);
    } finally {
      await rm(link);
    }
    // As the steps left it: accepted.
    await run('/usr/sbin/nginx', [...nginxArgs(), '-t']);
  });

  it("answers /healthz for any Host with the app's health", async () => {
    for (const host of ['localhost', 'example.test']) {
      const res = await request(port, '/healthz', { host });
      expect(res.headers['content-type'], host).toMatch(/^application\/json/);
      expect((JSON.parse(res.body.toString()) as { node_id?: string }).node_id, host).toBeTruthy();
    }
  });

  it('serves a WAV by key (the app checks, nginx sends) and by signed URL (nginx alone, with the secret from its environment file)', async () => {
    const keyed = await request(port, artifactUrlPath(wav.cid, 'audio.wav'), { 'x-api-key': svc.apiKey });
    expect(keyed.status).toBe(200);
    expect(sha256(keyed.body)).toBe(wav.cid);
    const signed = createUrlSigner(secret).sign(wav.cid, 'audio.wav', 600);
    const bySignature = await request(port, `${artifactUrlPath(wav.cid, 'audio.wav')}?${signed.query}`);
    expect(bySignature.status).toBe(200);
    expect(sha256(bySignature.body)).toBe(wav.cid);
    // nginx's access log (the steps' NGINX_ACCESS_LOG): the signed one never went upstream. nginx
    // writes a request's line once it has finished the request, which may be after the client has
    // the last byte: wait for both lines.
    const lines = await until('both requests in the access log', async () => {
      const logged = (await readFile(path.join(logDir, 'source-fetch.json'), 'utf8'))
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as Record<string, string>)
        .filter((line) => line.cid === wav.cid);
      return logged.length >= 2 ? logged : undefined;
    });
    expect(lines.map((line) => [String(line.uri).endsWith('?redacted'), line.upstream_time === ''])).toEqual([
      [false, false],
      [true, true],
    ]);
  });

  it("never corks this site's connections and turns TCP_NODELAY on, though Debian's nginx.conf turns tcp_nopush on", async () => {
    const relative = artifactRelativePath(wav.cid, 'audio.wav');
    const signed = `${artifactUrlPath(wav.cid, 'audio.wav')}?${createUrlSigner(secret).sign(wav.cid, 'audio.wav', 600).query}`;
    // Ranges one after another on one kept-alive connection, as a player reads a WAV.
    const ranges = async (onPort: number, target: string, headers: Record<string, string> = {}) => {
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      try {
        for (let i = 0; i < 5; i++) {
          const start = 1000 + i * 40_000;
          const res = await request(onPort, target, { ...headers, range: `bytes=${start}-${start + 65_535}` }, agent);
          expect(res.status).toBe(206);
          expect(res.body.equals(wav.bytes.subarray(start, start + 65_536))).toBe(true);
        }
      } finally {
        agent.destroy();
      }
    };
    await ranges(port, signed);
    await ranges(port, artifactUrlPath(wav.cid, 'audio.wav'), { 'x-api-key': svc.apiKey });
    await ranges(corkedPort, `/static/${relative}`);
    await stopNginx();

    const options = await socketOptionsByPort(path.join(temp, 'trace'));
    const site = options.get(port);
    const control = options.get(corkedPort);
    expect(site?.accepted, JSON.stringify([...options])).toBeGreaterThanOrEqual(2);
    expect(site?.corked).toBe(0);
    expect(site?.noDelay).toBeGreaterThanOrEqual(1);
    expect(control?.accepted).toBeGreaterThanOrEqual(1);
    expect(control?.corked).toBeGreaterThanOrEqual(1);
  });
});

describe("the image's main config (nginx/nginx.conf)", () => {
  it('loads the Lua module under any prefix (the control: a path relative to the prefix does not)', async () => {
    const prefix = await mkdtemp(path.join(tmpdir(), 'sf-nginx-prefix-'));
    try {
      const main = path.join(ROOT, 'nginx/nginx.conf');
      const test = (config: string) =>
        run('/usr/sbin/nginx', ['-p', `${prefix}/`, '-e', path.join(prefix, 'e.log'), '-c', config, '-t']);
      await test(main);
      const relative = path.join(prefix, 'relative.conf');
      await writeFile(relative, (await readFile(main, 'utf8')).replaceAll('/usr/lib/nginx/modules/', 'modules/'));
      await expect(test(relative)).rejects.toThrow(/ndk_http_module\.so/);
    } finally {
      await rm(prefix, { recursive: true, force: true });
    }
  });
});

/**
 * What nginx did on the connections it accepted on each port, from `strace -ff` (one file per
 * process): the listening sockets' ports from bind(2), each accepted connection's from accept4(2)
 * until close(2), and the TCP_CORK and TCP_NODELAY it set on them to 1.
 */
async function socketOptionsByPort(
  traceDir: string,
): Promise<Map<number, { accepted: number; corked: number; noDelay: number }>> {
  const files = await Promise.all(
    (await readdir(traceDir)).map(async (name) => (await readFile(path.join(traceDir, name), 'utf8')).split('\n')),
  );
  const listening = new Map<string, number>();
  for (const lines of files)
    for (const line of lines) {
      const bound = /^bind\((\d+), \{sa_family=AF_INET6?, sin6?_port=htons\((\d+)\)/.exec(line);
      if (bound && / = 0$/.test(line)) listening.set(bound[1]!, Number(bound[2]));
    }
  const byPort = new Map<number, { accepted: number; corked: number; noDelay: number }>();
  for (const lines of files) {
    const connections = new Map<string, number>();
    for (const line of lines) {
      const accepted = /^accept4?\((\d+), .* = (\d+)$/.exec(line);
      const closed = /^close\((\d+)\)/.exec(line);
      const option = /^setsockopt\((\d+), SOL_TCP, (TCP_CORK|TCP_NODELAY), \[1\], \d+\) = 0$/.exec(line);
      if (accepted && listening.has(accepted[1]!)) {
        const onPort = listening.get(accepted[1]!)!;
        connections.set(accepted[2]!, onPort);
        const counts = byPort.get(onPort) ?? { accepted: 0, corked: 0, noDelay: 0 };
        counts.accepted++;
        byPort.set(onPort, counts);
      } else if (closed) {
        connections.delete(closed[1]!);
      } else if (option && connections.has(option[1]!)) {
        const counts = byPort.get(connections.get(option[1]!)!)!;
        if (option[2] === 'TCP_CORK') counts.corked++;
        else counts.noDelay++;
      }
    }
  }
  return byPort;
}
