/**
 * The jobs table's partial indexes (src/db/schema; migrations 0008 and 0011 on SQLite, 0003 and
 * 0009 on PostgreSQL) hold only the jobs their queries look for: queued ones to claim (by age, and
 * by key and age), running ones whose lease may have run out, followers. A partial index serves a query only if the query's conditions imply
 * the index's, so each query of src/jobs/queue.ts that they are for (its shape here, the statuses
 * written into the SQL as queue.ts writes them) is checked to be able to use its index, on both
 * backends. On PostgreSQL a table this small is read whole whatever the indexes, so sequential
 * scans are turned off for the check: the question is whether the index can serve, not whether
 * the planner prefers it here. The control: a status the index does not hold cannot use it.
 */
import { sql, type SQL } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Queryable } from '../../src/db/database.js';
import { claimNextJob, countQueued } from '../../src/jobs/queue.js';
import { BACKENDS, openTestDatabase, type TestDatabase } from '../support/test-database.js';

describe.each(BACKENDS)('partial job indexes on %s', (kind) => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await openTestDatabase(kind);
  });

  afterAll(async () => {
    await database?.close();
  });

  /** The plan of `query` as text, with sequential scans off on PostgreSQL. */
  async function plan(query: SQL): Promise<string> {
    if (kind === 'sqlite') {
      const sqlite = database.db as unknown as { all(query: SQL): Promise<Array<Record<string, unknown>>> };
      const rows = await sqlite.all(sql`explain query plan ${query}`);
      return rows.map((row) => Object.values(row).join(' ')).join('\n');
    }
    return database.transaction(async (q: Queryable) => {
      await q.db.execute(sql`set local enable_seqscan = off`);
      const rows = (await q.db.execute(sql`explain ${query}`)) as unknown as Array<Record<string, string>>;
      return rows.map((row) => Object.values(row).join(' ')).join('\n');
    });
  }

  it('the claim, the lease check and the follower lookups can each use their index', async () => {
    // The shapes of claimNextJob, countQueued, the expired-lease sweep and the follower queries.
    // claimNextJob: the keys with claimable jobs, each key's running jobs, then a key's oldest job.
    expect(
      await plan(
        sql`select api_key_id, min(created_at) from jobs where status = 'queued' and follows_job_id is null group by api_key_id`,
      ),
    ).toMatch(/jobs_claim(_key)?_idx/);
    expect(
      await plan(sql`select api_key_id, count(*) from jobs where status = 'running' group by api_key_id`),
    ).toContain('jobs_lease_idx');
    expect(
      await plan(
        sql`select id from jobs where status = 'queued' and follows_job_id is null and api_key_id = ${'key'} order by created_at limit 1`,
      ),
    ).toContain('jobs_claim_key_idx');
    // Either index of queued jobs serves the count.
    expect(await plan(sql`select count(*) from jobs where status = 'queued'`)).toMatch(/jobs_claim(_key)?_idx/);
    expect(
      await plan(
        sql`select id from jobs where status = 'running' and (lease_expires_at is null or lease_expires_at < ${1000})`,
      ),
    ).toContain('jobs_lease_idx');
    expect(await plan(sql`select id from jobs where follows_job_id = ${'job-x'}`)).toContain('jobs_follows_idx');
    // The control: ended jobs are in neither index.
    expect(await plan(sql`select id from jobs where status = 'done' order by created_at limit 1`)).not.toContain(
      'jobs_claim_idx',
    );
    expect(await plan(sql`select id from jobs where status = 'failed' and lease_expires_at < ${1000}`)).not.toContain(
      'jobs_lease_idx',
    );
    expect(
      await plan(sql`select id from jobs where status = 'done' and api_key_id = ${'key'} order by created_at limit 1`),
    ).not.toContain('jobs_claim_key_idx');
  });

  it('still claims the oldest queued job and counts the queue', async () => {
    const base = { url: 'https://media.example/a', status: 'queued' as const, attempts: 0, bornDone: false };
    await database.db.insert(database.t.jobs).values([
      { ...base, id: 'job-new', urlKey: 'a', createdAt: 2 },
      { ...base, id: 'job-old', urlKey: 'b', createdAt: 1 },
      { ...base, id: 'job-done', urlKey: 'c', createdAt: 0, status: 'done' },
    ]);
    expect(await countQueued(database)).toBe(2);
    const claimed = await database.transaction((q) => claimNextJob(q, { owner: 'node-a', now: 10, leaseMs: 1000 }));
    expect(claimed?.id).toBe('job-old');
    expect(await countQueued(database)).toBe(1);
  });
});
