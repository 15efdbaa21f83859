import type { Logger } from '../logger.js';

/**
 * Whether an error means the database cannot serve the request now, rather than a bug: the
 * server unreachable, shutting down, starting or out of connections, a connection lost, the
 * server refusing this client (its password or database gone: an operator's fix, not the
 * caller's), SQLite busy past its time-out; or a write refused for want of space. Such a request is worth trying
 * again, and is answered 503 with Retry-After (src/http/problem.ts). Drivers wrap their errors
 * (drizzle's query error holds the driver's as its cause), so the whole chain of causes is read.
 */
export type DatabaseOutage = 'unreachable' | 'full';

const UNREACHABLE = new Set([
  // The network and the operating system.
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'EPIPE',
  // postgres.js.
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  // PostgreSQL: admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections.
  '57P01',
  '57P02',
  '57P03',
  '53300',
  // PostgreSQL: invalid_authorization_specification, invalid_password, invalid_catalog_name.
  '28000',
  '28P01',
  '3D000',
  // SQLite: another writer held the file past the busy time-out.
  'SQLITE_BUSY',
  'SQLITE_LOCKED',
]);
/** PostgreSQL's disk_full, SQLite's full database or disk, and the system's own. */
const FULL = new Set(['53100', 'SQLITE_FULL', 'ENOSPC', 'EDQUOT']);
const MAX_CAUSES = 8;

export function databaseOutage(err: unknown): DatabaseOutage | null {
  let current = err as { code?: unknown; cause?: unknown } | null | undefined;
  for (let depth = 0; depth < MAX_CAUSES && current; depth++) {
    const code = typeof current.code === 'string' ? current.code : undefined;
    if (code !== undefined) {
      if (FULL.has(code)) return 'full';
      // PostgreSQL's class 08: connection exceptions.
      if (UNREACHABLE.has(code) || /^08[0-9A-Z]{3}$/.test(code)) return 'unreachable';
    }
    current = current.cause as typeof current;
  }
  return null;
}

/**
 * postgres.js races a transaction's body against its connection's close, so the rollback of a
 * transaction whose connection is lost fails after nobody waits for it, and a lost connection can
 * surface as an uncaught error: a database outage must not end the process. Any other unobserved
 * error still does.
 */
export function surviveDatabaseOutages(proc: Pick<NodeJS.Process, 'on'>, log: Pick<Logger, 'warn'>): void {
  const survivingOutages = (err: unknown) => {
    if (databaseOutage(err) === null) throw err;
    log.warn({ err }, 'a database query failed unobserved during an outage');
  };
  proc.on('unhandledRejection', survivingOutages);
  proc.on('uncaughtException', survivingOutages);
}
