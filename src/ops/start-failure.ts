import { DatabaseInUseError } from '../db/sqlite-lock.js';

/**
 * Why the service cannot start, in one sentence for the person who started it, for the failures
 * they can fix: the SQLite file held by another process, the address taken or not allowed. Null
 * for any other error, which keeps its stack (a defect, not a setting).
 */
export function startFailureText(err: unknown, listen: { host: string; port: number }): string | null {
  if (err instanceof DatabaseInUseError) return err.message;
  const code = (err as { code?: unknown } | null)?.code;
  const address = `${listen.host.includes(':') ? `[${listen.host}]` : listen.host}:${listen.port}`;
  switch (code) {
    case 'EADDRINUSE':
      return `${address} is already in use (another source-fetch, or another program): stop it, or set PORT (and HOST) to a free address.`;
    case 'EACCES':
      return `this process may not listen on ${address} (ports below 1024 need privileges): set PORT to 1024 or above, and put nginx in front for port 80.`;
    case 'EADDRNOTAVAIL':
      return `HOST ${listen.host} is not an address of this machine: set HOST to one of its addresses, or 0.0.0.0 for all.`;
    default:
      return null;
  }
}
