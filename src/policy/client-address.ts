import ipaddr from 'ipaddr.js';

/**
 * Client addresses as the app port's per-client connection cap counts them (src/http/server.ts):
 * an IPv4 address is one client; an IPv6 one counts with its whole /64, since a host is usually
 * given a /64 and picks any address in it; an IPv4-mapped IPv6 address is its IPv4 address.
 */
export function clientOf(remoteAddress: string | undefined): string {
  if (remoteAddress === undefined || !ipaddr.isValid(remoteAddress)) return 'unknown';
  let parsed = ipaddr.parse(remoteAddress);
  if (parsed instanceof ipaddr.IPv6 && parsed.isIPv4MappedAddress()) parsed = parsed.toIPv4Address();
  if (parsed instanceof ipaddr.IPv4) return parsed.toString();
  return `${parsed.parts
    .slice(0, 4)
    .map((part) => part.toString(16))
    .join(':')}::/64`;
}

/** Addresses and CIDR ranges (`127.0.0.0/8`, `::1`, `fd00::/8`), matched against connections' peers. */
export interface AddressRanges {
  includes(remoteAddress: string | undefined): boolean;
}

/**
 * Parses a list of addresses and CIDR ranges; a string naming the entry it cannot read. A bare
 * address is a range of one address.
 */
export function parseAddressRanges(entries: readonly string[]): AddressRanges | string {
  const ranges: Array<[ipaddr.IPv4 | ipaddr.IPv6, number]> = [];
  for (const entry of entries) {
    try {
      if (entry.includes('/')) {
        ranges.push(ipaddr.parseCIDR(entry));
      } else {
        const address = ipaddr.parse(entry);
        ranges.push([address, address.kind() === 'ipv4' ? 32 : 128]);
      }
    } catch {
      return `${JSON.stringify(entry)} is neither an IP address nor a CIDR range`;
    }
  }
  return {
    includes(remoteAddress: string | undefined) {
      if (remoteAddress === undefined || !ipaddr.isValid(remoteAddress)) return false;
      let address = ipaddr.parse(remoteAddress);
      if (address instanceof ipaddr.IPv6 && address.isIPv4MappedAddress()) address = address.toIPv4Address();
      return ranges.some(([network, bits]) => address.kind() === network.kind() && address.match(network, bits));
    },
  };
}
