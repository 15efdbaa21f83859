import fc from 'fast-check';
import ipaddr from 'ipaddr.js';
import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/errors.js';
import { classifyAddress } from '../../src/policy/address.js';
import { checkDestination } from '../../src/policy/destination.js';
import { aliasKey, destinationOf, parseSourceUrl } from '../../src/policy/source-url.js';

/**
 * The refused IPv4 blocks, written out here independently of src/policy/address.ts so that
 * dropping a row there fails a test.
 */
const REFUSED_V4: ReadonlyArray<readonly [string, string]> = [
  ['0.0.0.0/8', 'unspecified'],
  ['10.0.0.0/8', 'private'],
  ['100.64.0.0/10', 'cgnat'],
  ['127.0.0.0/8', 'loopback'],
  ['169.254.0.0/16', 'link_local'],
  ['172.16.0.0/12', 'private'],
  ['192.0.0.0/24', 'reserved'],
  ['192.0.2.0/24', 'documentation'],
  ['192.31.196.0/24', 'as112'],
  ['192.52.193.0/24', 'amt'],
  ['192.88.99.0/24', 'reserved'],
  ['192.168.0.0/16', 'private'],
  ['192.175.48.0/24', 'as112'],
  ['198.18.0.0/15', 'benchmarking'],
  ['198.51.100.0/24', 'documentation'],
  ['203.0.113.0/24', 'documentation'],
  ['224.0.0.0/4', 'multicast'],
  ['240.0.0.0/4', 'reserved'],
];

const REFUSED_V6: ReadonlyArray<readonly [string, string]> = [
  ['fc00::/7', 'unique_local'],
  ['fe80::/10', 'link_local'],
  ['fec0::/10', 'site_local'],
  ['ff00::/8', 'multicast'],
  ['2001:db8::/32', 'documentation'],
  ['3fff::/20', 'documentation'],
  ['2001:2::/48', 'benchmarking'],
  ['100::/64', 'reserved'],
  ['64:ff9b:1::/48', 'nat64_local'],
  ['2001:10::/28', 'orchid'],
  ['2001:20::/28', 'orchid'],
];

const u32 = fc.integer({ min: 0, max: 0xffffffff });
const u16 = fc.integer({ min: 0, max: 0xffff });

function v4FromInt(n: number): string {
  return [n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff].join('.');
}

/** A random address inside `cidr`. */
function inV4(cidr: string, rand: number): string {
  const [net, bits] = ipaddr.IPv4.parseCIDR(cidr);
  const base = net.toByteArray().reduce((acc, b) => acc * 256 + b, 0);
  const host = bits === 32 ? 0 : rand % 2 ** (32 - bits);
  return v4FromInt(base - (base % 2 ** (32 - bits)) + host);
}

function inV6(cidr: string, randParts: number[]): string {
  const [net, bits] = ipaddr.IPv6.parseCIDR(cidr);
  const parts = net.parts.map((p, i) => {
    const fixed = Math.max(0, Math.min(16, bits - i * 16));
    const mask = fixed === 0 ? 0 : (0xffff << (16 - fixed)) & 0xffff;
    return (p & mask) | (randParts[i]! & ~mask & 0xffff);
  });
  return new ipaddr.IPv6(parts).toString();
}

const hex32 = (v4: string): string => {
  const [a, b, c, d] = v4.split('.').map(Number) as [number, number, number, number];
  return `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
};

describe('address properties', () => {
  it('refuses every IPv4 in a refused block, with its range, also IPv4-mapped and NAT64-embedded', () => {
    fc.assert(
      fc.property(fc.constantFrom(...REFUSED_V4), u32, ([cidr, range], rand) => {
        const v4 = inV4(cidr, rand);
        const forms = [v4, `::ffff:${v4}`, `::ffff:${hex32(v4)}`, `64:ff9b::${v4}`, `64:ff9b::${hex32(v4)}`];
        for (const form of forms) {
          // 255.255.255.255 is broadcast, a more specific refusal inside 240/4.
          const expected = v4 === '255.255.255.255' ? 'broadcast' : range;
          expect(classifyAddress(form), form).toEqual({ allowed: false, range: expected });
        }
        // 6to4 and Teredo forms are refused whatever they carry.
        expect(classifyAddress(`2002:${hex32(v4)}::1`).allowed).toBe(false);
      }),
      { numRuns: 2000 },
    );
  });

  it('refuses every IPv6 in a refused block', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...REFUSED_V6),
        fc.array(u16, { minLength: 8, maxLength: 8 }),
        ([cidr, range], parts) => {
          const addr = inV6(cidr, parts);
          expect(classifyAddress(addr), addr).toEqual({ allowed: false, range });
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('refuses everything ipaddr.js itself considers special, and allows IPv6 only inside 2000::/3', () => {
    const global = ipaddr.IPv6.parseCIDR('2000::/3');
    fc.assert(
      fc.property(
        u32,
        fc.array(u16, { minLength: 8, maxLength: 8 }),
        fc.constantFrom(0, 0x2001, 0x2002, 0xfe80, 0x64, 0x2620),
        (n, parts, lead) => {
          const v4 = v4FromInt(n);
          if (ipaddr.IPv4.parse(v4).range() !== 'unicast') expect(classifyAddress(v4).allowed, v4).toBe(false);

          const v6 = new ipaddr.IPv6(lead === 0 ? parts : [lead, ...parts.slice(1)]);
          const verdict = classifyAddress(v6.toString());
          const embedsV4 = v6.range() === 'ipv4Mapped' || v6.match(ipaddr.IPv6.parseCIDR('64:ff9b::/96'));
          if (!embedsV4 && v6.range() !== 'unicast') expect(verdict.allowed, v6.toString()).toBe(false);
          if (verdict.allowed && !embedsV4) expect(v6.match(global)).toBe(true);
        },
      ),
      { numRuns: 5000 },
    );
  });

  it('judges Teredo by the XOR-ed client address', () => {
    fc.assert(
      fc.property(fc.constantFrom(...REFUSED_V4), u32, u32, ([cidr, range], rand, server) => {
        const v4 = inV4(cidr, rand);
        const n = v4.split('.').reduce((acc, b) => acc * 256 + Number(b), 0);
        const x = ~n >>> 0;
        const teredo = `2001:0:${(server >>> 16).toString(16)}:${(server & 0xffff).toString(16)}:0:0:${(x >>> 16).toString(16)}:${(x & 0xffff).toString(16)}`;
        expect(classifyAddress(teredo).range).toBe(v4 === '255.255.255.255' ? 'broadcast' : range);
      }),
    );
  });
});

/** Strings that look like URLs and carry the characters the classic parser tricks rely on. */
const urlish = fc
  .tuple(
    fc.constantFrom('http://', 'https://', 'HTTP://', 'ftp://', 'http:/', 'http:\\\\', '//', ''),
    fc.array(
      fc.oneof(
        fc.constantFrom('@', '\\', '#', '?', ':', '.', '[', ']', '%', '%2e', '%40', '\t', ' ', '１', '。', 'ß', 'xn--'),
        fc.constantFrom(
          '127.0.0.1',
          '0x7f.1',
          '2130706433',
          'localhost',
          'evil.com',
          '[::1]',
          '::ffff:7f00:1',
          '169.254.169.254',
        ),
        fc.string({ maxLength: 6 }),
        fc.webSegment(),
      ),
      { maxLength: 8 },
    ),
  )
  .map(([scheme, parts]) => scheme + parts.join(''));

describe('URL properties', () => {
  it('either throws ServiceError or yields an http(s) URL whose exact host is the one checked', async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(urlish, fc.webUrl({ withQueryParameters: true, withFragments: true })), async (raw) => {
        let url: URL;
        try {
          url = parseSourceUrl(raw);
        } catch (err) {
          expect(err).toBeInstanceOf(ServiceError);
          expect((err as ServiceError).kind).toBe('invalid_input');
          return;
        }
        expect(['http:', 'https:']).toContain(url.protocol);
        expect(url.username + url.password).toBe('');
        const { host, port } = destinationOf(url);
        // The host the policy sees is the host of the href a downloader will fetch.
        expect(new URL(url.href).hostname.replace(/^\[|\]$/g, '').replace(/\.$/, '')).toBe(host);

        const asked: string[] = [];
        const resolve = (name: string): Promise<string[]> => {
          asked.push(name);
          return Promise.resolve(['127.0.0.1']);
        };
        const outcome = await checkDestination(host, port, { resolve, allowHosts: [] }).then(
          () => 'allowed',
          (e: ServiceError) => e.code,
        );
        if (asked.length > 0) {
          expect(asked).toEqual([host.toLowerCase()]);
          expect(outcome).toBe('address_loopback');
        } else {
          // Not looked up: an IP literal judged as such, a localhost name, or a malformed name.
          const literal = classifyAddress(host);
          if (literal.range !== 'invalid') {
            expect(outcome).toBe(literal.allowed ? 'allowed' : `address_${literal.range}`);
          } else {
            expect(['host_localhost', 'host_invalid']).toContain(outcome);
          }
        }
      }),
      { numRuns: 3000 },
    );
  });

  const sourceUrl = fc.webUrl({ withQueryParameters: true, withFragments: true }).filter((raw) => {
    try {
      parseSourceUrl(raw);
      return true;
    } catch {
      return false;
    }
  });

  it('aliasKey is idempotent', () => {
    fc.assert(
      fc.property(sourceUrl, (raw) => {
        const once = aliasKey(parseSourceUrl(raw));
        expect(aliasKey(parseSourceUrl(once))).toBe(once);
      }),
      { numRuns: 2000 },
    );
  });

  it('aliasKey does not depend on the order of distinct query parameters', () => {
    const params = fc.uniqueArray(fc.tuple(fc.webSegment(), fc.webSegment()), {
      selector: ([k]) => k,
      minLength: 1,
      maxLength: 6,
    });
    fc.assert(
      fc.property(params, fc.func(fc.integer()), (pairs, rank) => {
        const shuffled = [...pairs].sort((a, b) => rank(a[0]) - rank(b[0]));
        const q = (ps: typeof pairs): string =>
          ps.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&');
        const a = aliasKey(parseSourceUrl(`https://media.example/watch?${q(pairs)}`));
        const b = aliasKey(parseSourceUrl(`https://media.example/watch?${q(shuffled)}#frag`));
        expect(b).toBe(a);
      }),
      { numRuns: 1000 },
    );
  });
});
