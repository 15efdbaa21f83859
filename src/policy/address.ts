import ipaddr from 'ipaddr.js';
import type { RefusedAddressRange } from '../api-errors.js';

/**
 * Which IP addresses the service may connect to on a client's behalf.
 *
 * Only global unicast is allowed. Everything else is refused with a stable, snake_case range
 * name that ends up in error codes (`address_<range>`) and logs; the names are listed, with what
 * each range is, in the API's error codes (REFUSED_ADDRESS_RANGES, src/api-errors.ts).
 *
 * ipaddr.js parses every notation we meet (inet_aton-style decimal, octal, hex and short IPv4
 * forms, compressed IPv6, embedded dotted IPv4) and does the CIDR matching, but its own range()
 * names are coarser than we want (documentation, benchmarking, 6to4 relay and 240/4 all come
 * back as "reserved") and it has no notion of "outside 2000::/3", so the tables below are ours,
 * taken from the IANA IPv4/IPv6 Special-Purpose Address Registries, the multicast registries and
 * the IPv6 Address Space registry. Matching is longest-prefix, so row order does not matter.
 */
export type AddressRange = 'global_unicast' | RefusedAddressRange;

export type AddressClass = { allowed: true; range: 'global_unicast' } | { allowed: false; range: RefusedAddressRange };

/**
 * IPv6 forms that carry an IPv4 address. How each is judged:
 * - `mapped` (::ffff:0:0/96) and `nat64` (64:ff9b::/96, RFC 6052 well-known prefix): a connection
 *   really goes to the embedded IPv4 (dual-stack socket, NAT64 translator), so the verdict is the
 *   embedded address's verdict.
 * - `compatible` (::/96, deprecated), `translated` (::ffff:0:0:0/96, SIIT), `six_to_four`
 *   (2002::/16) and `teredo` (2001::/32, client IPv4 XORed with 0xffffffff in the last 32 bits):
 *   no legitimate media host lives there, and on a host with a sit/teredo interface the kernel
 *   would tunnel to the embedded IPv4. They are always refused (the safer choice); when the
 *   embedded IPv4 is itself refused, its range is reported because that is the real target.
 * 64:ff9b:1::/48 (RFC 8215 local-use NAT64) is refused outright as `nat64_local`: the operator
 * picks where the IPv4 sits inside it, so there is no single embedded address to extract.
 */
type Embedding = 'mapped' | 'nat64' | 'compatible' | 'translated' | 'six_to_four' | 'teredo';

type Verdict = { range: RefusedAddressRange } | { embedding: Embedding };

interface Row<T extends ipaddr.IPv4 | ipaddr.IPv6> {
  network: T;
  bits: number;
  verdict: Verdict;
}

function table<T extends ipaddr.IPv4 | ipaddr.IPv6>(
  parseCidr: (cidr: string) => [T, number],
  rows: ReadonlyArray<readonly [string, Verdict]>,
): Row<T>[] {
  return rows
    .map(([cidr, verdict]) => {
      const [network, bits] = parseCidr(cidr);
      return { network, bits, verdict };
    })
    .sort((a, b) => b.bits - a.bits);
}

const r = (range: RefusedAddressRange): Verdict => ({ range });
const e = (embedding: Embedding): Verdict => ({ embedding });

const IPV4_ROWS = table(
  (c) => ipaddr.IPv4.parseCIDR(c),
  [
    ['0.0.0.0/8', r('unspecified')], // "this network" (RFC 791, RFC 1122)
    ['10.0.0.0/8', r('private')], // RFC 1918
    ['100.64.0.0/10', r('cgnat')], // shared address space (RFC 6598)
    ['127.0.0.0/8', r('loopback')],
    ['169.254.0.0/16', r('link_local')], // includes the cloud metadata address 169.254.169.254
    ['172.16.0.0/12', r('private')], // RFC 1918
    ['192.0.0.0/24', r('reserved')], // IETF protocol assignments: DS-Lite, PCP/TURN anycast, NAT64 discovery
    ['192.0.2.0/24', r('documentation')], // TEST-NET-1
    ['192.31.196.0/24', r('as112')], // AS112-v4
    ['192.52.193.0/24', r('amt')], // automatic multicast tunneling
    ['192.88.99.0/24', r('reserved')], // deprecated 6to4 relay anycast
    ['192.168.0.0/16', r('private')], // RFC 1918
    ['192.175.48.0/24', r('as112')], // direct delegation AS112 service
    ['198.18.0.0/15', r('benchmarking')], // RFC 2544
    ['198.51.100.0/24', r('documentation')], // TEST-NET-2
    ['203.0.113.0/24', r('documentation')], // TEST-NET-3
    ['224.0.0.0/4', r('multicast')],
    ['240.0.0.0/4', r('reserved')], // future use
    ['255.255.255.255/32', r('broadcast')], // limited broadcast
  ],
);

const IPV6_ROWS = table(
  (c) => ipaddr.IPv6.parseCIDR(c),
  [
    ['::/128', r('unspecified')],
    ['::1/128', r('loopback')],
    ['::/96', e('compatible')],
    ['::ffff:0:0/96', e('mapped')],
    ['::ffff:0:0:0/96', e('translated')],
    ['64:ff9b::/96', e('nat64')],
    ['64:ff9b:1::/48', r('nat64_local')],
    ['100::/64', r('reserved')], // discard-only (RFC 6666)
    ['2001::/23', r('reserved')], // IETF protocol assignments (PCP/TURN/DNS-SD anycast, drone DETs, ...)
    ['2001::/32', e('teredo')],
    ['2001:2::/48', r('benchmarking')],
    ['2001:3::/32', r('amt')],
    ['2001:4:112::/48', r('as112')],
    ['2001:10::/28', r('orchid')], // deprecated ORCHID
    ['2001:20::/28', r('orchid')], // ORCHIDv2
    ['2001:db8::/32', r('documentation')],
    ['2002::/16', e('six_to_four')],
    ['2620:4f:8000::/48', r('as112')],
    ['3fff::/20', r('documentation')],
    ['fc00::/7', r('unique_local')],
    ['fe80::/10', r('link_local')],
    ['fec0::/10', r('site_local')], // deprecated site-local
    ['ff00::/8', r('multicast')],
  ],
);

/** Global unicast IPv6 is 2000::/3; the rest of the space is IETF-reserved (5f00::/16 SRv6 etc.). */
const IPV6_GLOBAL_UNICAST = ipaddr.IPv6.parseCIDR('2000::/3');

/** `::a.b.c.d`: ipaddr.js silently rewrites this deprecated form to IPv4-mapped, which it is not. */
const IPV4_COMPATIBLE_DOTTED = /^::(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})$/;

const ALLOWED: AddressClass = { allowed: true, range: 'global_unicast' };

/**
 * Parses an IP literal as the network stack would: brackets around IPv6 are accepted, a zone id
 * (`fe80::1%eth0`) is dropped (a scope does not change which range the address is in, and the
 * caller connects to the canonical form returned here, which carries none). Returns null when
 * `text` is not an IP address (a host name, say).
 */
function parseIp(text: string): ipaddr.IPv4 | ipaddr.IPv6 | null {
  if (typeof text !== 'string') return null;
  const bracketed = text.startsWith('[') && text.endsWith(']');
  let s = bracketed ? text.slice(1, -1) : text;
  if (bracketed && !s.includes(':')) return null; // only IPv6 is written in brackets
  const zone = s.indexOf('%');
  if (zone >= 0 && s.includes(':')) s = s.slice(0, zone);
  const dotted = IPV4_COMPATIBLE_DOTTED.exec(s);
  if (dotted?.[1] !== undefined) {
    if (!ipaddr.IPv4.isValidFourPartDecimal(dotted[1])) return null;
    const [a, b, c, d] = ipaddr.IPv4.parse(dotted[1]).octets as [number, number, number, number];
    return new ipaddr.IPv6([0, 0, 0, 0, 0, 0, (a << 8) | b, (c << 8) | d]);
  }
  try {
    return ipaddr.parse(s);
  } catch {
    return null;
  }
}

/** The canonical text of an IP literal (what gets dialled), or null when it is not one. */
export function canonicalIp(text: string): string | null {
  return parseIp(text)?.toString() ?? null;
}

export function classifyAddress(ip: string): AddressClass {
  const addr = parseIp(ip);
  if (addr === null) return { allowed: false, range: 'invalid' };
  return addr.kind() === 'ipv4' ? classifyV4(addr as ipaddr.IPv4) : classifyV6(addr as ipaddr.IPv6);
}

function classifyV4(addr: ipaddr.IPv4): AddressClass {
  const row = IPV4_ROWS.find((x) => addr.match(x.network, x.bits));
  // IPv4 rows carry ranges only.
  return row && 'range' in row.verdict ? { allowed: false, range: row.verdict.range } : ALLOWED;
}

function classifyV6(addr: ipaddr.IPv6): AddressClass {
  const row = IPV6_ROWS.find((x) => addr.match(x.network, x.bits));
  if (row === undefined) {
    return addr.match(IPV6_GLOBAL_UNICAST) ? ALLOWED : { allowed: false, range: 'reserved' };
  }
  if ('range' in row.verdict) return { allowed: false, range: row.verdict.range };

  const embedding = row.verdict.embedding;
  const inner = classifyV4(embeddedIpv4(addr, embedding));
  if (embedding === 'mapped' || embedding === 'nat64') return inner;
  return { allowed: false, range: inner.allowed ? transitionRange(embedding) : inner.range };
}

function transitionRange(embedding: Exclude<Embedding, 'mapped' | 'nat64'>): RefusedAddressRange {
  return embedding === 'compatible' ? 'ipv4_compatible' : embedding === 'translated' ? 'ipv4_translated' : embedding;
}

function embeddedIpv4(addr: ipaddr.IPv6, embedding: Embedding): ipaddr.IPv4 {
  const p = addr.parts;
  // 6to4 carries the IPv4 right after the 2002 prefix; the others in the last 32 bits.
  let hi = embedding === 'six_to_four' ? p[1]! : p[6]!;
  let lo = embedding === 'six_to_four' ? p[2]! : p[7]!;
  if (embedding === 'teredo') {
    hi ^= 0xffff;
    lo ^= 0xffff;
  }
  return new ipaddr.IPv4([hi >> 8, hi & 0xff, lo >> 8, lo & 0xff]);
}
