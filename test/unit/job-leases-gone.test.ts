import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../../src/db/database.js';
import {
  claimNextJob,
  enqueueJob,
  expireLeasesOfGoneHolders,
  getJobRow,
  reclaimExpiredLeases,
} from '../../src/jobs/queue.js';
import { BACKENDS, openTestDatabase } from '../support/test-database.js';

/**
 * At start a node ends the leases of running jobs whose holder is provably gone: on SQLite all of
 * them (one process at a time holds the file), on PostgreSQL only those of holders it knows to be
 * gone; another node's jobs there keep their leases (the control).
 */
describe.each(BACKENDS)('expireLeasesOfGoneHolders on %s', (kind) => {
  let database: Database;
  const LEASE_MS = 60_000;
  const now = 1_000_000;

  beforeEach(async () => {
    database = await openTestDatabase(kind);
  });
  afterEach(async () => {
    await database.close();
  });

  async function runningUnder(id: string, owner: string) {
    await enqueueJob(database, {
      id,
      url: `https://m.example/${id}`,
      urlKey: `https://m.example/${id}`,
      createdAt: now,
    });
    const job = await claimNextJob(database, { owner, now, leaseMs: LEASE_MS });
    expect(job).toMatchObject({ id, lockOwner: owner });
  }

  it("ends the gone holders' leases, which the next sweep takes back at once; the others' wait", async () => {
    await runningUnder('mine', 'node-a');
    await runningUnder('theirs', 'node-b');
    const expired = await expireLeasesOfGoneHolders(database, (owner) => owner === 'node-a');
    const { requeued } = await reclaimExpiredLeases(database, 3, now + 1);
    const mine = await getJobRow(database, 'mine');
    const theirs = await getJobRow(database, 'theirs');
    expect(mine?.status).toBe('queued');
    if (kind === 'sqlite') {
      expect(expired).toBe(2);
      expect(requeued).toBe(2);
      expect(theirs?.status).toBe('queued');
    } else {
      expect(expired).toBe(1);
      expect(requeued).toBe(1);
      expect(theirs).toMatchObject({ status: 'running', lockOwner: 'node-b', leaseExpiresAt: now + LEASE_MS });
    }
  });

  it('does nothing when no job runs', async () => {
    expect(await expireLeasesOfGoneHolders(database, () => true)).toBe(0);
  });
});
