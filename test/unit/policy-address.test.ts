import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/errors.js';
import { classifyAddress, type AddressRange } from '../../src/policy/address.js';
import { checkDestination, type Resolver } from '../../src/policy/destination.js';
import { destinationOf, parseSourceUrl } from '../../src/policy/source-url.js';

/**
 * Cases drawn from the OWASP SSRF prevention cheat sheet, PayloadsAllTheThings "Server Side
 * Request Forgery" (localhost/metadata bypasses) and stripe/smokescreen's address tests, plus the
 * IANA special-purpose registries and their boundaries.
 */
type Case = readonly [input: string, range: AddressRange];

const REFUSED: Case[] = [
  // Loopback, in every IPv4 notation inet_aton (and ipaddr.js) accepts.
  ['127.0.0.1', 'loopback'],
  ['127.1', 'loopback'],
  ['127.0.1', 'loopback'],
  ['127.127.127.127', 'loopback'],
  ['127.255.255.254', 'loopback'],
  ['127.0.0.0', 'loopback'],
  ['2130706433', 'loopback'],
  ['0177.0.0.1', 'loopback'],
  ['0000177.0.0.1', 'loopback'],
  ['0177.1', 'loopback'],
  ['0x7f.0.0.1', 'loopback'],
  ['0x7F.0x00.0x00.0x01', 'loopback'],
  ['0x7f.1', 'loopback'],
  ['0x7f000001', 'loopback'],
  ['017700000001', 'loopback'],
  // "This network".
  ['0.0.0.0', 'unspecified'],
  ['0', 'unspecified'],
  ['0x0', 'unspecified'],
  ['0000.0000.0000.0000', 'unspecified'],
  ['0.1.2.3', 'unspecified'],
  // RFC 1918.
  ['10.0.0.1', 'private'],
  ['10.1', 'private'],
  ['10.255.255.255', 'private'],
  ['012.0.0.1', 'private'],
  ['0xa.0.0.1', 'private'],
  ['167772161', 'private'],
  ['172.16.0.1', 'private'],
  ['172.31.255.255', 'private'],
  ['2886729729', 'private'],
  ['192.168.0.1', 'private'],
  ['192.168.1.1', 'private'],
  ['3232235777', 'private'],
  ['0xc0a80014', 'private'],
  ['0xc0.0xa8.1.1', 'private'],
  ['0300.0250.1.1', 'private'],
  // Link-local, including the cloud metadata endpoints.
  ['169.254.169.254', 'link_local'],
  ['2852039166', 'link_local'],
  ['0xa9fea9fe', 'link_local'],
  ['0xa9.0xfe.0xa9.0xfe', 'link_local'],
  ['0251.0376.0251.0376', 'link_local'],
  ['169.254.43518', 'link_local'],
  ['169.254.170.2', 'link_local'], // AWS ECS task metadata
  ['169.254.0.1', 'link_local'],
  // Shared address space (Alibaba Cloud metadata lives here).
  ['100.64.0.1', 'cgnat'],
  ['100.100.100.200', 'cgnat'],
  ['100.127.255.254', 'cgnat'],
  ['255.255.255.255', 'broadcast'],
  ['4294967295', 'broadcast'],
  ['224.0.0.1', 'multicast'],
  ['239.255.255.250', 'multicast'],
  ['233.252.0.1', 'multicast'],
  ['192.0.2.1', 'documentation'],
  ['198.51.100.7', 'documentation'],
  ['203.0.113.9', 'documentation'],
  ['198.18.0.1', 'benchmarking'],
  ['198.19.255.255', 'benchmarking'],
  ['240.0.0.1', 'reserved'],
  ['250.1.2.3', 'reserved'],
  ['192.0.0.1', 'reserved'],
  ['192.0.0.8', 'reserved'],
  ['192.0.0.170', 'reserved'],
  ['192.0.0.192', 'reserved'], // Oracle Cloud metadata
  ['192.88.99.1', 'reserved'],
  ['192.31.196.1', 'as112'],
  ['192.175.48.6', 'as112'],
  ['192.52.193.1', 'amt'],
  // IPv6.
  ['::', 'unspecified'],
  ['0:0:0:0:0:0:0:0', 'unspecified'],
  ['[::]', 'unspecified'],
  ['::1', 'loopback'],
  ['0:0:0:0:0:0:0:1', 'loopback'],
  ['0000::0001', 'loopback'],
  ['[::1]', 'loopback'],
  ['::1%lo', 'loopback'],
  ['fe80::1', 'link_local'],
  ['FE80::ABCD', 'link_local'],
  ['febf::1', 'link_local'],
  ['fe80::1%eth0', 'link_local'],
  ['fe80::1%25eth0', 'link_local'],
  ['fe80::1%eth-0:weird', 'link_local'],
  ['[fe80::1%eth0]', 'link_local'],
  ['fc00::1', 'unique_local'],
  ['fd00::1', 'unique_local'],
  ['fd00:ec2::254', 'unique_local'], // AWS IMDS over IPv6
  ['fec0::1', 'site_local'],
  ['feff::1', 'site_local'],
  ['ff02::1', 'multicast'],
  ['ff05::1:3', 'multicast'],
  ['ff0e::1', 'multicast'],
  ['2001:db8::1', 'documentation'],
  ['2001:0db8:85a3::8a2e:0370:7334', 'documentation'],
  ['3fff::1', 'documentation'],
  ['3fff:fff::1', 'documentation'],
  ['2001:2::1', 'benchmarking'],
  ['100::1', 'reserved'], // discard-only
  ['100:0:0:1::1', 'reserved'], // dummy prefix
  ['2001:1::1', 'reserved'], // PCP anycast, inside 2001::/23
  ['2001:1ff::1', 'reserved'],
  ['2001:3::1', 'amt'],
  ['2001:4:112::1', 'as112'],
  ['2620:4f:8000::1', 'as112'],
  ['2001:10::1', 'orchid'],
  ['2001:20::1', 'orchid'],
  ['5f00::1', 'reserved'], // SRv6 SIDs
  ['4000::1', 'reserved'], // outside 2000::/3
  ['e000::1', 'reserved'],
  ['::2:3:4:5', 'reserved'],
  ['1::', 'reserved'],
  // IPv4-mapped: judged by the IPv4 inside.
  ['::ffff:127.0.0.1', 'loopback'],
  ['::ffff:7f00:1', 'loopback'],
  ['0:0:0:0:0:ffff:127.0.0.1', 'loopback'],
  ['[::ffff:127.0.0.1]', 'loopback'],
  ['::FFFF:169.254.169.254', 'link_local'],
  ['::ffff:a9fe:a9fe', 'link_local'],
  ['::ffff:10.0.0.1', 'private'],
  ['::ffff:192.168.1.1', 'private'],
  ['::ffff:0.0.0.0', 'unspecified'],
  ['::ffff:100.64.0.1', 'cgnat'],
  // IPv4-compatible (deprecated): refused; an embedded refused IPv4 names the range.
  ['::127.0.0.1', 'loopback'],
  ['::7f00:1', 'loopback'],
  ['::a9fe:a9fe', 'link_local'],
  ['::169.254.169.254', 'link_local'],
  ['::0.0.0.2', 'unspecified'],
  ['::8.8.8.8', 'ipv4_compatible'],
  ['::808:808', 'ipv4_compatible'],
  // IPv4-translated (SIIT).
  ['::ffff:0:127.0.0.1', 'loopback'],
  ['::ffff:0:a00:1', 'private'],
  ['::ffff:0:8.8.8.8', 'ipv4_translated'],
  // NAT64 well-known prefix: judged by the IPv4 inside.
  ['64:ff9b::127.0.0.1', 'loopback'],
  ['64:ff9b::7f00:1', 'loopback'],
  ['64:ff9b::169.254.169.254', 'link_local'],
  ['64:ff9b::a9fe:a9fe', 'link_local'],
  ['64:ff9b::10.0.0.1', 'private'],
  // Local-use NAT64: refused outright.
  ['64:ff9b:1::1', 'nat64_local'],
  ['64:ff9b:1:7f00:1::', 'nat64_local'],
  ['64:ff9b:1::8.8.8.8', 'nat64_local'],
  // 6to4: refused; the IPv4 sits in bits 16-47.
  ['2002:7f00:1::1', 'loopback'],
  ['2002:a9fe:a9fe::', 'link_local'],
  ['2002:c0a8:101::1', 'private'],
  ['2002:a00:1::', 'private'],
  ['2002:808:808::1', 'six_to_four'],
  // Teredo: refused; the client IPv4 is the last 32 bits XOR 0xffffffff.
  ['2001:0:4136:e378:8000:63bf:80ff:fffe', 'loopback'],
  ['2001:0:4136:e378::5601:5601', 'link_local'],
  ['2001::f5ff:fffe', 'private'],
  ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'documentation'], // client 192.0.2.45
  ['2001:0:4136:e378:8000:63bf:f7f7:f7f7', 'teredo'],
];

const ALLOWED: string[] = [
  '8.8.8.8',
  '1.1.1.1',
  '9.9.9.9',
  '93.184.216.34',
  '142.250.185.78',
  '208.67.222.222',
  '134744072', // 8.8.8.8
  '0x8080808',
  '1.0.0.0',
  '9.255.255.255',
  '11.0.0.1',
  '100.63.255.255',
  '100.128.0.0',
  '126.255.255.255',
  '128.0.0.0',
  '169.253.255.255',
  '169.255.0.0',
  '172.15.255.255',
  '172.32.0.0',
  '192.0.3.0',
  '192.167.255.255',
  '192.169.0.0',
  '198.17.255.255',
  '198.20.0.0',
  '223.255.255.255',
  '2606:4700::1111',
  '2606:4700:4700::1111',
  '2a00:1450:4001:82a::200e',
  '2001:4860:4860::8888',
  '2620:fe::fe',
  '2a03:2880:f12f:83:face:b00c:0:25de',
  '2001:200::1', // just past 2001::/23
  '2000::1',
  '3fff:1000::1', // just past 3fff::/20
  '[2606:4700::1111]',
  '::ffff:8.8.8.8',
  '::ffff:808:808',
  '64:ff9b::8.8.8.8',
  '64:ff9b::5db8:d822',
];

const NOT_AN_ADDRESS: string[] = [
  '',
  'localhost',
  'example.com',
  '1.2.3.4.5',
  '256.0.0.1',
  '08.0.0.1',
  '4294967296',
  '::g',
  ':::1',
  '1::2::3',
  ' 1.2.3.4',
  '1.2.3.4 ',
  '127.0.0.1%eth0',
  '[127.0.0.1]',
  '[::1',
];

describe('classifyAddress', () => {
  it.each(REFUSED)('refuses %s as %s', (input, range) => {
    expect(classifyAddress(input)).toEqual({ allowed: false, range });
  });

  it.each(ALLOWED)('allows global unicast %s', (input) => {
    expect(classifyAddress(input)).toEqual({ allowed: true, range: 'global_unicast' });
  });

  it.each(NOT_AN_ADDRESS)('refuses %j as not an address', (input) => {
    expect(classifyAddress(input)).toEqual({ allowed: false, range: 'invalid' });
  });
});

/** Every name the URL cases use; an IP literal must never reach it. */
const NAMES: Record<string, string[]> = {
  'localtest.me': ['127.0.0.1'],
  '169.254.169.254.nip.io': ['169.254.169.254'],
  'metadata.google.internal': ['169.254.169.254'],
  'spoofed.burpcollaborator.net': ['127.0.0.1'],
  'ipv6-metadata.example': ['fd00:ec2::254'],
  'public.example': ['93.184.216.34'],
};

function namesOnly(asked: string[]): Resolver {
  return (hostname) => {
    asked.push(hostname);
    const found = NAMES[hostname];
    if (found === undefined) return Promise.reject(Object.assign(new Error('not found'), { code: 'ENOTFOUND' }));
    return Promise.resolve(found);
  };
}

async function checkUrl(raw: string, asked: string[] = []): Promise<string> {
  try {
    const { host, port } = destinationOf(parseSourceUrl(raw));
    await checkDestination(host, port, { resolve: namesOnly(asked), allowHosts: [] });
    return 'allowed';
  } catch (err) {
    if (err instanceof ServiceError) return err.code;
    throw err;
  }
}

/** URL hosts: the WHATWG parser canonicalises the notation, the policy refuses the result. */
const URL_CASES: ReadonlyArray<readonly [url: string, code: string, resolved: boolean]> = [
  ['http://127.0.0.1/', 'address_loopback', false],
  ['http://127.1/', 'address_loopback', false],
  ['http://127.0.1/', 'address_loopback', false],
  ['http://127.000000000000000.1/', 'address_loopback', false],
  ['http://2130706433/', 'address_loopback', false],
  ['http://0177.0.0.1/', 'address_loopback', false],
  ['http://0x7f.1/', 'address_loopback', false],
  ['http://0x7f000001/', 'address_loopback', false],
  ['http://0x7f.0x0.0x0.0x1/', 'address_loopback', false],
  ['http://127.0.0.1./', 'address_loopback', false],
  ['http://127.0.0.1:22/', 'address_loopback', false],
  ['http://１２７.０.０.１/', 'address_loopback', false],
  ['http://①②⑦.⓪.⓪.①/', 'address_loopback', false],
  ['http://[::1]/', 'address_loopback', false],
  ['http://[0000::1]:80/', 'address_loopback', false],
  ['http://[::ffff:127.0.0.1]/', 'address_loopback', false],
  ['http://[0:0:0:0:0:ffff:127.0.0.1]/', 'address_loopback', false],
  ['http://[::ffff:7f00:1]/', 'address_loopback', false],
  ['http://[::127.0.0.1]/', 'address_loopback', false],
  ['http://[64:ff9b::127.0.0.1]/', 'address_loopback', false],
  ['http://[2002:7f00:1::]/', 'address_loopback', false],
  ['http://0/', 'address_unspecified', false],
  ['http://0.0.0.0:80/', 'address_unspecified', false],
  ['http://[::]:80/', 'address_unspecified', false],
  ['http://10.1/', 'address_private', false],
  ['http://192.168.1.1./', 'address_private', false],
  ['http://3232235521/', 'address_private', false],
  ['http://0xc0a80014/', 'address_private', false],
  ['https://172.16.0.1:8443/', 'address_private', false],
  ['http://169.254.169.254/latest/meta-data/', 'address_link_local', false],
  ['http://2852039166/', 'address_link_local', false],
  ['http://0xa9fea9fe/', 'address_link_local', false],
  ['http://0251.0376.0251.0376/', 'address_link_local', false],
  ['http://169.254.43518/', 'address_link_local', false],
  ['http://[::ffff:169.254.169.254]/', 'address_link_local', false],
  ['http://[::ffff:a9fe:a9fe]/', 'address_link_local', false],
  ['http://[fe80::1]/', 'address_link_local', false],
  ['http://[fd00:ec2::254]/latest/meta-data/', 'address_unique_local', false],
  ['http://100.100.100.200/latest/meta-data/', 'address_cgnat', false],
  ['http://192.0.0.192/', 'address_reserved', false],
  ['http://localhost/', 'host_localhost', false],
  ['http://LOCALHOST./', 'host_localhost', false],
  ['http://foo.localhost:8080/', 'host_localhost', false],
  ['http://localtest.me/', 'address_loopback', true],
  ['http://spoofed.burpcollaborator.net/', 'address_loopback', true],
  ['http://169.254.169.254.nip.io/', 'address_link_local', true],
  ['http://metadata.google.internal/computeMetadata/v1/', 'address_link_local', true],
  ['http://ipv6-metadata.example/', 'address_unique_local', true],
  ['http://public.example/', 'allowed', true],
  ['http://8.8.8.8/', 'allowed', false],
  ['https://[2606:4700::1111]/', 'allowed', false],
  ['http://o177.0.0.1/', 'url_invalid', false],
  ['http://08.0.0.1/', 'url_invalid', false],
  ['http://[fe80::1%25eth0]/', 'url_invalid', false],
];

describe('URL hosts through parseSourceUrl and checkDestination', () => {
  it.each(URL_CASES)('%s → %s', async (url, code, resolved) => {
    const asked: string[] = [];
    expect(await checkUrl(url, asked)).toBe(code);
    // IP literals are classified as they are, never looked up (DNS could answer anything).
    expect(asked.length > 0).toBe(resolved);
  });
});
