import fs from 'node:fs/promises';
import path from 'node:path';
import { inArray } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { giveBackLease, takeLease } from '../db/leases.js';
import { killOrphanedTools } from '../jobs/orphaned-tools.js';
import { expireLeasesOfGoneHolders } from '../jobs/queue.js';
import type { Logger } from '../logger.js';
import type { ContentStore } from '../store/content-store.js';
import { reconcileStore } from '../store/reconcile.js';
import { jobIdOfFolder, waitingConverterNode } from '../jobs/fetch/work-folder.js';
import { isDeadPredecessor } from './node-id.js';

/**
 * Start-up recovery of what a crash of this node (or of a node before it on this machine) left
 * behind, before any job runs.
 *  - The leases of running jobs whose holder is provably gone (every one on SQLite; this node's
 *    own NODE_ID and dead processes of this machine on PostgreSQL) end now, so that this node's
 *    worker pool takes them back at once (src/jobs/queue.ts); other nodes' wait for their leases.
 *  - Job folders under the work dir, and tool processes working in them, that belong to no live
 *    process any more: removed, killed. A folder whose job another live node on this machine is
 *    running is left alone, and so is a live node's waiting converter (../jobs/fetch/waiting-converter.ts;
 *    the folders' names: ../jobs/fetch/work-folder.ts).
 *  - Staged store files of a dead node of this machine, or long abandoned by any (src/store/
 *    content-store.ts, clearIncoming).
 *  - The store reconciled with its rows (src/store/reconcile.ts), by one node at a time (a node
 *    that finds another reconciling skips it; that one's pass covers its leftovers too).
 */
const RECONCILE_LEASE = 'reconcile';
/** Longer than a reconciliation of a large store takes; a node that dies holding it frees it then. */
const RECONCILE_LEASE_MS = 30 * 60 * 1000;

export interface StartupDeps {
  database: Database;
  store: ContentStore;
  workDir: string;
  nodeId: string;
  hostname: string;
  now: () => number;
  log: Logger;
  /** Whether a process of this machine is alive (process.kill(pid, 0)). */
  isProcessAlive: (pid: number) => boolean;
}

export async function recoverAtStartup(deps: StartupDeps): Promise<void> {
  await fs.mkdir(deps.workDir, { recursive: true });
  const folders = await fs.readdir(deps.workDir);
  const jobIds = [...new Set(folders.map(jobIdOfFolder))];
  const { jobs } = deps.database.t;
  const owners = new Map(
    jobIds.length === 0
      ? []
      : (
          await deps.database.db
            .select({ id: jobs.id, status: jobs.status, owner: jobs.lockOwner })
            .from(jobs)
            .where(inArray(jobs.id, jobIds))
        )
          .filter((row) => row.status === 'running' && row.owner !== null)
          .map((row) => [row.id, row.owner!] as const),
  );
  const isDeadNode = (nodeId: string): boolean => isDeadPredecessor(nodeId, deps.nodeId, deps.isProcessAlive);
  const isOrphan = (folder: string): boolean => {
    const converterNode = waitingConverterNode(folder);
    if (converterNode !== undefined) return isDeadNode(converterNode);
    const owner = owners.get(jobIdOfFolder(folder));
    return owner === undefined || isDeadNode(owner);
  };
  const orphanFolders = folders.filter(isOrphan);
  const toolsKilled = await killOrphanedTools(deps.workDir, isOrphan);
  for (const folder of orphanFolders) await fs.rm(path.join(deps.workDir, folder), { recursive: true, force: true });

  // Their jobs are taken back by the worker pool's first sweep, without waiting their leases out.
  const leasesExpired = await expireLeasesOfGoneHolders(deps.database, isDeadNode);
  const incomingRemoved = await deps.store.clearIncoming(deps.now(), isDeadNode);
  let reconciled;
  if (await takeLease(deps.database, RECONCILE_LEASE, deps.nodeId, deps.now(), RECONCILE_LEASE_MS)) {
    try {
      reconciled = await reconcileStore({ database: deps.database, store: deps.store, now: deps.now });
    } finally {
      await giveBackLease(deps.database, RECONCILE_LEASE, deps.nodeId);
    }
  }
  deps.log.info(
    {
      work_folders_removed: orphanFolders.length,
      leases_expired: leasesExpired,
      orphaned_tools_killed: toolsKilled,
      incoming_removed: incomingRemoved,
      ...(reconciled
        ? {
            files_adopted: reconciled.adopted,
            files_removed: reconciled.filesRemoved,
            rows_dropped: reconciled.rowsDropped,
            aliases_cleared: reconciled.aliasesCleared,
          }
        : { reconciliation: 'under way on another node' }),
    },
    'start-up recovery',
  );
}
