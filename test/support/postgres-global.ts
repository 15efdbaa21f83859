import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { startPostgresCluster } from './postgres.js';

/**
 * Global setup of each project: one PostgreSQL cluster for the whole run (initdb once, not once
 * per file); test files take their own databases from it with freshDatabaseUrl(). Likewise one
 * folder for the run's SQLite test databases (openTestDatabase), removed with it: a test may
 * reopen a file after closing it, so none is removed sooner.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const sqliteDir = await mkdtemp(path.join(tmpdir(), 'sf-test-dbs-'));
  const cluster = await startPostgresCluster();
  project.provide('postgresAdminUrl', cluster.adminUrl);
  project.provide('sqliteTestDir', sqliteDir);
  return async () => {
    await cluster.stop();
    await rm(sqliteDir, { recursive: true, force: true });
  };
}
