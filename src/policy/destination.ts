import { ServiceError } from '../errors.js';
import { canonicalIp, classifyAddress } from './address.js';

/**
 * Whether a host:port may be connected to. Shared by submission (checks the URL's host before a
 * job exists) and by the egress guard (checks every connection the downloader makes).
 *
 * A name is resolved once and every address it resolves to must be allowed; the checked addresses
 * are returned so that the caller connects to exactly those and never resolves the name again
 * (DNS rebinding would otherwise swap in a refused address between check and connect).
 */

/**
 * All A and AAAA addresses of a host name (./name-resolver.ts). `client` is who asks (look-ups
 * in flight are bounded per client); `signal` gives the look-up up and frees its place.
 */
export type Resolver = (hostname: string, how?: { client?: string; signal?: AbortSignal }) => Promise<string[]>;

/** An operator-trusted destination (FETCH_ALLOW_HOSTS): a null port allows every port. */
export interface AllowEntry {
  readonly host: string;
  readonly port: number | null;
}
export type AllowList = readonly AllowEntry[];

export interface DestinationDeps {
  resolve: Resolver;
  allowHosts: AllowList;
  /** Bound on a lookup, on top of the resolver's own. Default 10 s. */
  resolveTimeoutMs?: number;
  /** Who the look-up is for: the resolver bounds look-ups in flight per client. */
  client?: string;
  /** Gives the look-up up (the caller stopped waiting). */
  signal?: AbortSignal;
}

export interface CheckedDestination {
  /** Canonical IP addresses, in resolver order: connect to these, not to the name. */
  addresses: string[];
  allowListed: boolean;
}

const DEFAULT_RESOLVE_TIMEOUT_MS = 10_000;

/** ASCII (punycode) labels; WHATWG lets through names like `a*b.com` that DNS never answers. */
const HOST_NAME = /^(?=.{1,253}$)[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63})*$/;

/** `host:port`, `host`, `[v6]:port` or `[v6]`; port null when absent. */
export function splitHostPort(authority: string): { host: string; port: number | null } | null {
  const m = /^\[([^\][]+)\](?::(\d{1,5}))?$/.exec(authority) ?? /^([^:\][]+)(?::(\d{1,5}))?$/.exec(authority);
  if (m === null) return null;
  const port = m[2] === undefined ? null : Number(m[2]);
  if (port !== null && !isPort(port)) return null;
  return { host: m[1]!, port };
}

/**
 * Parses FETCH_ALLOW_HOSTS entries (`host`, `host:port`, `[v6]`, `[v6]:port`). Blank entries are
 * skipped; a malformed one throws, because a typo in a trust list must stop start-up rather than
 * silently trust nothing (or something else).
 */
export function parseAllowHosts(entries: string[]): AllowList {
  const list: AllowEntry[] = [];
  for (const raw of entries) {
    const entry = raw.trim();
    if (entry === '') continue;
    const parts = splitHostPort(entry);
    const host = parts && canonicalAllowHost(parts.host, entry.startsWith('['));
    if (!parts || !host) {
      throw new Error(`FETCH_ALLOW_HOSTS entry "${entry}" is not host, host:port or [ipv6]:port`);
    }
    list.push({ host, port: parts.port });
  }
  return list;
}

/** Host names go through the WHATWG host parser so `Bücher.example` matches its punycode URL host. */
function canonicalAllowHost(host: string, bracketed: boolean): string | null {
  if (bracketed) return host.includes(':') ? canonicalIp(host) : null;
  if (!/^[\p{L}\p{N}._-]+$/u.test(host)) return null;
  let hostname: string;
  try {
    hostname = new URL(`http://${host}/`).hostname;
  } catch {
    return null;
  }
  const normal = normalizeHost(hostname);
  return normal !== '' && (canonicalIp(normal) !== null || HOST_NAME.test(normal)) ? normal : null;
}

export function isAllowListed(list: AllowList, host: string, port: number): boolean {
  const normal = normalizeHost(host);
  return list.some((e) => e.host === normal && (e.port === null || e.port === port));
}

/**
 * Throws ServiceError when hostname:port must not be reached:
 * `host_invalid`, `port_invalid` (invalid_input); `host_localhost`, `host_unresolvable`,
 * `address_<range>` (refused). An allow-listed host:port skips the localhost and address checks.
 */
export async function checkDestination(
  hostname: string,
  port: number,
  deps: DestinationDeps,
): Promise<CheckedDestination> {
  const host = normalizeHost(hostname);
  const literal = canonicalIp(host);
  if (literal === null && !HOST_NAME.test(host)) {
    throw new ServiceError('invalid_input', 'host_invalid', 'The destination host name is not valid.', {
      fields: { host: hostname },
    });
  }
  if (!isPort(port)) {
    throw new ServiceError('invalid_input', 'port_invalid', `Port ${port} is not a valid TCP port.`, {
      fields: { host, port },
    });
  }
  const allowListed = isAllowListed(deps.allowHosts, host, port);

  if (literal === null && !allowListed && isLocalhostName(host)) {
    throw new ServiceError(
      'refused',
      'host_localhost',
      `Host ${host} is localhost, which is not an allowed destination.`,
      { fields: { host } },
    );
  }
  const addresses = literal === null ? await resolveOnce(host, deps) : [literal];

  for (const address of addresses) {
    const verdict = classifyAddress(address);
    // An unparseable resolver answer is refused even for allow-listed hosts: there is nothing to dial.
    if (verdict.range === 'invalid' || (!allowListed && !verdict.allowed)) {
      const what = literal === null ? `Host ${host} resolves to ${address}, which` : `Address ${address}`;
      throw new ServiceError(
        'refused',
        `address_${verdict.range}`,
        `${what} is in the ${verdict.range} range and not an allowed destination.`,
        { fields: { host, address, range: verdict.range } },
      );
    }
  }
  return { addresses: addresses.map((a) => canonicalIp(a)!), allowListed };
}

/** Lowercase, without IPv6 brackets or a single trailing dot (`example.com.` is `example.com`). */
function normalizeHost(host: string): string {
  let h = host.toLowerCase();
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  if (h.endsWith('.')) h = h.slice(0, -1);
  return canonicalIp(h) ?? h;
}

function isLocalhostName(host: string): boolean {
  return host === 'localhost' || host.endsWith('.localhost');
}

function isPort(port: number): boolean {
  return Number.isInteger(port) && port >= 1 && port <= 65535;
}

async function resolveOnce(host: string, deps: DestinationDeps): Promise<string[]> {
  // Giving up also tells the resolver, which cancels the look-up and frees its place at once.
  const timeout = AbortSignal.timeout(deps.resolveTimeoutMs ?? DEFAULT_RESOLVE_TIMEOUT_MS);
  const signal = deps.signal ? AbortSignal.any([deps.signal, timeout]) : timeout;
  let onAbort: (() => void) | undefined;
  const givenUp = new Promise<never>((_, reject) => {
    onAbort = () =>
      reject(Object.assign(new Error('lookup timed out'), { code: timeout.aborted ? 'ETIMEOUT' : 'ECANCELLED' }));
    signal.addEventListener('abort', onAbort, { once: true });
  });
  let addresses: string[];
  try {
    addresses = await Promise.race([deps.resolve(host, { client: deps.client, signal }), givenUp]);
  } catch (err) {
    throw unresolvable(host, shortReason(err));
  } finally {
    signal.removeEventListener('abort', onAbort!);
  }
  if (!Array.isArray(addresses) || addresses.length === 0) throw unresolvable(host, 'no addresses');
  return [...new Set(addresses)];
}

/** A resolver's own message can carry internal detail (search domains, resolver IPs); keep its code only. */
function shortReason(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[A-Z][A-Z0-9_]{1,31}$/.test(code) ? code : 'lookup failed';
}

function unresolvable(host: string, reason: string): ServiceError {
  return new ServiceError('refused', 'host_unresolvable', `Host ${host} could not be resolved (${reason}).`, {
    fields: { host, reason },
  });
}
