/**
 * Child process of the harness's abandoned-cluster test (postgres-harness.test.ts): starts a
 * cluster, prints its name, folder and admin URL as one JSON line, then waits to be killed
 * without ever calling stop().
 *
 *   node --import tsx test/unit/postgres-cluster-owner.ts
 */
import { startPostgresCluster } from '../support/postgres.js';

const cluster = await startPostgresCluster();
process.stdout.write(`${JSON.stringify({ name: cluster.name, dir: cluster.dir, adminUrl: cluster.adminUrl })}\n`);
// The postmaster, a child of this process, keeps it alive until it is killed.
