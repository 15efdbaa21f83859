import type { TestProject } from 'vitest/node';
import { startPostgresCluster } from './postgres.js';

/**
 * Global setup of the e2e project: one PostgreSQL cluster for the whole run (initdb once, not once
 * per file); test files take their own databases from it with freshDatabaseUrl().
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const cluster = await startPostgresCluster();
  project.provide('postgresAdminUrl', cluster.adminUrl);
  return () => cluster.stop();
}
