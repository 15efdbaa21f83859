/**
 * Prepared queries (src/db/prepared.ts) inside transactions, on both backends. On PostgreSQL a
 * query is built once on the pool's handle and each transaction runs a copy bound to its own
 * connection: if that binding were lost, the query would run on another pooled connection,
 * outside the transaction (its writes committed at once, its reads blind to the transaction's).
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prepared } from '../../src/db/prepared.js';
import { getJobRow, insertBornDoneJob } from '../../src/jobs/queue.js';
import { BACKENDS, openTestDatabase, type TestDatabase } from '../support/test-database.js';

const CID = 'd'.repeat(64);

describe.each(BACKENDS)('prepared queries in transactions on %s', (kind) => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await openTestDatabase(kind);
  });

  afterAll(async () => {
    await database?.close();
  });

  const bornDone = (id: string) => ({
    id,
    url: `https://media.example/${id}`,
    urlKey: id,
    contentId: CID,
    at: 1,
    requestId: null,
    apiKeyId: '',
  });

  it('run on the transaction: they read its own writes, and its rollback takes their writes with it', async () => {
    let seenInside: string | undefined;
    let seenOutside: unknown = 'not asked';
    await expect(
      database.transaction(async (q) => {
        await insertBornDoneJob(q, bornDone('job-rolled-back'));
        seenInside = (await getJobRow(q, 'job-rolled-back'))?.id;
        // SQLite has one connection: another reader would wait for this transaction's end.
        if (kind === 'postgres') seenOutside = await getJobRow(database, 'job-rolled-back');
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect(seenInside).toBe('job-rolled-back');
    if (kind === 'postgres') expect(seenOutside).toBeUndefined();
    expect(await getJobRow(database, 'job-rolled-back')).toBeUndefined();

    // The control: committed, the same write is there for everyone.
    await database.transaction(async (q) => {
      await insertBornDoneJob(q, bornDone('job-committed'));
    });
    expect((await getJobRow(database, 'job-committed'))?.id).toBe('job-committed');
  });

  it('are built once, however many transactions run them', async () => {
    let builds = 0;
    const countOne = (q: Parameters<typeof prepared>[0]) =>
      prepared(q, 'test_count_one', ({ db, t }) => {
        builds++;
        return db
          .select({ n: sql<number>`count(*)` })
          .from(t.jobs)
          .where(sql`${t.jobs.id} = ${sql.placeholder('id')}`)
          .prepare('test_count_one');
      });
    for (let i = 0; i < 3; i++) {
      await database.transaction(async (q) => {
        await countOne(q).execute({ id: 'job-committed' });
      });
    }
    const [row] = await countOne(database).execute({ id: 'job-committed' });
    expect(Number(row!.n)).toBe(1);
    expect(builds).toBe(1);
  });
});
