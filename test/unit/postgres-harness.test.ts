import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { createDatabase, psql, startPostgresCluster } from '../support/postgres.js';
import { processesMatching } from '../support/processes.js';
import { ROOT } from '../support/service.js';

const OWNER = path.join(import.meta.dirname, 'postgres-cluster-owner.ts');
const SYSTEM_CLUSTERS = '/var/lib/postgresql';

/**
 * Debian's system clusters (/var/lib/postgresql/<version>/<name>): whether each runs and which
 * database folders it has. A database created there, or the cluster started, changes this.
 * Readable by root and postgres only; an ordinary user sees nothing here.
 */
function systemClusterState(): Record<string, { running: boolean; databases: string[] }> {
  const state: Record<string, { running: boolean; databases: string[] }> = {};
  for (const version of readable(SYSTEM_CLUSTERS)) {
    for (const name of readable(path.join(SYSTEM_CLUSTERS, version))) {
      const dataDir = path.join(SYSTEM_CLUSTERS, version, name);
      if (!existsSync(path.join(dataDir, 'PG_VERSION'))) continue;
      state[dataDir] = {
        running: existsSync(path.join(dataDir, 'postmaster.pid')),
        databases: readable(path.join(dataDir, 'base')).sort(),
      };
    }
  }
  return state;
}

function readable(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

async function waitUntil(condition: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await condition()) return true;
    await sleep(50);
  }
  return condition();
}

describe('throwaway PostgreSQL cluster', () => {
  it(
    'serves separate empty databases on its own loopback port, with the test settings, and leaves nothing behind',
    { timeout: 60_000 },
    async () => {
      const systemBefore = systemClusterState();
      const cluster = await startPostgresCluster();
      let first: string;
      try {
        const admin = new URL(cluster.adminUrl);
        expect(admin.hostname).toBe('127.0.0.1');
        expect(admin.port).not.toBe('5432');
        // The URL reaches this cluster's server, not some other one on the machine.
        expect(await psql(cluster.adminUrl, 'SHOW data_directory')).toBe(path.join(cluster.dir, 'data'));
        expect(
          await psql(
            cluster.adminUrl,
            `SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings
           WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'max_connections', 'listen_addresses')`,
          ),
        ).toBe('fsync=off full_page_writes=off listen_addresses=127.0.0.1 max_connections=200 synchronous_commit=off');
        // Every process of the cluster carries its name (cluster_name shows in ps): the control for the check after stop().
        expect((await processesMatching(cluster.name)).length).toBeGreaterThanOrEqual(3);

        first = await cluster.createDatabase();
        const second = await cluster.createDatabase('harness_second');
        expect(new URL(second).pathname).toBe('/harness_second');
        expect(first).not.toBe(second);

        await psql(first, `CREATE TABLE marker (note text); INSERT INTO marker VALUES ('written in the first')`);
        expect(await psql(first, 'SELECT note FROM marker')).toBe('written in the first');
        expect(await psql(second, `SELECT to_regclass('marker') IS NULL`)).toBe('t');
        expect(await psql(second, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`)).toBe('0');
        expect(await psql(first, 'SELECT current_database()')).toBe(new URL(first).pathname.slice(1));

        // Loopback TCP wants the password the URL carries.
        const wrongPassword = new URL(first);
        wrongPassword.password = 'not-the-password';
        await expect(psql(wrongPassword.href, 'SELECT 1')).rejects.toThrow(/password authentication failed/);
      } finally {
        await cluster.stop();
      }

      expect(await processesMatching(cluster.name)).toEqual([]);
      expect(existsSync(cluster.dir)).toBe(false);
      await expect(psql(first, 'SELECT 1')).rejects.toThrow(/Connection refused/);
      await cluster.stop(); // a second stop() is harmless
      expect(systemClusterState()).toEqual(systemBefore);
    },
  );

  it('refuses a database name that would need quoting, before it reaches the server', async () => {
    await expect(createDatabase('postgres://postgres@127.0.0.1:1/postgres', 'Mixed"Case')).rejects.toThrow(
      /database name must match/,
    );
  });

  it(
    'is stopped and removed by its watchdog when the process that started it dies without stop()',
    { timeout: 60_000 },
    async () => {
      const owner = spawn(process.execPath, ['--import', 'tsx', OWNER], {
        cwd: ROOT,
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const ownerExited = once(owner, 'exit');
      let output = '';
      owner.stdout.setEncoding('utf8');
      for await (const chunk of owner.stdout) {
        output += chunk;
        if (output.includes('\n')) break;
      }
      const { name, dir, adminUrl } = JSON.parse(output) as { name: string; dir: string; adminUrl: string };

      // Control: the cluster runs while its owner lives.
      expect(await psql(adminUrl, 'SELECT 1')).toBe('1');
      expect((await processesMatching(name)).length).toBeGreaterThanOrEqual(3);
      expect(existsSync(dir)).toBe(true);

      owner.kill('SIGKILL');
      await ownerExited;
      const cleanedUp = await waitUntil(
        async () => (await processesMatching(name)).length === 0 && !existsSync(dir),
        20_000,
      );
      expect(
        cleanedUp,
        `left behind: processes ${JSON.stringify(await processesMatching(name))}, folder exists: ${existsSync(dir)}`,
      ).toBe(true);
    },
  );
});
