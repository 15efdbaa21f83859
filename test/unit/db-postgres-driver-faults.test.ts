import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { TLSSocket } from 'node:tls';
import postgres from 'postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { databaseGoneMessage, freshDatabaseUrl, psql } from '../support/postgres.js';
import { writeSelfSignedCertificate } from '../support/self-signed-certificate.js';

/**
 * postgres.js 3.4.9, as patched by patches/postgres+3.4.9.patch, against a real PostgreSQL: a
 * connection lost at an awkward moment must leave the pool working and never let a transaction's
 * statements run outside it. Each case failed on the unpatched driver (noted per case).
 *
 * The test opens the pool's sockets (postgres.js's `socket` option) to cut them when it chooses,
 * and to send its attempts to a server that refuses them.
 */
interface Pool {
  sql: postgres.Sql;
  /** The socket of the pool's latest connection attempt. */
  latest(): Socket;
  /** Where the next connection attempts go: the real server, or a port that refuses this client. */
  route(to: 'server' | { port: number }): void;
}

const pools: postgres.Sql[] = [];
afterEach(async () => {
  for (const sql of pools.splice(0)) await sql.end({ timeout: 0 });
});

/** `ssl: 'prefer'`: TLS where the server offers it (the refusing server below), plain where not (the test cluster). */
async function openPool(url: string, options: { ssl?: 'prefer' } = {}): Promise<Pool> {
  const server = new URL(url);
  let target: { host: string; port: number } = { host: server.hostname, port: Number(server.port) };
  let latest: Socket | undefined;
  const sql = postgres(url, {
    max: 1,
    fetch_types: false,
    onnotice: () => {},
    backoff: () => 0.01,
    ...options,
    socket: () => (latest = connect(target.port, target.host)),
  } as postgres.Options<Record<string, never>>);
  pools.push(sql);
  await sql`select 1`;
  return {
    sql,
    latest: () => latest!,
    route(to) {
      target = to === 'server' ? { host: server.hostname, port: Number(server.port) } : { host: '127.0.0.1', ...to };
    },
  };
}

type Refusal = 'database gone' | 'hang up';

/**
 * A server that refuses every connection at its startup: as PostgreSQL does when the database is
 * gone (3D000, then it hangs up), or by hanging up without a word (a proxy whose server is gone).
 * With `tls`, it accepts the client's SSLRequest and refuses inside TLS (a throwaway self-signed
 * certificate made by openssl).
 */
async function startRefusingServer(
  how: Refusal,
  tls?: { key: Buffer; cert: Buffer },
): Promise<{ server: Server; attempts(): number; secured(): number }> {
  const databaseGone = databaseGoneMessage();
  let attempts = 0;
  let secured = 0;
  const refuse = (socket: Socket) =>
    socket.once('data', () => (how === 'database gone' ? socket.end(databaseGone) : socket.end()));
  const server = createServer((socket) => {
    attempts++;
    socket.on('error', () => socket.destroy());
    if (!tls) return refuse(socket);
    socket.once('data', () => {
      socket.write('S'); // yes to the SSLRequest
      const secure = new TLSSocket(socket, { isServer: true, ...tls });
      secure.on('error', () => secure.destroy());
      secure.on('secure', () => secured++);
      refuse(secure);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, attempts: () => attempts, secured: () => secured };
}

/** A key and a self-signed certificate for localhost, made in a folder removed after. */
async function selfSignedCertificate(): Promise<{ key: Buffer; cert: Buffer }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'pg-tls-'));
  try {
    const { key, cert } = await writeSelfSignedCertificate(dir, 'localhost');
    return { key: await readFile(key), cert: await readFile(cert) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** How a query ends when its connection is lost: the socket's error, or the pool's. */
const LOST = { code: expect.stringMatching(/^(ECONNRESET|CONNECTION_CLOSED)$/) as unknown };

/** Cuts the connection as a dying network does: the socket errors without a word from the server. */
function cut(socket: Socket): void {
  socket.destroy(Object.assign(new Error('cut by the test'), { code: 'ECONNRESET' }));
}

describe('postgres.js with a connection lost at an awkward moment', () => {
  it('settles a query handed to a connection that is closing, and serves the next one', async () => {
    // Unpatched: a query sent between the socket's error and its close was left waiting for good.
    const pool = await openPool(await freshDatabaseUrl());
    const socket = pool.latest();
    const closed = new Promise((resolve) => socket.once('close', resolve));
    const lost = pool.sql`select 1 as n`;
    cut(socket);
    await expect(lost).rejects.toMatchObject(LOST);
    await expect(pool.sql`select 2 as n`).rejects.toMatchObject(LOST);
    await closed;
    expect(await pool.sql`select 3 as n`).toEqual([{ n: 3 }]);
  });

  it('rejects a transaction’s statements after its connection is lost, and runs none of them elsewhere', async () => {
    // Unpatched: begin() rejected, but the callback's next insert ran on the pool's replacement
    // connection outside any transaction, and stayed.
    const url = await freshDatabaseUrl();
    await psql(url, 'create table marks (n int)');
    const pool = await openPool(url);
    let resume!: () => void;
    const paused = new Promise<void>((resolve) => (resume = resolve));
    let firstDone!: () => void;
    const firstInserted = new Promise<void>((resolve) => (firstDone = resolve));
    const later: Promise<unknown>[] = [];
    const transaction = pool.sql.begin(async (tx) => {
      await tx`insert into marks values (1)`;
      firstDone();
      await paused;
      const second = tx`insert into marks values (2)`;
      later.push(second);
      await second;
    });
    transaction.catch(() => {});
    await firstInserted;
    cut(pool.latest());
    await expect(transaction).rejects.toMatchObject(LOST);
    // The pool reconnects its only connection for another query: the one the callback would reach.
    expect(await pool.sql`select 4 as n`).toEqual([{ n: 4 }]);
    resume();
    while (later.length === 0) await new Promise((resolve) => setImmediate(resolve));
    await expect(later[0]).rejects.toMatchObject(LOST);
    expect(await pool.sql`select count(*)::int as rows from marks`).toEqual([{ rows: 0 }]);
  });

  it('rejects the statements queued inside a transaction when its connection is lost', async () => {
    // Past postgres.js's pipeline of 100, a transaction queues its statements itself.
    // Unpatched: the queued statements never settled.
    const pool = await openPool(await freshDatabaseUrl());
    let statements: Promise<unknown>[] = [];
    let sleeping!: () => void;
    const started = new Promise<void>((resolve) => (sleeping = resolve));
    const transaction = pool.sql.begin((tx) => {
      statements = [tx`select pg_sleep(10)`, ...Array.from({ length: 150 }, (_, i) => tx`select ${i}::int`)];
      sleeping();
      return statements;
    });
    transaction.catch(() => {});
    await started;
    await new Promise((resolve) => setTimeout(resolve, 100));
    cut(pool.latest());
    await expect(transaction).rejects.toMatchObject(LOST);
    const outcomes = await Promise.allSettled(statements);
    expect(outcomes.filter((outcome) => outcome.status === 'rejected')).toHaveLength(151);
  });

  it.each([
    { how: 'database gone' as const, code: '3D000', over: 'plain' },
    { how: 'hang up' as const, code: 'CONNECTION_CLOSED', over: 'plain' },
    { how: 'database gone' as const, code: '3D000', over: 'TLS' },
    { how: 'hang up' as const, code: 'CONNECTION_CLOSED', over: 'TLS' },
  ])(
    'fails a query at the first refusal after a lost one ($how, $over), and serves once the server is back',
    async ({ how, code, over }) => {
      // Unpatched: the lost query stayed in place and took the server's 3D000 for its own, or a
      // hang-up started the next attempt at once, again and again; the query waited for good.
      const refusing = await startRefusingServer(how, over === 'TLS' ? await selfSignedCertificate() : undefined);
      try {
        const pool = await openPool(await freshDatabaseUrl(), over === 'TLS' ? { ssl: 'prefer' } : {});
        const cutOff = pool.sql`select pg_sleep(10)`;
        await new Promise((resolve) => setTimeout(resolve, 100));
        pool.route({ port: (refusing.server.address() as { port: number }).port });
        const socket = pool.latest();
        const closed = new Promise((resolve) => socket.once('close', resolve));
        cut(socket);
        await expect(cutOff).rejects.toMatchObject(LOST);
        await closed; // a query sent before the close would meet the dying connection, not the refusal
        await expect(pool.sql`select 1`).rejects.toMatchObject({ code });
        expect(refusing.attempts()).toBe(1);
        expect(refusing.secured()).toBe(over === 'TLS' ? 1 : 0);
        pool.route('server');
        expect(await pool.sql`select 5 as n`).toEqual([{ n: 5 }]);
      } finally {
        await new Promise((resolve) => refusing.server.close(resolve));
      }
    },
  );
});
