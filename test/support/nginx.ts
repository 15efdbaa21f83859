/**
 * A real nginx (Debian's /usr/sbin/nginx) on 127.0.0.1 in front of an app under test, with the
 * very template from nginx/templates rendered the way the nginx image's entrypoint
 * (nginx/entrypoint.sh) does, inside a minimal main config whose paths all live in a temp folder.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const NGINX_BINARY = '/usr/sbin/nginx';
export const TEMPLATE_PATH = fileURLToPath(new URL('../../nginx/templates/default.conf.template', import.meta.url));
/** The folder of the template's Lua module (its NGINX_LUA_DIR). */
const LUA_DIR = fileURLToPath(new URL('../../nginx/lua', import.meta.url));
/** A URL_SIGNING_SECRET for a service under test and the nginx in front of it. */
export const SHARED_URL_SIGNING_SECRET = 'url-signing-secret-shared-with-nginx';
/** Debian's libnginx-mod-http-lua (and the development kit it builds on), which the template needs. */
const LUA_MODULES = ['/usr/lib/nginx/modules/ndk_http_module.so', '/usr/lib/nginx/modules/ngx_http_lua_module.so'];

export interface NginxOptions {
  appPort: number;
  artifactRoot: string;
  /** Where nginx writes its usage log; default a file in its temp folder. */
  usageLogPath?: string;
  /**
   * The app's URL_SIGNING_SECRET, in nginx's environment, so that nginx answers signed URLs
   * alone; without it nginx hands every one to the app.
   */
  urlSigningSecret?: string;
  /** Extra directives inside http {} (the benchmark adds a static server this way). */
  extraHttpConfig?: string;
  /**
   * The template's proxy_read_timeout, shortened, so that a test can see within seconds what
   * nginx does to an answer that stays silent longer than that.
   */
  proxyReadTimeoutS?: number;
  /**
   * TLS with HTTP/2 on the template's listen line, as docs/operations.md#http2-at-nginx says:
   * `listen … ssl http2;` and the certificate's two lines. url() is then https.
   */
  tls?: { cert: string; key: string };
}

/** One line of the template's JSON access log. */
export type AccessLine = Record<string, string>;

export interface RunningNginx {
  port: number;
  /** The master's process id (its worker is its child): for a bench's CPU figures. */
  pid: number;
  url(pathAndQuery: string): string;
  stop(): Promise<void>;
  errorLog(): string;
  /** What nginx wrote to its standard error (the template's `error_log stderr crit` lines). */
  stderr(): string;
  accessLog(): string;
  /**
   * The access log's whole lines, parsed: a line nginx is still writing is left out, since it
   * may be read in part (seen once in a fresh-clone CI run: JSON.parse of a line cut at 502
   * characters).
   */
  wholeAccessLines(): AccessLine[];
  /** The JSON access log's file, for reading its bytes as written. */
  accessLogPath: string;
  /**
   * The access log's lines that `select` keeps, once `ready` holds for them. nginx writes a line
   * after the answer has gone out, so a client can hold the answer before the line exists.
   */
  accessLines(
    select: (line: AccessLine) => boolean,
    ready: (lines: AccessLine[]) => boolean,
    timeoutMs?: number,
  ): Promise<AccessLine[]>;
  /** The file nginx writes the artifacts it served on signed URLs to (the app's NGINX_USAGE_LOG). */
  usageLogPath: string;
}

/**
 * envsubst limited to the named variables, as the image's `envsubst "$defined_envs"` does: other
 * `${...}` stay (nginx's own, e.g. regex captures in a map), but an upper-case one left over is
 * an environment variable nobody set, and an error.
 */
export function renderTemplate(template: string, vars: Record<string, string>): string {
  const rendered = template.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (whole, name: string) => vars[name] ?? whole);
  const left = /\$\{[A-Z][A-Z0-9_]*\}/.exec(rendered);
  if (left) throw new Error(`nginx template variable ${left[0]} has no value`);
  return rendered;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

export async function startNginx(options: NginxOptions): Promise<RunningNginx> {
  const prefix = await mkdtemp(path.join(tmpdir(), 'sf-nginx-'));
  const port = await freePort();
  const usageLogPath = options.usageLogPath ?? path.join(prefix, 'usage.log');
  let site = renderTemplate(await readFile(TEMPLATE_PATH, 'utf8'), {
    APP_UPSTREAM: `127.0.0.1:${options.appPort}`,
    ARTIFACT_ROOT: options.artifactRoot.replace(/\/+$/, ''),
    NGINX_PORT: `127.0.0.1:${port}`,
    NGINX_ACCESS_LOG: path.join(prefix, 'access.json'),
    NGINX_USAGE_LOG: usageLogPath,
    NGINX_LUA_DIR: LUA_DIR,
  });
  if (options.proxyReadTimeoutS !== undefined) {
    const directive = /proxy_read_timeout \d+s;/;
    if (!directive.test(site)) throw new Error('the nginx template sets no proxy_read_timeout to shorten');
    site = site.replace(directive, `proxy_read_timeout ${options.proxyReadTimeoutS}s;`);
  }
  if (options.tls) {
    const listen = `listen 127.0.0.1:${port} default_server;`;
    if (!site.includes(listen)) throw new Error('the nginx template has no listen line to give TLS');
    site = site.replace(
      listen,
      `listen 127.0.0.1:${port} default_server ssl http2;\n    ssl_certificate ${options.tls.cert};\n    ssl_certificate_key ${options.tls.key};`,
    );
  }
  await mkdir(path.join(prefix, 'conf.d'));
  await writeFile(path.join(prefix, 'conf.d', 'default.conf'), site);
  const errorLogPath = path.join(prefix, 'error.log');
  const accessLogPath = path.join(prefix, 'access.json');
  const temp = (name: string) => path.join(prefix, name);
  // Mirrors nginx/nginx.conf, with every path in the temp folder.
  const main = `
${LUA_MODULES.map((module) => `load_module ${module};`).join('\n')}
env URL_SIGNING_SECRET;
${process.getuid?.() === 0 ? 'user root;' : ''}
daemon off;
worker_processes 1;
pid ${temp('nginx.pid')};
error_log ${errorLogPath} info;
events { worker_connections 1024; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    client_body_temp_path ${temp('client_body')};
    proxy_temp_path ${temp('proxy')};
    fastcgi_temp_path ${temp('fastcgi')};
    uwsgi_temp_path ${temp('uwsgi')};
    scgi_temp_path ${temp('scgi')};
    sendfile on;
    keepalive_timeout 65;
    include ${path.join(prefix, 'conf.d', 'default.conf')};
${options.extraHttpConfig ?? ''}
}
`;
  const configPath = path.join(prefix, 'nginx.conf');
  await writeFile(configPath, main);

  const child = spawn(NGINX_BINARY, ['-p', prefix, '-e', errorLogPath, '-c', configPath], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      ...(options.urlSigningSecret ? { URL_SIGNING_SECRET: options.urlSigningSecret } : {}),
    },
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));

  try {
    await waitUntilListening(port, child, () => stderr + safeRead(errorLogPath));
  } catch (err) {
    child.kill('SIGKILL');
    await exited;
    await rm(prefix, { recursive: true, force: true });
    throw err;
  }

  function wholeAccessLines(): AccessLine[] {
    return safeRead(accessLogPath)
      .split('\n')
      .slice(0, -1)
      .filter(Boolean)
      .map((line) => JSON.parse(line) as AccessLine);
  }

  return {
    port,
    pid: child.pid!,
    url: (pathAndQuery) => `${options.tls ? 'https' : 'http'}://127.0.0.1:${port}${pathAndQuery}`,
    errorLog: () => safeRead(errorLogPath),
    stderr: () => stderr,
    accessLog: () => safeRead(accessLogPath),
    accessLogPath,
    wholeAccessLines,
    async accessLines(select, ready, timeoutMs = 5000) {
      const read = () => wholeAccessLines().filter(select);
      const deadline = Date.now() + timeoutMs;
      for (let lines = read(); ; lines = read()) {
        if (ready(lines)) return lines;
        if (Date.now() >= deadline)
          throw new Error(
            `nginx's access log did not reach the expected lines within ${timeoutMs} ms:\n${JSON.stringify(lines, null, 1)}`,
          );
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    },
    usageLogPath,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM'); // fast shutdown: master and worker exit
        await exited;
      }
      await rm(prefix, { recursive: true, force: true });
    },
  };
}

async function waitUntilListening(port: number, child: ChildProcess, diagnostics: () => string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`nginx exited at start:\n${diagnostics()}`);
    if (await canConnect(port)) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`nginx did not listen on ${port} within 10 s:\n${diagnostics()}`);
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

function safeRead(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}
