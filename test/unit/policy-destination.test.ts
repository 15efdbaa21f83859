import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/errors.js';
import {
  checkDestination,
  isAllowListed,
  parseAllowHosts,
  splitHostPort,
  type AllowList,
  type Resolver,
} from '../../src/policy/destination.js';

/** A resolver answering from a table, one answer per call, recording every lookup. */
function scripted(answers: Record<string, Array<string[] | Error>>): Resolver & { asked: string[] } {
  const asked: string[] = [];
  const resolve = (hostname: string): Promise<string[]> => {
    asked.push(hostname);
    const next = answers[hostname]?.shift();
    if (next === undefined) return Promise.reject(Object.assign(new Error('queryA ENOTFOUND'), { code: 'ENOTFOUND' }));
    if (next instanceof Error) return Promise.reject(next);
    return Promise.resolve(next);
  };
  return Object.assign(resolve, { asked });
}

async function refusal(p: Promise<unknown>): Promise<ServiceError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ServiceError);
  return err as ServiceError;
}

const none: AllowList = [];

describe('checkDestination', () => {
  it('refuses a name that resolves to the metadata address, naming host, address and range', async () => {
    const resolve = scripted({ 'media.example': [['169.254.169.254']] });
    const err = await refusal(checkDestination('media.example', 80, { resolve, allowHosts: none }));
    expect(err.kind).toBe('refused');
    expect(err.code).toBe('address_link_local');
    expect(err.message).toContain('media.example');
    expect(err.message).toContain('link_local');
    expect(err.extra.fields).toEqual({ host: 'media.example', address: '169.254.169.254', range: 'link_local' });
  });

  it('refuses a name when any one of its addresses is refused', async () => {
    const resolve = scripted({ 'media.example': [['93.184.216.34', '2606:4700::1111', '10.0.0.5']] });
    const err = await refusal(checkDestination('media.example', 443, { resolve, allowHosts: none }));
    expect(err.code).toBe('address_private');
    expect(err.extra.fields).toMatchObject({ address: '10.0.0.5' });
  });

  it('refuses a refused AAAA hiding behind a public A', async () => {
    const resolve = scripted({ 'media.example': [['93.184.216.34', '::ffff:127.0.0.1']] });
    const err = await refusal(checkDestination('media.example', 443, { resolve, allowHosts: none }));
    expect(err.code).toBe('address_loopback');
  });

  it('returns the checked addresses, canonical, so the caller connects to exactly those (rebinding)', async () => {
    const resolve = scripted({ 'rebind.example': [['93.184.216.34', '2606:4700:0:0:0:0:0:1111'], ['127.0.0.1']] });
    const deps = { resolve, allowHosts: none };
    await expect(checkDestination('rebind.example', 443, deps)).resolves.toEqual({
      addresses: ['93.184.216.34', '2606:4700::1111'],
      allowListed: false,
    });
    expect(resolve.asked).toEqual(['rebind.example']);
    // The second lookup answers loopback: checked again, refused.
    expect((await refusal(checkDestination('rebind.example', 443, deps))).code).toBe('address_loopback');
    expect(resolve.asked).toEqual(['rebind.example', 'rebind.example']);
  });

  it('classifies IP literals without asking the resolver', async () => {
    const resolve = scripted({});
    await expect(checkDestination('8.8.8.8', 53, { resolve, allowHosts: none })).resolves.toEqual({
      addresses: ['8.8.8.8'],
      allowListed: false,
    });
    await expect(checkDestination('[2606:4700::1111]', 443, { resolve, allowHosts: none })).resolves.toEqual({
      addresses: ['2606:4700::1111'],
      allowListed: false,
    });
    expect((await refusal(checkDestination('0x7f.1', 80, { resolve, allowHosts: none }))).code).toBe(
      'address_loopback',
    );
    expect((await refusal(checkDestination('[::1]', 80, { resolve, allowHosts: none }))).code).toBe('address_loopback');
    expect((await refusal(checkDestination('10.0.0.1.', 80, { resolve, allowHosts: none }))).code).toBe(
      'address_private',
    );
    expect(resolve.asked).toEqual([]);
  });

  it('refuses localhost and *.localhost by name, without resolving', async () => {
    const resolve = scripted({ localhost: [['93.184.216.34']], 'a.localhost': [['93.184.216.34']] });
    for (const host of ['localhost', 'LOCALHOST', 'localhost.', 'a.localhost', 'x.y.LocalHost.']) {
      const err = await refusal(checkDestination(host, 80, { resolve, allowHosts: none }));
      expect(err.code).toBe('host_localhost');
      expect(err.kind).toBe('refused');
    }
    expect(resolve.asked).toEqual([]);
  });

  it('refuses unresolvable hosts without leaking the resolver message', async () => {
    const secret = Object.assign(new Error('getaddrinfo ENOTFOUND via 10.0.0.2 search corp.internal'), {
      code: 'ENOTFOUND',
    });
    const weird = Object.assign(new Error('boom at 10.9.9.9'), { code: 'not a code: 10.9.9.9' });
    const resolve = scripted({ 'a.example': [[]], 'b.example': [secret], 'c.example': [weird] });
    const deps = { resolve, allowHosts: none };
    for (const [host, reason] of [
      ['a.example', 'no addresses'],
      ['b.example', 'ENOTFOUND'],
      ['c.example', 'lookup failed'],
    ] as const) {
      const err = await refusal(checkDestination(host, 80, deps));
      expect(err.kind).toBe('refused');
      expect(err.code).toBe('host_unresolvable');
      expect(err.extra.fields).toEqual({ host, reason });
      expect(err.message).not.toMatch(/10\.0\.0\.2|corp|10\.9\.9\.9/);
    }
  });

  it('gives up on a lookup that never answers', async () => {
    const resolve: Resolver = () => new Promise(() => {});
    const err = await refusal(
      checkDestination('slow.example', 80, { resolve, allowHosts: none, resolveTimeoutMs: 20 }),
    );
    expect(err.code).toBe('host_unresolvable');
    expect(err.extra.fields).toMatchObject({ reason: 'ETIMEOUT' });
  });

  it('refuses a resolver answer that is not an IP address, even for an allow-listed host', async () => {
    const resolve = scripted({ 'odd.example': [['not-an-ip']], 'trusted.example': [['127.0.0.1 ']] });
    expect((await refusal(checkDestination('odd.example', 80, { resolve, allowHosts: none }))).code).toBe(
      'address_invalid',
    );
    const allowHosts = parseAllowHosts(['trusted.example']);
    expect((await refusal(checkDestination('trusted.example', 80, { resolve, allowHosts }))).code).toBe(
      'address_invalid',
    );
  });

  it.each(['exa mple.com', 'a@b.example', 'evil.com\\@x', '', '.', 'a/b', 'x'.repeat(64) + '.example'])(
    'refuses the malformed host name %j',
    async (host) => {
      const resolve = scripted({});
      const err = await refusal(checkDestination(host, 80, { resolve, allowHosts: none }));
      expect(err.code).toBe('host_invalid');
      expect(resolve.asked).toEqual([]);
    },
  );

  it.each([0, -1, 65536, 1.5, Number.NaN])('refuses port %d', async (port) => {
    const err = await refusal(checkDestination('8.8.8.8', port, { resolve: scripted({}), allowHosts: none }));
    expect(err.code).toBe('port_invalid');
  });
});

describe('allow list', () => {
  const allowHosts = parseAllowHosts([
    'media.internal',
    'cache.internal:8080',
    ' 127.0.0.1:9000 ',
    '',
    '[::1]:9001',
    'localhost:7000',
  ]);

  it('parses host, host:port and [v6]:port entries, skipping blanks', () => {
    expect(allowHosts).toEqual([
      { host: 'media.internal', port: null },
      { host: 'cache.internal', port: 8080 },
      { host: '127.0.0.1', port: 9000 },
      { host: '::1', port: 9001 },
      { host: 'localhost', port: 7000 },
    ]);
    expect(parseAllowHosts(['Bücher.Example.', '[0:0::1]'])).toEqual([
      { host: 'xn--bcher-kva.example', port: null },
      { host: '::1', port: null },
    ]);
  });

  it.each([
    '::1:8080',
    'host:0',
    'host:65536',
    'host:port',
    'a@127.0.0.1',
    'http://x',
    'host/path',
    '[127.0.0.1]:80',
    'a b',
    ':80',
    '[::1]x',
  ])('rejects the malformed entry %j', (entry) => {
    expect(() => parseAllowHosts([entry])).toThrow(/FETCH_ALLOW_HOSTS/);
  });

  it('matches exactly: host-only any port, host:port only that port, after case and trailing-dot folding', () => {
    expect(isAllowListed(allowHosts, 'media.internal', 1)).toBe(true);
    expect(isAllowListed(allowHosts, 'MEDIA.internal.', 443)).toBe(true);
    expect(isAllowListed(allowHosts, 'sub.media.internal', 443)).toBe(false);
    expect(isAllowListed(allowHosts, 'media.internal.evil.example', 443)).toBe(false);
    expect(isAllowListed(allowHosts, 'xmedia.internal', 443)).toBe(false);
    expect(isAllowListed(allowHosts, 'cache.internal', 8080)).toBe(true);
    expect(isAllowListed(allowHosts, 'cache.internal', 8081)).toBe(false);
    expect(isAllowListed(allowHosts, 'cache.internal', 80)).toBe(false);
    expect(isAllowListed(allowHosts, '127.0.0.1', 9000)).toBe(true);
    expect(isAllowListed(allowHosts, '127.0.0.1', 9002)).toBe(false);
    expect(isAllowListed(allowHosts, '[::1]', 9001)).toBe(true);
    expect(isAllowListed(allowHosts, '[0:0:0:0:0:0:0:1]', 9001)).toBe(true);
    expect(isAllowListed(allowHosts, '[::1]', 9000)).toBe(false);
  });

  it('skips the address check for an allow-listed host:port, still returning the resolved addresses', async () => {
    const resolve = scripted({
      'media.internal': [['10.0.0.7']],
      'cache.internal': [['10.0.0.8'], ['10.0.0.8']],
    });
    await expect(checkDestination('media.internal', 8443, { resolve, allowHosts })).resolves.toEqual({
      addresses: ['10.0.0.7'],
      allowListed: true,
    });
    await expect(checkDestination('cache.internal', 8080, { resolve, allowHosts })).resolves.toEqual({
      addresses: ['10.0.0.8'],
      allowListed: true,
    });
    const err = await refusal(checkDestination('cache.internal', 8081, { resolve, allowHosts }));
    expect(err.code).toBe('address_private');
  });

  it('lets an allow-listed localhost:port through, and only on that port', async () => {
    const resolve = scripted({ localhost: [['127.0.0.1', '::1']] });
    await expect(checkDestination('localhost', 7000, { resolve, allowHosts })).resolves.toEqual({
      addresses: ['127.0.0.1', '::1'],
      allowListed: true,
    });
    expect((await refusal(checkDestination('localhost', 7001, { resolve, allowHosts }))).code).toBe('host_localhost');
    await expect(checkDestination('127.0.0.1', 9000, { resolve, allowHosts })).resolves.toEqual({
      addresses: ['127.0.0.1'],
      allowListed: true,
    });
    expect((await refusal(checkDestination('127.0.0.1', 9001, { resolve, allowHosts }))).code).toBe('address_loopback');
  });
});

describe('splitHostPort', () => {
  it.each([
    ['media.example:443', { host: 'media.example', port: 443 }],
    ['media.example', { host: 'media.example', port: null }],
    ['[::1]:8080', { host: '::1', port: 8080 }],
    ['[fe80::1%eth0]:80', { host: 'fe80::1%eth0', port: 80 }],
    ['::1:8080', null],
    ['media.example:', null],
    ['media.example:99999', null],
    ['[::1]:', null],
    ['', null],
  ])('%j → %j', (input, expected) => {
    expect(splitHostPort(input)).toEqual(expected);
  });
});
