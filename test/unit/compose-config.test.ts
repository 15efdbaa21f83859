/**
 * compose.yaml as Docker Compose itself reads it: `docker compose config` (Compose v2, the
 * docker-compose package of Debian stable that .ci/run unpacks into .cache/docker-compose; no
 * engine needed) for every profile, with no variables set and with the profile's own. Compose
 * interpolates every service whatever profiles run, so a profile's required setting is checked in
 * its containers (ops/require-env.sh), and `docker compose up -d` needs no variable at all.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../support/service.js';

const run = promisify(execFile);
const COMPOSE = process.env.SOURCE_FETCH_DOCKER_COMPOSE ?? path.join(ROOT, '.cache/docker-compose/docker-compose');
const GUARD = ['/bin/sh', '/opt/source-fetch/require-env.sh'];

interface Rendered {
  services: Record<
    string,
    {
      entrypoint?: string[] | null;
      command?: string[] | null;
      environment?: Record<string, string | null>;
      volumes?: Array<{ source: string; target: string; read_only?: boolean }>;
    }
  >;
}

/** `docker compose config` in `dir` with only `env` (and a PATH and HOME) in the environment. */
async function config(env: Record<string, string> = {}, dir = ROOT): Promise<{ rendered: Rendered; stderr: string }> {
  if (!existsSync(COMPOSE))
    throw new Error(
      `Docker Compose is not at ${COMPOSE}: scripts/fetch-docker-compose.sh puts it there (as .ci/run does), or set SOURCE_FETCH_DOCKER_COMPOSE`,
    );
  const home = mkdtempSync(path.join(tmpdir(), 'sf-compose-home-'));
  try {
    const { stdout, stderr } = await run(COMPOSE, ['config', '--format', 'json'], {
      cwd: dir,
      env: { PATH: process.env.PATH, HOME: home, ...env },
    });
    return { rendered: JSON.parse(stdout) as Rendered, stderr };
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

const scratch = mkdtempSync(path.join(tmpdir(), 'sf-compose-config-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('docker compose config', () => {
  it('with no variables set: the single profile (.env), app and nginx, without a warning', async () => {
    const { rendered, stderr } = await config();
    expect(Object.keys(rendered.services).sort()).toEqual(['app', 'nginx']);
    expect(stderr).toBe('');
  });

  it.each([
    ['scaled', ['app-node', 'nginx-scaled', 'postgres']],
    ['scaled,monitoring', ['app-node', 'grafana', 'nginx-scaled', 'postgres', 'prometheus']],
  ])(
    'COMPOSE_PROFILES=%s with none of its variables: loads, and its containers refuse to start without them',
    async (profiles, services) => {
      const { rendered, stderr } = await config({ COMPOSE_PROFILES: profiles });
      expect(Object.keys(rendered.services).sort()).toEqual(services);
      expect(stderr).toBe('');
      // Each required setting is checked first thing in the containers that need it.
      const guarded = Object.entries(rendered.services)
        .filter(([, service]) => service.entrypoint?.slice(0, 2).join(' ') === GUARD.join(' '))
        .map(([name, service]) => [name, service.entrypoint![2], service.entrypoint![3]]);
      expect(guarded.sort()).toEqual(
        [
          ['app-node', 'POSTGRES_PASSWORD', 'set POSTGRES_PASSWORD for the scaled profile'],
          ['postgres', 'POSTGRES_PASSWORD', 'set POSTGRES_PASSWORD for the scaled profile'],
          ...(profiles.includes('monitoring')
            ? [['grafana', 'GF_SECURITY_ADMIN_PASSWORD', 'set GRAFANA_ADMIN_PASSWORD for the monitoring profile']]
            : []),
        ].sort(),
      );
      for (const [name] of guarded) {
        const service = rendered.services[name!]!;
        expect(service.environment?.[service.entrypoint![2]!], name).toBe('');
        expect(service.volumes, name).toContainEqual(
          expect.objectContaining({
            source: path.join(ROOT, 'ops/require-env.sh'),
            target: '/opt/source-fetch/require-env.sh',
            read_only: true,
          }),
        );
      }
      if (profiles.includes('monitoring')) {
        // Prometheus's own entrypoint refuses an empty key list (test/unit/compose-monitoring.test.ts).
        expect(rendered.services.prometheus!.environment?.SCRAPE_API_KEYS).toBe('');
      }
    },
  );

  it("COMPOSE_PROFILES=scaled,monitoring with its variables: they reach the services' environment", async () => {
    const { rendered } = await config({
      COMPOSE_PROFILES: 'scaled,monitoring',
      POSTGRES_PASSWORD: 'pw-for-the-test',
      API_KEYS: 'scrape-key-0123456789',
      GRAFANA_ADMIN_PASSWORD: 'grafana-pw',
    });
    const node = rendered.services['app-node']!;
    expect(node.environment?.DATABASE_URL).toBe('postgres://source_fetch:pw-for-the-test@postgres:5432/source_fetch');
    expect(rendered.services.postgres!.environment?.POSTGRES_PASSWORD).toBe('pw-for-the-test');
    expect(rendered.services.prometheus!.environment?.SCRAPE_API_KEYS).toBe('scrape-key-0123456789');
    expect(rendered.services.grafana!.environment?.GF_SECURITY_ADMIN_PASSWORD).toBe('grafana-pw');
  });

  it('refuses a required variable in a service of a profile that does not run (the control: why none is written so)', async () => {
    const dir = mkdtempSync(path.join(scratch, 'required-'));
    const withRequired = readFileSync(path.join(ROOT, 'compose.yaml'), 'utf8').replace(
      'GF_SECURITY_ADMIN_PASSWORD: ${GRAFANA_ADMIN_PASSWORD:-}',
      'GF_SECURITY_ADMIN_PASSWORD: ${GRAFANA_ADMIN_PASSWORD:?set it}',
    );
    expect(withRequired).toContain(':?set it}');
    writeFileSync(path.join(dir, 'compose.yaml'), withRequired);
    copyFileSync(path.join(ROOT, '.env'), path.join(dir, '.env'));
    await expect(config({}, dir)).rejects.toThrow(/required variable GRAFANA_ADMIN_PASSWORD is missing a value/);
  });
});

describe('ops/require-env.sh', () => {
  const guard = (env: Record<string, string>) =>
    run(
      'sh',
      [
        path.join(ROOT, 'ops/require-env.sh'),
        'NEEDED',
        'set NEEDED for the test profile',
        '--',
        'echo',
        'ran',
        'the',
        'command',
      ],
      {
        env: { PATH: process.env.PATH, ...env },
      },
    );

  it('runs the command when the variable is set, and stops with the sentence when it is empty or unset', async () => {
    expect((await guard({ NEEDED: 'x' })).stdout).toBe('ran the command\n');
    for (const env of [{ NEEDED: '' }, {}] as Array<Record<string, string>>) {
      await expect(guard(env)).rejects.toMatchObject({ code: 1, stderr: 'set NEEDED for the test profile\n' });
    }
  });
});
