import { promises as dns } from 'node:dns';
import { readFile, stat } from 'node:fs/promises';
import net from 'node:net';
import type { Resolver } from './destination.js';

/**
 * Host names to addresses for the whole service: the URL policy at submission, the egress guard
 * and callbacks all resolve through one NameResolver, and no client of it can stall the others.
 *
 * - The hosts file (HOSTS_FILE, /etc/hosts) is read first, as the system's resolver would: a name
 *   it lists gets its addresses from there and no query. The file is looked at again (its size,
 *   time and inode) at most once every `hostsRecheckMs`, and read again when it changed.
 * - Other names are asked of the name servers (DNS_SERVERS, or those of /etc/resolv.conf) with
 *   c-ares (node's dns.Resolver), A and AAAA at once, on the event loop: nothing is held in
 *   libuv's thread pool, which getaddrinfo (dns.lookup) shares between all look-ups. Names are
 *   asked as given: no search domains are appended.
 * - Each client (an API key's identity, a job's egress session, a callback's key) has at most
 *   `perClient` look-ups in flight; more wait in turn, first come first served, each for at most
 *   `timeoutMs`. One client's names that never answer therefore delay that client alone.
 * - A look-up in flight has `timeoutMs` for its queries; when that runs out, or the caller's
 *   signal aborts, its queries are cancelled and its place is given to the next look-up at once.
 *   It fails with code ETIMEOUT (or ECANCELLED when the caller aborted).
 * A look-up that found addresses for one family and nothing (or a time-out) for the other gives
 * the addresses found: callers connect only to the addresses they were given and checked.
 */
export interface NameResolver {
  resolve: Resolver;
  /** Look-ups in flight and waiting, per client (for tests and diagnostics). */
  load(client: string): { inFlight: number; waiting: number };
}

export interface NameResolverOptions {
  /** `ip` or `ip:port` or `[ipv6]:port`; empty: the system's (/etc/resolv.conf). */
  servers: readonly string[];
  /** A look-up's bound once in flight, and again on its wait for a place. */
  timeoutMs: number;
  /** Look-ups in flight at once per client. */
  perClient: number;
  /** Read before any query; null: none. */
  hostsFile: string | null;
  /** How long a read of the hosts file is trusted before its metadata is looked at again; default 1 s. */
  hostsRecheckMs?: number;
  now?: () => number;
}

/** Idle c-ares channels kept for the next look-ups (each serves one look-up at a time). */
const MAX_IDLE_CHANNELS = 64;
/** Query attempts per server within the look-up's time (c-ares doubles the wait for the second). */
const TRIES = 2;
const DEFAULT_CLIENT = 'default';
const DEFAULT_HOSTS_RECHECK_MS = 1000;

type LookupError = Error & { code: string };

const lookupError = (code: string, message: string): LookupError => Object.assign(new Error(message), { code });
const cancelledError = (name: string): LookupError => lookupError('ECANCELLED', `the look-up of ${name} was cancelled`);

export function createNameResolver(options: NameResolverOptions): NameResolver {
  const hosts =
    options.hostsFile === null
      ? null
      : createHostsTable(
          options.hostsFile,
          options.hostsRecheckMs ?? DEFAULT_HOSTS_RECHECK_MS,
          options.now ?? Date.now,
        );
  const lanes = createClientLanes(options.perClient);
  const serverCount = Math.max(1, options.servers.length || dns.getServers().length);
  // c-ares waits `timeout` for each server's first try and twice that for its second.
  const perTryMs = Math.max(50, Math.floor(options.timeoutMs / (3 * serverCount)));
  const idle: dns.Resolver[] = [];
  const takeChannel = (): dns.Resolver => {
    const reused = idle.pop();
    if (reused) return reused;
    const channel = new dns.Resolver({ timeout: perTryMs, tries: TRIES });
    if (options.servers.length > 0) channel.setServers([...options.servers]);
    return channel;
  };
  const giveBack = (channel: dns.Resolver): void => {
    if (idle.length < MAX_IDLE_CHANNELS) idle.push(channel);
  };

  async function resolve(hostname: string, how: { client?: string; signal?: AbortSignal } = {}): Promise<string[]> {
    const name = hostname.toLowerCase().replace(/\.$/, '');
    if (net.isIP(name) !== 0) return [name];
    const listed = hosts && (await hosts.lookup(name));
    if (listed && listed.length > 0) return listed;

    const bounded = () => {
      const timeout = AbortSignal.timeout(options.timeoutMs);
      return { timeout, signal: how.signal ? AbortSignal.any([how.signal, timeout]) : timeout };
    };
    const turn = bounded();
    const release = await lanes.acquire(how.client ?? DEFAULT_CLIENT, turn.signal).catch(() => {
      throw turn.timeout.aborted
        ? lookupError('ETIMEOUT', `no place for the look-up of ${name} within ${options.timeoutMs} ms`)
        : cancelledError(name);
    });
    const { timeout, signal: deadline } = bounded();
    const gaveUp = (): LookupError =>
      timeout.aborted
        ? lookupError('ETIMEOUT', `no answer for ${name} within ${options.timeoutMs} ms`)
        : cancelledError(name);
    if (deadline.aborted) {
      release();
      throw gaveUp();
    }
    const channel = takeChannel();
    let cancelled = false;
    const onGiveUp = (): void => {
      cancelled = true;
      // The place is free now; the cancelled queries settle (ECANCELLED) on their own.
      release();
      channel.cancel();
    };
    deadline.addEventListener('abort', onGiveUp, { once: true });
    try {
      const [v4, v6] = await Promise.allSettled([channel.resolve4(name), channel.resolve6(name)]);
      if (cancelled) throw gaveUp();
      const found = [...(v4.status === 'fulfilled' ? v4.value : []), ...(v6.status === 'fulfilled' ? v6.value : [])];
      if (found.length > 0) return found;
      throw lookupError(failureCode([v4, v6]), `no address for ${name}`);
    } finally {
      deadline.removeEventListener('abort', onGiveUp);
      if (!cancelled) {
        release();
        giveBack(channel);
      }
    }
  }

  return {
    resolve: (hostname, how) => resolve(hostname, how),
    load: (client) => lanes.load(client),
  };
}

/** The most telling of the two families' failures: no such name, then time-out, then no data. */
function failureCode(results: PromiseSettledResult<string[]>[]): string {
  const codes = results.flatMap((r) => (r.status === 'rejected' ? [errorCode(r.reason)] : ['ENODATA']));
  for (const preferred of ['ENOTFOUND', 'ETIMEOUT', 'ESERVFAIL', 'ECONNREFUSED'])
    if (codes.includes(preferred)) return preferred;
  return codes[0] ?? 'ENODATA';
}

/** A look-up failure's code (ENOTFOUND, ETIMEOUT, ...); EFAIL for one without a code. */
function errorCode(reason: unknown): string {
  const code = (reason as { code?: unknown } | null | undefined)?.code;
  return typeof code === 'string' ? code : 'EFAIL';
}

interface ClientLanes {
  /** Resolves with the function that gives the place back, once the client has a place; rejects if `signal` aborts first. */
  acquire(client: string, signal: AbortSignal): Promise<() => void>;
  load(client: string): { inFlight: number; waiting: number };
}

/** At most `perClient` places per client; waiters in arrival order; an empty lane is forgotten. */
export function createClientLanes(perClient: number): ClientLanes {
  interface Lane {
    inFlight: number;
    waiting: Set<() => void>;
  }
  const lanes = new Map<string, Lane>();

  const releaser = (client: string, lane: Lane): (() => void) => {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      lane.inFlight -= 1;
      const next = lane.waiting.values().next();
      if (!next.done) {
        lane.waiting.delete(next.value);
        next.value();
      } else if (lane.inFlight === 0) {
        lanes.delete(client);
      }
    };
  };

  return {
    acquire(client, signal) {
      if (signal.aborted) return Promise.reject(signal.reason);
      let lane = lanes.get(client);
      if (!lane) {
        lane = { inFlight: 0, waiting: new Set() };
        lanes.set(client, lane);
      }
      const own = lane;
      if (own.inFlight < perClient) {
        own.inFlight += 1;
        return Promise.resolve(releaser(client, own));
      }
      return new Promise((resolve, reject) => {
        const onAbort = (): void => {
          own.waiting.delete(grant);
          reject(signal.reason);
        };
        // Called by a release: the place passes straight to this waiter.
        const grant = (): void => {
          signal.removeEventListener('abort', onAbort);
          own.inFlight += 1;
          resolve(releaser(client, own));
        };
        own.waiting.add(grant);
        signal.addEventListener('abort', onAbort, { once: true });
      });
    },
    load(client) {
      const lane = lanes.get(client);
      return { inFlight: lane?.inFlight ?? 0, waiting: lane?.waiting.size ?? 0 };
    },
  };
}

interface HostsTable {
  /** The file's addresses for a lower-case name without a trailing dot; undefined when it lists none. */
  lookup(name: string): Promise<string[] | undefined>;
}

/** The hosts file, read again when its size, modification time or inode changes; a missing file lists nothing. */
function createHostsTable(file: string, recheckMs: number, now: () => number): HostsTable {
  let table = new Map<string, string[]>();
  let signature = '';
  let checkedAt = -Infinity;
  let checking: Promise<void> | undefined;

  const refresh = async (): Promise<void> => {
    let current: string;
    try {
      const info = await stat(file);
      current = `${info.ino}:${info.size}:${info.mtimeMs}`;
      if (current === signature) return;
      table = parseHostsFile(await readFile(file, 'utf8'));
    } catch {
      current = 'absent';
      table = new Map();
    }
    signature = current;
  };

  return {
    async lookup(name) {
      if (now() - checkedAt >= recheckMs) {
        checking ??= refresh().finally(() => {
          checkedAt = now();
          checking = undefined;
        });
        await checking;
      }
      return table.get(name);
    },
  };
}

/**
 * `address name [alias...]` lines, `#` to the end of a line a comment. Every address a name is
 * listed with, in file order, without repeats; names lower case without a trailing dot.
 */
export function parseHostsFile(text: string): Map<string, string[]> {
  const table = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    const [address, ...names] = line.replace(/#.*/, '').trim().split(/\s+/);
    if (address === undefined || names.length === 0 || net.isIP(address) === 0) continue;
    for (const raw of names) {
      const name = raw.toLowerCase().replace(/\.$/, '');
      const addresses = table.get(name) ?? [];
      if (!addresses.includes(address)) addresses.push(address);
      table.set(name, addresses);
    }
  }
  return table;
}

/** A name server as DNS_SERVERS and dns.Resolver#setServers take it: `ip`, `ip:port`, `ipv6` or `[ipv6]:port`. */
export function isNameServer(entry: string): boolean {
  if (net.isIP(entry) !== 0) return true;
  const bracketed = /^\[([^\]]+)\]:(\d{1,5})$/.exec(entry);
  const plain = /^([^:]+):(\d{1,5})$/.exec(entry);
  const port = Number((bracketed ?? plain)?.[2]);
  const valid = (bracketed !== null && net.isIPv6(bracketed[1]!)) || (plain !== null && net.isIPv4(plain[1]!));
  return valid && port >= 1 && port <= 65535;
}
