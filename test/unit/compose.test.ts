/**
 * No Docker engine runs where the tests run, so compose.yaml and the Dockerfile are kept correct
 * by reading them against what the tests do run: the configuration schema, and the nginx
 * template that test/support/nginx.ts renders for a real nginx.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config.js';
import { renderTemplate, TEMPLATE_PATH } from '../support/nginx.js';

const ROOT = new URL('../../', import.meta.url);
const read = (file: string) => readFileSync(new URL(file, ROOT), 'utf8');

interface Service {
  build?: string;
  image?: string;
  environment: Record<string, string>;
  volumes: string[];
  ports?: string[];
  expose?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
  tmpfs?: string[];
}
const compose = parse(read('compose.yaml')) as { services: Record<string, Service>; volumes: Record<string, unknown> };
const app = compose.services.app!;
const nginx = compose.services.nginx!;

/** Compose's `${NAME:-default}` interpolation, with nothing set in the environment. */
function interpolate(env: Record<string, string>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env).map(([key, value]) => [key, String(value).replace(/\$\{[A-Z_]+(?::?-([^}]*))?\}/g, (_, fallback: string | undefined) => fallback ?? '')]),
  );
}

/** `source:target[:ro]` → { source, target, readOnly } */
function mount(volumes: string[], target: string) {
  const found = volumes.map((v) => v.split(':')).find((parts) => parts[1] === target);
  return found && { source: found[0]!, target: found[1]!, readOnly: found[2] === 'ro' };
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

  it('renders the same nginx template the end-to-end tests run, in front of the app', () => {
    expect(mount(nginx.volumes, '/etc/nginx/templates')).toEqual({ source: './nginx/templates', target: '/etc/nginx/templates', readOnly: true });
    const env = interpolate(nginx.environment);
    // Throws when the template names a variable compose does not set.
    const site = renderTemplate(readFileSync(TEMPLATE_PATH, 'utf8'), env);
    const appEnv = interpolate(app.environment);
    expect(env.APP_UPSTREAM).toBe(`app:${appEnv.PORT}`);
    expect(site).toContain(`location ${appEnv.ACCEL_REDIRECT_PREFIX} {`);
    expect(site).toContain(`alias ${env.ARTIFACT_ROOT}/;`);
    expect(site).toContain(`listen ${env.NGINX_PORT};`);
    expect(nginx.ports).toEqual([`\${PUBLISH_PORT:-8080}:${env.NGINX_PORT}`]);
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

  it("shares nginx's usage log with the app, at the path each is told, and keeps authorizations in memory", () => {
    const nginxEnv = interpolate(nginx.environment);
    const appConfig = loadConfig(interpolate(app.environment));
    const nginxSide = mount(nginx.volumes, path.posix.dirname(nginxEnv.NGINX_USAGE_LOG!));
    const appSide = mount(app.volumes, path.posix.dirname(appConfig.nginxUsageLog!));
    expect(nginxSide).toEqual({ source: 'nginx-usage', target: path.posix.dirname(nginxEnv.NGINX_USAGE_LOG!), readOnly: false });
    // The app empties the file after reading it: it mounts the volume read-write.
    expect(appSide).toEqual({ source: 'nginx-usage', target: path.posix.dirname(appConfig.nginxUsageLog!), readOnly: false });
    expect(path.posix.basename(nginxEnv.NGINX_USAGE_LOG!)).toBe(path.posix.basename(appConfig.nginxUsageLog!));
    expect(Object.keys(compose.volumes)).toContain('nginx-usage');
    // The image makes the folder the app's, so that a new volume starts out writable by it.
    expect(read('Dockerfile')).toMatch(new RegExp(`chown node:node [^\\n]*${appSide!.target}\\b`));
    expect(nginx.tmpfs).toEqual([nginxEnv.NGINX_AUTHORIZATION_CACHE]);
  });

  it('checks health on both services and starts nginx once the app is healthy', () => {
    expect(app.healthcheck?.test.join(' ')).toContain('/healthz');
    expect(nginx.healthcheck?.test.join(' ')).toContain('/healthz');
    expect(nginx.depends_on?.app?.condition).toBe('service_healthy');
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
});
