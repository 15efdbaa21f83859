/**
 * compose.yaml's monitoring profile, read against what runs here (no Docker engine does): the
 * Prometheus configuration it mounts passes `promtool check config` and scrapes the scaled
 * profile's app nodes with a key they accept, its entrypoint hands Prometheus that key, and
 * Grafana is provisioned with that Prometheus and the dashboard of ops/grafana.
 */
import { execFile, execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config.js';
import { ROOT } from '../support/service.js';

const run = promisify(execFile);
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');

interface Service {
  profiles?: string[];
  image?: string;
  entrypoint?: string[];
  command?: string[];
  environment: Record<string, string>;
  volumes: string[];
  ports?: string[];
  expose?: string[];
  depends_on?: string[] | Record<string, unknown>;
}
const compose = parse(read('compose.yaml')) as { services: Record<string, Service>; volumes: Record<string, unknown> };
const prometheus = compose.services.prometheus!;
const grafana = compose.services.grafana!;
const node = compose.services['app-node']!;

/** `${NAME}`, `${NAME:-default}` and `${NAME:?message}` with only `set` in the environment, as compose interpolates. */
function interpolate(value: string, set: Record<string, string> = {}): string {
  return value.replace(
    /\$\{([A-Z_]+)(?:(:?-)([^}]*)|(:\?)([^}]*))?\}/g,
    (_, name: string, dash?: string, fallback?: string, required?: string) => {
      if (set[name] !== undefined && set[name] !== '') return set[name];
      if (required) throw new Error(`${name} is required`);
      return dash ? (fallback ?? '') : '';
    },
  );
}
const env = (service: Service, set: Record<string, string> = {}) =>
  Object.fromEntries(Object.entries(service.environment).map(([key, value]) => [key, interpolate(String(value), set)]));

/** The host path mounted at `target` in `service`, and whether read-only. */
function mountAt(service: Service, target: string): { source: string; readOnly: boolean } | undefined {
  const found = service.volumes.map((volume) => volume.split(':')).find((parts) => parts[1] === target);
  return found && { source: found[0]!, readOnly: found[2] === 'ro' };
}

const scratch = mkdtempSync(path.join(tmpdir(), 'compose-monitoring-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

interface PrometheusConfig {
  rule_files: string[];
  scrape_configs: Array<{
    job_name: string;
    metrics_path: string;
    authorization: { type: string; credentials_file: string };
    dns_sd_configs: Array<{ names: string[]; type: string; port: number }>;
  }>;
}

describe('compose.yaml, the monitoring profile', () => {
  it('is off unless named: its services are in it alone, and nothing of the other profiles needs them', () => {
    expect(prometheus.profiles).toEqual(['monitoring']);
    expect(grafana.profiles).toEqual(['monitoring']);
    expect(read('.env')).not.toMatch(/^COMPOSE_PROFILES=.*monitoring/m);
    for (const [name, service] of Object.entries(compose.services)) {
      if (service.profiles?.includes('monitoring')) continue;
      const needs = Array.isArray(service.depends_on) ? service.depends_on : Object.keys(service.depends_on ?? {});
      expect(needs, name).not.toContain('prometheus');
      expect(needs, name).not.toContain('grafana');
    }
  });

  it('gives Prometheus a configuration promtool accepts, with the alert rules beside it', async () => {
    const mount = mountAt(prometheus, '/etc/prometheus');
    expect(mount).toEqual({ source: './ops/prometheus', readOnly: true });
    expect(prometheus.command).toContain('--config.file=/etc/prometheus/prometheus.yml');
    const config = parse(read('ops/prometheus/prometheus.yml')) as PrometheusConfig;
    expect(config.rule_files).toEqual(['source-fetch.rules.yml']);

    // promtool wants the credentials file to exist: the same configuration with one here.
    const keyFile = path.join(scratch, 'api-key');
    writeFileSync(keyFile, 'a-key-for-the-check-only');
    const text = read('ops/prometheus/prometheus.yml');
    expect(text).toContain(config.scrape_configs[0]!.authorization.credentials_file);
    writeFileSync(
      path.join(scratch, 'prometheus.yml'),
      text.replace(config.scrape_configs[0]!.authorization.credentials_file, keyFile),
    );
    copyFileSync(
      path.join(ROOT, 'ops/prometheus/source-fetch.rules.yml'),
      path.join(scratch, 'source-fetch.rules.yml'),
    );
    const { stdout } = await run('promtool', ['check', 'config', path.join(scratch, 'prometheus.yml')]);
    expect(stdout).toContain('SUCCESS: 1 rule files found');
  });

  it("scrapes every app node of the scaled profile, as the job the rules select, with the first of the nodes' keys", () => {
    const [job] = (parse(read('ops/prometheus/prometheus.yml')) as PrometheusConfig).scrape_configs;
    expect(job!.job_name).toBe('source-fetch');
    expect(job!.metrics_path).toBe('/metrics');
    const set = { POSTGRES_PASSWORD: 'pw-for-the-test', API_KEYS: ' scrape-key-0123456789 , other-key-0123456789 ' };
    const nodeConfig = loadConfig(env(node, set));
    expect(job!.dns_sd_configs).toEqual([
      expect.objectContaining({ names: ['app-node'], type: 'A', port: nodeConfig.port }),
    ]);
    expect(compose.services['app-node']!.profiles).toEqual(['scaled']);

    // The entrypoint writes the first key to the credentials file, then runs the command.
    const keyFile = path.join(scratch, 'scrape-key');
    const shown = execFileSync('sh', [path.join(ROOT, 'ops/prometheus/entrypoint.sh'), 'cat', keyFile], {
      env: { PATH: process.env.PATH, ...env(prometheus, set), SCRAPE_KEY_FILE: keyFile },
      encoding: 'utf8',
    });
    expect(shown).toBe('scrape-key-0123456789');
    expect(nodeConfig.apiKeys).toContain(shown);
    expect(prometheus.entrypoint).toEqual(['/bin/sh', '/etc/prometheus/entrypoint.sh']);
    expect(prometheus.command![0]).toBe('/bin/prometheus');
    // Without the nodes' keys the profile does not start (control: with them it does, above).
    expect(() =>
      execFileSync('sh', [path.join(ROOT, 'ops/prometheus/entrypoint.sh'), 'true'], {
        env: { PATH: process.env.PATH, ...env(prometheus), SCRAPE_KEY_FILE: keyFile },
        stdio: 'pipe',
      }),
    ).toThrow(/set API_KEYS for the monitoring profile/);
    expect(() =>
      execFileSync('sh', [path.join(ROOT, 'ops/prometheus/entrypoint.sh'), 'true'], {
        env: { PATH: process.env.PATH, SCRAPE_API_KEYS: ' ', SCRAPE_KEY_FILE: keyFile },
        stdio: 'pipe',
      }),
    ).toThrow(/SCRAPE_API_KEYS is empty/);
  });

  it('provisions Grafana with that Prometheus and the dashboard, published on loopback only', () => {
    expect(mountAt(grafana, '/etc/grafana/provisioning')).toEqual({
      source: './ops/grafana/provisioning',
      readOnly: true,
    });
    const datasources = parse(read('ops/grafana/provisioning/datasources/prometheus.yml')) as {
      datasources: Array<{ type: string; url: string; isDefault: boolean }>;
    };
    expect(datasources.datasources).toEqual([
      expect.objectContaining({ type: 'prometheus', url: 'http://prometheus:9090', isDefault: true }),
    ]);
    const web = /--web\.listen-address=\S*:(\d+)/.exec(prometheus.command!.join(' '))?.[1] ?? '9090';
    expect(prometheus.expose).toContain(web);

    const providers = parse(read('ops/grafana/provisioning/dashboards/source-fetch.yml')) as {
      providers: Array<{ type: string; options: { path: string } }>;
    };
    const folder = providers.providers[0]!.options.path;
    const dashboard = mountAt(grafana, `${folder}/source-fetch.dashboard.json`);
    expect(dashboard).toEqual({ source: './ops/grafana/source-fetch.dashboard.json', readOnly: true });
    expect((JSON.parse(read('ops/grafana/source-fetch.dashboard.json')) as { uid: string }).uid).toBe('source-fetch');

    expect(grafana.ports).toEqual(['127.0.0.1:${GRAFANA_PORT:-3000}:3000']);
    // Without its password Grafana does not start (it would take admin/admin): the guard before
    // its entrypoint stops it (control: with one, the command runs).
    const [shell, , ...guardArgs] = grafana.entrypoint!;
    expect(shell).toBe('/bin/sh');
    const guard = (set: Record<string, string>) =>
      execFileSync('sh', [path.join(ROOT, 'ops/require-env.sh'), ...guardArgs.slice(0, 3), 'echo', 'started'], {
        env: { PATH: process.env.PATH, ...env(grafana, set) },
        stdio: 'pipe',
        encoding: 'utf8',
      });
    expect(guardArgs.slice(0, 2)).toEqual([
      'GF_SECURITY_ADMIN_PASSWORD',
      'set GRAFANA_ADMIN_PASSWORD for the monitoring profile',
    ]);
    expect(guardArgs.slice(2)).toEqual(['--', '/run.sh']);
    expect(() => guard({})).toThrow(/set GRAFANA_ADMIN_PASSWORD for the monitoring profile/);
    expect(guard({ GRAFANA_ADMIN_PASSWORD: 'grafana-pw' })).toBe('started\n');
    expect(Object.keys(compose.volumes)).toEqual(expect.arrayContaining(['prometheus-data', 'grafana-data']));
  });
});
