import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../../src/db/database.js';
import { openPostgres } from '../../src/db/postgres.js';
import { claimNextJob, enqueueJob, markDone } from '../../src/jobs/queue.js';
import { BACKENDS, openTestDatabase, type TestDatabase } from '../support/test-database.js';

/**
 * The queue takes turns across API keys, on a real database of each kind: of the keys with queued
 * jobs, the one with the fewest running, then the one whose last claim is oldest, then its oldest
 * job. The controls: one key alone is served oldest first, as before; a key's own jobs keep their
 * order.
 */
const LEASE_MS = 60_000;

describe.each(BACKENDS)('claims across keys on %s', (kind) => {
  let database: TestDatabase;
  let clock: number;
  beforeEach(async () => {
    database = await openTestDatabase(kind);
    clock = 1000;
  });
  afterEach(async () => {
    await database.close();
  });

  /** `count` jobs of `key`, each created a millisecond after the one before. */
  async function queue(key: string, count: number): Promise<void> {
    for (let i = 0; i < count; i++) {
      const id = `${key}-${i}`;
      await enqueueJob(database, {
        id,
        url: `https://m.example/${id}`,
        urlKey: `https://m.example/${id}`,
        createdAt: clock++,
        apiKeyId: key,
      });
    }
  }
  const claim = async (owner = 'node-a', db: Database = database) =>
    (await claimNextJob(db, { owner, now: clock++, leaseMs: LEASE_MS }))?.id;
  const finish = async (id: string, owner = 'node-a') =>
    expect(await markDone(database, id, owner, `cid-${id}`, clock++)).toBeDefined();

  it("one key's hundred queued jobs do not hold every worker: another key's job is taken next", async () => {
    await queue('bulk', 100);
    await queue('other', 1);
    // Two workers: the oldest job, then the other key's, though 99 of the bulk key's are older.
    expect([await claim(), await claim()]).toEqual(['bulk-0', 'other-0']);
    // Nothing of the other key left: the bulk key's, oldest first.
    expect([await claim(), await claim()]).toEqual(['bulk-1', 'bulk-2']);
  });

  it('the control: one key alone is served oldest first', async () => {
    await queue('only', 4);
    const claimed = [];
    for (let i = 0; i < 4; i++) claimed.push(await claim());
    expect(claimed).toEqual(['only-0', 'only-1', 'only-2', 'only-3']);
    expect(await claim()).toBeUndefined();
  });

  it('more keys than workers take turns: a key that was just served waits for the others', async () => {
    await queue('a', 4);
    await queue('b', 4);
    await queue('c', 4);
    // One worker: each job ends before the next claim, so every key has none running at each claim.
    const order: string[] = [];
    for (let i = 0; i < 9; i++) {
      const id = (await claim())!;
      order.push(id);
      await finish(id);
    }
    expect(order).toEqual(['a-0', 'b-0', 'c-0', 'a-1', 'b-1', 'c-1', 'a-2', 'b-2', 'c-2']);
  });

  it('two workers, three keys: the freed worker goes to the key that has waited, not back to the one it served', async () => {
    await queue('a', 3);
    await queue('b', 3);
    await queue('c', 3);
    expect([await claim(), await claim()]).toEqual(['a-0', 'b-0']);
    await finish('a-0');
    expect(await claim()).toBe('c-0');
    await finish('b-0');
    expect(await claim()).toBe('a-1');
  });

  it('jobs of no known key are one more key among the others', async () => {
    await enqueueJob(database, {
      id: 'legacy-0',
      url: 'https://m.example/l0',
      urlKey: 'https://m.example/l0',
      createdAt: clock++,
    });
    await enqueueJob(database, {
      id: 'legacy-1',
      url: 'https://m.example/l1',
      urlKey: 'https://m.example/l1',
      createdAt: clock++,
    });
    await queue('k', 2);
    expect([await claim(), await claim(), await claim(), await claim()]).toEqual([
      'legacy-0',
      'k-0',
      'legacy-1',
      'k-1',
    ]);
  });
});

describe('claims across keys on postgres, many nodes at once', () => {
  it('each job is claimed once (SKIP LOCKED kept), and no key gets all of them', async () => {
    const database = await openTestDatabase('postgres');
    const nodes = await Promise.all([1, 2, 3, 4].map(() => openPostgres(database.location, { poolSize: 2 })));
    try {
      let created = 0;
      for (const key of ['a', 'b', 'c']) {
        for (let i = 0; i < 8; i++) {
          const id = `${key}-${i}`;
          await enqueueJob(database, {
            id,
            url: `https://m.example/${id}`,
            urlKey: `https://m.example/${id}`,
            createdAt: created++,
            apiKeyId: key,
          });
        }
      }
      // Four nodes claim three jobs each, all at once.
      const claimed = (
        await Promise.all(
          nodes.map(async (node, n) => {
            const ids: string[] = [];
            for (let i = 0; i < 3; i++) {
              const job = await claimNextJob(node, { owner: `n${n}`, now: 100 + i, leaseMs: LEASE_MS });
              if (job) ids.push(job.id);
            }
            return ids;
          }),
        )
      ).flat();
      expect(claimed).toHaveLength(12);
      expect(new Set(claimed).size).toBe(12);
      const perKey = (key: string) => claimed.filter((id) => id.startsWith(`${key}-`)).length;
      // First come, first served would have taken twelve of key a's and b's; taking turns takes some of each.
      for (const key of ['a', 'b', 'c']) expect(perKey(key)).toBeGreaterThan(0);
    } finally {
      await Promise.all(nodes.map((node) => node.close()));
      await database.close();
    }
  });
});
