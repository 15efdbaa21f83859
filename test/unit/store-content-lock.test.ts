/**
 * The per-content lock on PostgreSQL (src/store/pins.ts, lockContent): uses of one content share
 * it, so concurrent born-done submissions of one URL do not wait for each other; a removal waits
 * for the uses under way, and a use for a removal. Each transaction runs on its own pooled
 * connection; whether one waits is read off pg_locks, not timed.
 */
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Queryable } from '../../src/db/database.js';
import { lockContent, type ContentLock } from '../../src/store/pins.js';
import { openTestDatabase, type TestDatabase } from '../support/test-database.js';

const CID = 'c'.repeat(64);

describe('the content lock on postgres', () => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await openTestDatabase('postgres');
  });

  afterAll(async () => {
    await database?.close();
  });

  /** A transaction that takes the lock and holds it until `release` is called; `locked` resolves once it has it. */
  function holder(lock: ContentLock) {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let signalLocked!: () => void;
    const locked = new Promise<void>((resolve) => (signalLocked = resolve));
    const done = database.transaction(async (q: Queryable) => {
      await lockContent(q, [CID], lock);
      signalLocked();
      await released;
    });
    return { locked, release, done };
  }

  const waitingLockers = async () => {
    const rows = (await database.db.execute(
      sql`select count(*)::int as n from pg_locks where locktype = 'advisory' and not granted`,
    )) as unknown as Array<{ n: number }>;
    return rows[0]!.n;
  };

  it('lets two uses hold it at once, and makes a removal wait for both', async () => {
    const first = holder('use');
    await first.locked;
    const second = holder('use');
    // Granted while the first still holds it.
    await second.locked;
    expect(await waitingLockers()).toBe(0);

    const removal = holder('remove');
    let removalLocked = false;
    void removal.locked.then(() => (removalLocked = true));
    await expect.poll(waitingLockers).toBe(1);
    expect(removalLocked).toBe(false);
    first.release();
    await first.done;
    // One use still holds it.
    await expect.poll(waitingLockers).toBe(1);
    expect(removalLocked).toBe(false);
    second.release();
    await second.done;
    await removal.locked;

    // And a use waits for the removal.
    const use = holder('use');
    await expect.poll(waitingLockers).toBe(1);
    removal.release();
    await removal.done;
    await use.locked;
    use.release();
    await use.done;
  });
});
