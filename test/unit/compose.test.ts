/**
 * No Docker engine runs where the tests run, so compose.yaml and the Dockerfile are kept correct
 * by reading them against what the tests do run: the configuration schema, and the nginx
 * template that test/support/nginx.ts renders for a real nginx.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config.js';
import { COOKIES_SAFE_SINCE, isAtLeast } from '../../src/tools/ytdlp-version.js';
import { renderTemplate, TEMPLATE_PATH } from '../support/nginx.js';

const ROOT = new URL('../../', import.meta.url);
const read = (file: string) => readFileSync(new URL(file, ROOT), 'utf8');

interface Service {
  profiles?: string[];
  deploy?: { replicas?: string | number };
  build?: string;
  cap_add?: string[];
  security_opt?: string[];
  image?: string;
  entrypoint?: string[];
  command?: string[];
  environment: Record<string, string>;
  volumes: string[];
  ports?: string[];
  expose?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
}
const compose = parse(read('compose.yaml')) as { services: Record<string, Service>; volumes: Record<string, unknown> };
const app = compose.services.app!;
const nginx = compose.services.nginx!;

/**
 * Compose's interpolation of `${NAME}`, `${NAME:-default}` and `${NAME:?message}` (required),
 * with only `set` in the environment; a required variable left unset throws, as compose refuses.
 */
function interpolate(env: Record<string, string>, set: Record<string, string> = {}): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env).map(([key, value]) => [
      key,
      String(value).replace(
        /\$\{([A-Z_]+)(?:(:?-)([^}]*)|(:\?)([^}]*))?\}/g,
        (_, name: string, dash?: string, fallback?: string, required?: string) => {
          if (set[name] !== undefined && set[name] !== '') return set[name];
          if (required) throw new Error(`${name} is required`);
          return dash ? (fallback ?? '') : '';
        },
      ),
    ]),
  );
}

/** `source:target[:ro]` → { source, target, readOnly } */
function mount(volumes: string[], target: string) {
  const found = volumes.map((v) => v.split(':')).find((parts) => parts[1] === target);
  return found && { source: found[0]!, target: found[1]!, readOnly: found[2] === 'ro' };
}

/**
 * nginx writes the artifacts it served on signed URLs to a file on `volume`, which the app reads
 * and empties for eviction.
 */
function expectUsageLogShared(
  appService: Service,
  nginxService: Service,
  volume: string,
  set: Record<string, string> = {},
): void {
  const nginxEnv = interpolate(nginxService.environment);
  const appConfig = loadConfig(interpolate(appService.environment, set));
  const nginxSide = mount(nginxService.volumes, path.posix.dirname(nginxEnv.NGINX_USAGE_LOG!));
  const appSide = mount(appService.volumes, path.posix.dirname(appConfig.nginxUsageLog!));
  expect(nginxSide).toEqual({ source: volume, target: path.posix.dirname(nginxEnv.NGINX_USAGE_LOG!), readOnly: false });
  // The app empties the file after reading it: it mounts the volume read-write.
  expect(appSide).toEqual({ source: volume, target: path.posix.dirname(appConfig.nginxUsageLog!), readOnly: false });
  expect(path.posix.basename(nginxEnv.NGINX_USAGE_LOG!)).toBe(path.posix.basename(appConfig.nginxUsageLog!));
  expect(Object.keys(compose.volumes)).toContain(volume);
  // The image makes the folder the app's, so that a new volume starts out writable by it.
  expect(read('Dockerfile')).toMatch(new RegExp(`chown node:node [^\\n]*${appSide!.target}\\b`));
}

/**
 * nginx checks signed URLs in Lua with the app's secret: its image installs the packages the tests
 * run, the main config loads the module and lets the secret through, the module is mounted where
 * the template looks for it, and nginx gets the very secret the app gets.
 */
function expectSignedUrlsCheckedByNginx(
  appService: Service,
  nginxService: Service,
  set: Record<string, string> = {},
): void {
  expect(nginxService.build).toBe('./nginx');
  expect(read('nginx/Dockerfile')).toMatch(/apt-get install[^\n]*\bnginx-light\b[^\n]*\blibnginx-mod-http-lua\b/);
  expect(mount(nginxService.volumes, '/etc/nginx/nginx.conf')).toEqual({
    source: './nginx/nginx.conf',
    target: '/etc/nginx/nginx.conf',
    readOnly: true,
  });
  const mainConfig = read('nginx/nginx.conf');
  expect(mainConfig).toMatch(
    /^load_module \/usr\/lib\/nginx\/modules\/ndk_http_module\.so;\nload_module \/usr\/lib\/nginx\/modules\/ngx_http_lua_module\.so;$/m,
  );
  expect(mainConfig).toMatch(/^env URL_SIGNING_SECRET;$/m);
  expect(mainConfig).toMatch(/^\s*include \/etc\/nginx\/conf\.d\/\*\.conf;$/m);
  const nginxEnv = interpolate(nginxService.environment);
  expect(mount(nginxService.volumes, nginxEnv.NGINX_LUA_DIR!)).toEqual({
    source: './nginx/lua',
    target: nginxEnv.NGINX_LUA_DIR,
    readOnly: true,
  });
  const secret = { ...set, URL_SIGNING_SECRET: 's'.repeat(40) };
  expect(interpolate(nginxService.environment, secret).URL_SIGNING_SECRET).toBe(secret.URL_SIGNING_SECRET);
  expect(loadConfig(interpolate(appService.environment, secret)).urlSigningSecret).toBe(secret.URL_SIGNING_SECRET);
  // Unset: the app generates its own (nginx then hands every signed URL to it).
  expect(loadConfig(interpolate(appService.environment, set)).urlSigningSecret).toBeUndefined();
}

describe('compose.yaml', () => {
  it('gives the app an environment the configuration accepts, with nginx doing the artifact bytes', () => {
    const env = interpolate(app.environment);
    const config = loadConfig(env);
    expect(config.host).toBe('0.0.0.0');
    expect(config.accelRedirectPrefix).toBe('/_artifacts/');
    expect(config.apiKeys).toEqual([]); // unset: generated into DATA_DIR
    expect(mount(app.volumes, config.dataDir)?.readOnly).toBe(false);
    expect(mount(app.volumes, config.artifactRoot)?.readOnly).toBe(false);
    expect(app.expose).toEqual([String(config.port)]);
    expect(app.ports).toBeUndefined();
  });

  it('runs the tools confined: the app may make namespaces, gains no privilege, and never turns confinement off', () => {
    const config = loadConfig(interpolate(app.environment));
    expect(config.confinement.mode).toBe('netns');
    expect(app.cap_add).toEqual(['SYS_ADMIN']);
    expect(app.security_opt).toContain('no-new-privileges:true');
    // The capability only unlocks unshare(2) in the seccomp profile; the app itself runs unprivileged.
    expect(read('Dockerfile')).toMatch(/^USER node$/m);
  });

  it('renders the same nginx template the end-to-end tests run, in front of the app', () => {
    expect(mount(nginx.volumes, '/etc/nginx/templates')).toEqual({
      source: './nginx/templates',
      target: '/etc/nginx/templates',
      readOnly: true,
    });
    const env = interpolate(nginx.environment);
    // Throws when the template names a variable compose does not set.
    const site = renderTemplate(readFileSync(TEMPLATE_PATH, 'utf8'), env);
    const appEnv = interpolate(app.environment);
    expect(env.APP_UPSTREAM).toBe(`app:${appEnv.PORT}`);
    expect(site).toContain(`location ${appEnv.ACCEL_REDIRECT_PREFIX} {`);
    expect(site).toContain(`alias ${env.ARTIFACT_ROOT}/;`);
    expect(site).toContain(`listen ${env.NGINX_PORT} default_server;`);
    expect(nginx.ports).toEqual([`\${PUBLISH_PORT:-8080}:${env.NGINX_PORT}`]);
  });

  it("renders it in the nginx image's entrypoint as the tests do, never writing the secret, then runs the command", () => {
    const dockerfile = read('nginx/Dockerfile');
    expect(dockerfile).toMatch(/^COPY entrypoint\.sh \/usr\/local\/bin\/nginx-entrypoint$/m);
    expect(dockerfile).toMatch(/^ENTRYPOINT \["\/usr\/local\/bin\/nginx-entrypoint"\]$/m);
    const folder = mkdtempSync(path.join(tmpdir(), 'sf-entrypoint-'));
    try {
      const [templates, output] = [path.join(folder, 'templates'), path.join(folder, 'conf.d')];
      mkdirSync(templates);
      mkdirSync(output);
      copyFileSync(TEMPLATE_PATH, path.join(templates, 'default.conf.template'));
      const env = interpolate(nginx.environment, { URL_SIGNING_SECRET: 'secret-that-stays-in-the-environment' });
      const rendered = path.join(output, 'default.conf');
      // `cat` stands for nginx: what the entrypoint hands over to runs on the rendered file.
      const shown = execFileSync('sh', [fileURLToPath(new URL('nginx/entrypoint.sh', ROOT)), 'cat', rendered], {
        env: {
          PATH: process.env.PATH,
          ...env,
          NGINX_ENVSUBST_TEMPLATE_DIR: templates,
          NGINX_ENVSUBST_OUTPUT_DIR: output,
        },
        encoding: 'utf8',
      });
      expect(shown).toBe(renderTemplate(readFileSync(TEMPLATE_PATH, 'utf8'), env));
      expect(shown).not.toContain('secret-that-stays-in-the-environment');
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });

  it('shares one artifact volume, read-only for nginx, at the path each side is told', () => {
    const appSide = mount(app.volumes, interpolate(app.environment).ARTIFACT_ROOT!);
    const nginxSide = mount(nginx.volumes, interpolate(nginx.environment).ARTIFACT_ROOT!);
    expect(appSide?.source).toBe('artifacts');
    expect(nginxSide).toEqual({ source: 'artifacts', target: '/artifacts', readOnly: true });
    expect(Object.keys(compose.volumes)).toContain('artifacts');
    // nginx never sees the database or the secrets.
    expect(nginx.volumes.some((v) => v.startsWith('data:'))).toBe(false);
  });

  it("shares nginx's usage log with the app, at the path each is told", () => {
    expectUsageLogShared(app, nginx, 'nginx-usage');
  });

  it("lets nginx check signed URLs with the app's secret", () => {
    expectSignedUrlsCheckedByNginx(app, nginx);
  });

  it('checks health on both services and starts nginx once the app is healthy', () => {
    expect(app.healthcheck?.test.join(' ')).toContain('/healthz');
    expect(nginx.healthcheck?.test.join(' ')).toContain('/healthz');
    expect(nginx.depends_on?.app?.condition).toBe('service_healthy');
  });
});

describe('compose.yaml, the scaled profile', () => {
  const postgres = compose.services.postgres!;
  const node = compose.services['app-node']!;
  const front = compose.services['nginx-scaled']!;
  const set = { POSTGRES_PASSWORD: 'pw-for-the-test' };

  it('runs one profile at a time, single unless told otherwise', () => {
    for (const [name, service] of Object.entries(compose.services)) expect(service.profiles, name).toHaveLength(1);
    expect(compose.services.app!.profiles).toEqual(['single']);
    expect([postgres, node, front].map((service) => service.profiles![0])).toEqual(['scaled', 'scaled', 'scaled']);
    expect(read('.env')).toMatch(/^COMPOSE_PROFILES=single$/m);
  });

  it('runs several app nodes on PostgreSQL, with the configuration accepting their environment', () => {
    const env = interpolate(node.environment, set);
    const config = loadConfig(env);
    expect(config.database).toEqual({
      kind: 'postgres',
      url: 'postgres://source_fetch:pw-for-the-test@postgres:5432/source_fetch',
      poolSize: 10,
    });
    expect(config.confinement.mode).toBe('netns');
    expect(node.cap_add).toEqual(['SYS_ADMIN']);
    expect(String(node.deploy?.replicas)).toBe('${APP_REPLICAS:-3}');
    expect(node.depends_on?.postgres?.condition).toBe('service_healthy');
    expect(postgres.healthcheck?.test.join(' ')).toContain('pg_isready');
    // The password comes from the operator, never a default in the file: unset, it is empty, and
    // both containers refuse to start (ops/require-env.sh; test/unit/compose-config.test.ts).
    for (const service of [node, postgres]) {
      expect(interpolate(service.environment).POSTGRES_PASSWORD).toBe('');
      expect(service.entrypoint?.slice(0, 4)).toEqual([
        '/bin/sh',
        '/opt/source-fetch/require-env.sh',
        'POSTGRES_PASSWORD',
        'set POSTGRES_PASSWORD for the scaled profile',
      ]);
    }
    // After the check, the image's own: the app's CMD (as `app` runs it), postgres's entrypoint and command.
    expect(node.entrypoint?.slice(4)).toEqual(['--', 'docker-entrypoint.sh']);
    expect(node.command).toEqual(JSON.parse(/^CMD (\[.*\])$/m.exec(read('Dockerfile'))![1]!));
    expect(postgres.entrypoint?.slice(4)).toEqual(['--', 'docker-entrypoint.sh']);
    expect(postgres.command).toEqual(['postgres']);
  });

  it('shares one artifact volume between the nodes and nginx, apart from the single-node one', () => {
    const nodeSide = mount(node.volumes, interpolate(node.environment, set).ARTIFACT_ROOT!);
    const nginxSide = mount(front.volumes, interpolate(front.environment).ARTIFACT_ROOT!);
    expect(nodeSide).toEqual({ source: 'artifacts-shared', target: '/artifacts', readOnly: false });
    expect(nginxSide).toEqual({ source: 'artifacts-shared', target: '/artifacts', readOnly: true });
    expect(mount(app.volumes, '/artifacts')?.source).not.toBe('artifacts-shared');
    expect(interpolate(front.environment).APP_UPSTREAM).toBe(`app-node:${interpolate(node.environment, set).PORT}`);
    renderTemplate(readFileSync(TEMPLATE_PATH, 'utf8'), interpolate(front.environment));
  });

  it("shares nginx's usage log with every node, apart from the single-node one", () => {
    expectUsageLogShared(node, front, 'nginx-usage-shared', set);
  });

  it("lets nginx check signed URLs with the nodes' secret", () => {
    expectSignedUrlsCheckedByNginx(node, front, set);
  });
});

describe('Dockerfile', () => {
  const dockerfile = read('Dockerfile');

  it('installs the tools the service runs and starts what npm start starts', () => {
    const pkg = JSON.parse(read('package.json')) as { scripts: { start: string } };
    expect(dockerfile).toMatch(/apt-get install[^\n]*\bffmpeg\b[^\n]*\byt-dlp\b/);
    const cmd = /^CMD (\[.*\])$/m.exec(dockerfile)?.[1];
    expect(cmd && JSON.parse(cmd)).toEqual(pkg.scripts.start.split(' '));
    // Migrations are read at start-up from drizzle/ next to dist/.
    expect(dockerfile).toMatch(/^COPY drizzle \.\/drizzle$/m);
    expect(dockerfile).toMatch(/^USER node$/m);
  });

  it("runs a current yt-dlp, Debian's package pinned by version and SHA-256 and unpacked by the script CI tests it with, and names it in YTDLP_PATH", () => {
    const version = /^ARG YTDLP_DEB_VERSION=(\S+)$/m.exec(dockerfile)?.[1];
    const hash = /^ARG YTDLP_DEB_SHA256=(\S+)$/m.exec(dockerfile)?.[1];
    expect(version).toMatch(/^\d{4}\.\d{2}\.\d{2}-[0-9A-Za-z.+~]+$/);
    expect(hash).toMatch(/^[0-9a-f]{64}$/);
    // The pin must keep cookies to their own domains, or YTDLP_COOKIES_FILE would stop the image's start.
    expect(isAtLeast(version!.replace(/-.*$/, ''), COOKIES_SAFE_SINCE)).toBe(true);
    expect(dockerfile).toMatch(/^COPY scripts\/fetch-current-ytdlp\.sh \/tmp\/fetch-current-ytdlp\.sh$/m);
    expect(dockerfile).toContain(
      'RUN /tmp/fetch-current-ytdlp.sh --version "$YTDLP_DEB_VERSION" ${YTDLP_DEB_SHA256:+--sha256 "$YTDLP_DEB_SHA256"} --or-newest --into /opt/yt-dlp',
    );
    const env = /^ENV (.*)$/m.exec(dockerfile)?.[1] ?? '';
    const ytdlpPath = /\bYTDLP_PATH=(\S+)/.exec(env)?.[1];
    // The script puts the package's launcher at <--into>/yt-dlp, beside its module.
    expect(ytdlpPath).toBe('/opt/yt-dlp/yt-dlp');
    expect(loadConfig({ YTDLP_PATH: ytdlpPath }).tools.ytdlp).toBe(ytdlpPath);
    // Debian's own stays installed as the fallback, and brings Python.
    expect(dockerfile).toMatch(/apt-get install[^\n]*\byt-dlp\b/);
    // CI tests the pin: .ci/run reads these two lines, and fetches it as the image does (a pin
    // that left the archive: the newest; test/unit/fetch-current-ytdlp.test.ts).
    const ci = read('.ci/run');
    expect(ci).toContain("sed -n 's/^ARG YTDLP_DEB_VERSION=//p' Dockerfile");
    expect(ci).toContain("sed -n 's/^ARG YTDLP_DEB_SHA256=//p' Dockerfile");
    expect(ci).toContain(
      'scripts/fetch-current-ytdlp.sh --version "$pinned_version" --sha256 "$pinned_sha256" --or-newest',
    );
    // The docs name the image's pin.
    expect(read('docs/yt-dlp.md')).toContain(`YTDLP_DEB_VERSION=${version}`);
  });

  it('builds and runs on Node 22, which package.json allows', () => {
    const images = [...dockerfile.matchAll(/^FROM (\S+)/gm)].map((match) => match[1]);
    expect(images).toEqual(['node:22-bookworm-slim', 'node:22-bookworm-slim']);
    const pkg = JSON.parse(read('package.json')) as { engines: { node: string } };
    expect(pkg.engines.node.split('||').map((range) => range.trim())).toContain('>=22.12.0');
  });
});
