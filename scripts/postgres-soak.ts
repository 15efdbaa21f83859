/**
 * A soak of the service's PostgreSQL pool (src/db/postgres.ts, on the patched driver:
 * patches/README.md) through connections lost and refused at random, run by hand, for instance
 * after upgrading postgres.js or dropping a patch:
 *
 *   npx tsx scripts/postgres-soak.ts [seconds, default 60]
 *
 * A throwaway cluster (test/support/postgres.ts) behind a forwarder on loopback that switches, a
 * few times a second, between forwarding, resetting every connection, refusing them as a server
 * whose database is gone does (3D000), and hanging up at their startup; each switch closes every
 * connection open. Meanwhile pings, plain queries and two-row transactions run, 15 at a time.
 *
 * It prints one JSON line and exits 1 when anything is wrong: an operation still pending 20 s
 * after the forwarder is back (`pending`), a transaction that left one of its two rows
 * (`half_committed`), connection attempts beyond 100 a second (`attempts_per_s`: a pool
 * reconnecting without pause), or an exception nobody could catch (`uncaught`). The unpatched
 * driver, 45 s: 8 operations pending, 327 attempts a second, 119 uncaught; patched: none, 29.
 */
import { once } from 'node:events';
import { createConnection, createServer, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql, type SQL } from 'drizzle-orm';
import { openPostgres } from '../src/db/postgres.js';
import { databaseGoneMessage, startPostgresCluster } from '../test/support/postgres.js';

type Mode = 'forward' | 'reset' | 'refuse' | 'hang up';

const SECONDS = Number(process.argv[2] ?? 60);
const MAX_ATTEMPTS_PER_S = 100;

// A lost connection's unobserved rejections (a transaction's rollback nobody waits for) must not
// end the soak; the service survives them the same way (src/main.ts). An uncaught exception is
// counted, and fails the soak.
let unobserved = 0;
let uncaught = 0;
process.on('unhandledRejection', () => unobserved++);
process.on('uncaughtException', () => uncaught++);

const cluster = await startPostgresCluster();
const upstream = new URL(await cluster.createDatabase());
const sockets = new Set<Socket>();
let mode: Mode = 'forward';
let attempts = 0;
const track = (socket: Socket) => {
  sockets.add(socket);
  socket.on('close', () => sockets.delete(socket));
  socket.on('error', () => socket.destroy());
};
const forwarder = createServer((client) => {
  attempts++;
  track(client);
  if (mode === 'reset') return client.resetAndDestroy();
  if (mode === 'refuse') return void client.once('data', () => client.end(databaseGoneMessage()));
  if (mode === 'hang up') return void client.once('data', () => client.end());
  const server = createConnection({ host: upstream.hostname, port: Number(upstream.port) });
  track(server);
  client.pipe(server).pipe(client);
});
forwarder.listen(0, '127.0.0.1');
await once(forwarder, 'listening');
const viaForwarder = new URL(upstream);
viaForwarder.port = String((forwarder.address() as { port: number }).port);

const database = await openPostgres(viaForwarder.toString(), { poolSize: 10 });
const execute = (db: unknown, query: SQL) => (db as { execute(query: SQL): Promise<unknown> }).execute(query);
await execute(database.db, sql`create table marks (n int)`);

const pending = new Set<Promise<unknown>>();
const outcomes = { ok: 0, failed: 0 };
function watch(operation: Promise<unknown>): void {
  const watched = operation.then(
    () => void outcomes.ok++,
    () => void outcomes.failed++,
  );
  pending.add(watched);
  void watched.finally(() => pending.delete(watched));
}

const started = Date.now();
let next = 0;
while (Date.now() - started < SECONDS * 1000) {
  const roll = Math.random();
  mode = roll < 0.4 ? 'forward' : roll < 0.6 ? 'refuse' : roll < 0.7 ? 'hang up' : 'reset';
  for (const socket of sockets) socket.destroy();
  for (let i = 0; i < 15; i++) {
    const kind = Math.random();
    const n = next++;
    if (kind < 0.3) watch(database.ping());
    else if (kind < 0.7)
      watch(
        database.transaction(async (tx) => {
          await execute(tx.db, sql`insert into marks values (${n})`);
          await sleep(Math.random() * 20);
          await execute(tx.db, sql`insert into marks values (${n})`);
        }),
      );
    else watch(execute(database.db, sql`select pg_sleep(0.005)`));
    if (Math.random() < 0.3) await sleep(Math.random() * 20);
  }
  await sleep(Math.random() * 300);
}
const elapsedS = (Date.now() - started) / 1000;
mode = 'forward';
for (const socket of sockets) socket.destroy();
const settled = Date.now() + 20_000;
while (pending.size > 0 && Date.now() < settled) await sleep(100);

const [{ half }] = (await execute(
  database.db,
  sql`select count(*)::int as half from (select n from marks group by n having count(*) <> 2) as runs`,
)) as [{ half: number }];
const report = {
  seconds: Math.round(elapsedS),
  operations: next,
  ...outcomes,
  pending: pending.size,
  half_committed: half,
  attempts_per_s: Math.round(attempts / elapsedS),
  unobserved,
  uncaught,
};
process.stdout.write(`${JSON.stringify(report)}\n`);
await Promise.race([database.close(), sleep(6000)]);
forwarder.close();
for (const socket of sockets) socket.destroy();
await cluster.stop();
const failed = report.pending > 0 || half > 0 || report.attempts_per_s > MAX_ATTEMPTS_PER_S || uncaught > 0;
process.exit(failed ? 1 : 0);
