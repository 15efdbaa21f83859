import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/errors.js';
import { checkDestination } from '../../src/policy/destination.js';
import {
  createNameResolver,
  isNameServer,
  parseHostsFile,
  type NameResolverOptions,
} from '../../src/policy/name-resolver.js';
import { startNameServer, type TestNameServer } from '../support/dns-server.js';

/**
 * The service's name resolver against a name server of the test's own on 127.0.0.1 (never the
 * machine's resolver configuration): names under `.silent.test` are never answered, those under
 * `.missing.test` do not exist, `v4.test` has only an A record, any other name A and AAAA.
 */
let dns: TestNameServer;
let dir: string;

beforeAll(async () => {
  dns = await startNameServer((name) => {
    if (name.endsWith('.silent.test')) return 'silent';
    if (name.endsWith('.missing.test')) return 'nxdomain';
    if (name === 'v4.test') return { a: ['93.184.216.34'] };
    return { a: ['93.184.216.34', '93.184.216.35'], aaaa: ['2606:2800:220:1::1'] };
  });
  dir = await mkdtemp(path.join(tmpdir(), 'sf-resolver-'));
});
afterAll(async () => {
  await dns?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const resolverWith = (options: Partial<NameResolverOptions> = {}) =>
  createNameResolver({ servers: [dns.server], timeoutMs: 2000, perClient: 4, hostsFile: null, ...options });

async function failure(work: Promise<unknown>): Promise<{ code: string; afterMs: number }> {
  const started = performance.now();
  try {
    await work;
  } catch (err) {
    return { code: (err as { code: string }).code, afterMs: performance.now() - started };
  }
  throw new Error('expected the look-up to fail');
}

describe('name resolver', () => {
  it('asks A and AAAA of the configured server and gives both; no such name is ENOTFOUND', async () => {
    const names = resolverWith();
    expect((await names.resolve('Media.Example.test.')).sort()).toEqual([
      '2606:2800:220:1::1',
      '93.184.216.34',
      '93.184.216.35',
    ]);
    expect(await names.resolve('v4.test')).toEqual(['93.184.216.34']);
    expect((await failure(names.resolve('gone.missing.test'))).code).toBe('ENOTFOUND');
    const asked = dns.queries.filter((q) => q.name === 'media.example.test').map((q) => q.type);
    expect(asked.sort()).toEqual(['A', 'AAAA']);
  });

  it('reads the hosts file first, and again when it changes; a name it lists is never asked of a server', async () => {
    const hostsFile = path.join(dir, 'hosts');
    await writeFile(
      hostsFile,
      '# a comment\n127.0.0.1 localhost\n203.0.113.7  listed.test Alias.Test # trailing comment\n2001:db8::7 listed.test\n',
    );
    const names = resolverWith({ hostsFile, hostsRecheckMs: 0 });
    expect(await names.resolve('listed.test')).toEqual(['203.0.113.7', '2001:db8::7']);
    expect(await names.resolve('alias.test.')).toEqual(['203.0.113.7']);
    expect(dns.queries.some((q) => q.name === 'listed.test' || q.name === 'alias.test')).toBe(false);

    await writeFile(hostsFile, '203.0.113.8 listed.test\n');
    expect(await names.resolve('listed.test')).toEqual(['203.0.113.8']);
    // No longer listed: asked of the server (the control that the server is asked when the file says nothing).
    expect((await names.resolve('alias.test')).length).toBe(3);
    expect(dns.queries.some((q) => q.name === 'alias.test')).toBe(true);

    await rm(hostsFile);
    expect((await names.resolve('listed.test')).length).toBe(3);
  });

  it('keeps the policy: localhost is refused by name, a hosts-file loopback by address', async () => {
    const hostsFile = path.join(dir, 'hosts-loopback');
    await writeFile(hostsFile, '127.0.0.1 localhost box.test\n');
    const { resolve } = resolverWith({ hostsFile });
    const refusal = async (host: string) => {
      const err = await checkDestination(host, 80, { resolve, allowHosts: [] }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ServiceError);
      return (err as ServiceError).code;
    };
    expect(await refusal('localhost')).toBe('host_localhost');
    expect(await refusal('box.test')).toBe('address_loopback');
    await expect(checkDestination('v4.test', 80, { resolve, allowHosts: [] })).resolves.toEqual({
      addresses: ['93.184.216.34'],
      allowListed: false,
    });
  });

  it('gives up a name that is never answered within its time, ETIMEOUT, and its place goes to the next look-up at once', async () => {
    const timeoutMs = 400;
    const names = resolverWith({ timeoutMs, perClient: 1 });
    const silent = failure(names.resolve('first.silent.test', { client: 'a' }));
    await dns.waitForQueries(1, (q) => q.name === 'first.silent.test');
    // Asked while the only place is taken: it waits for it.
    const next = names.resolve('next.test', { client: 'a' });
    expect(names.load('a')).toEqual({ inFlight: 1, waiting: 1 });
    const gaveUp = await silent;
    const givenUpAt = performance.now();
    expect(gaveUp.code).toBe('ETIMEOUT');
    // Given up at its time-out, not before.
    expect(gaveUp.afterMs).toBeGreaterThanOrEqual(timeoutMs - 10);
    expect((await next).length).toBe(3);
    // The waiting look-up took the place at the give-up: answered within a time-out of it.
    expect(performance.now() - givenUpAt).toBeLessThan(timeoutMs);
    expect(names.load('a')).toEqual({ inFlight: 0, waiting: 0 });
  });

  it("cancels a look-up when the caller's signal aborts, and frees its place at once", async () => {
    const names = resolverWith({ timeoutMs: 30_000, perClient: 1 });
    const stop = new AbortController();
    const silent = failure(names.resolve('cancelled.silent.test', { client: 'a', signal: stop.signal }));
    await dns.waitForQueries(1, (q) => q.name === 'cancelled.silent.test');
    const waiting = names.resolve('after-cancel.test', { client: 'a' });
    expect(names.load('a')).toEqual({ inFlight: 1, waiting: 1 });
    stop.abort();
    expect((await silent).code).toBe('ECANCELLED');
    expect((await waiting).length).toBe(3);
    expect(names.load('a')).toEqual({ inFlight: 0, waiting: 0 });
  });

  it("bounds one client's look-ups in flight, and another client's name answers at once while it is full", async () => {
    const timeoutMs = 1500;
    const names = resolverWith({ timeoutMs, perClient: 2 });
    const timed = async (name: string) => {
      const started = performance.now();
      await names.resolve(name, { client: 'honest' });
      return performance.now() - started;
    };
    // Control: the honest client's time with nobody else asking.
    const before = await timed('before.test');

    const attack = Array.from({ length: 20 }, (_, i) =>
      failure(names.resolve(`n${i}.silent.test`, { client: 'attacker' })),
    );
    const attackers = (q: { name: string }) => /^n\d+\.silent\.test$/.test(q.name);
    await dns.waitForQueries(2, (q) => attackers(q) && q.type === 'A');
    expect(names.load('attacker')).toEqual({ inFlight: 2, waiting: 18 });
    const during = await timed('during.test');
    // Only the attacker's first two names were asked: the others wait their turn.
    expect(new Set(dns.queries.filter(attackers).map((q) => q.name)).size).toBe(2);

    // Never behind one of the attacker's look-ups, each of which lasts the time-out.
    expect(before).toBeLessThan(timeoutMs);
    expect(during).toBeLessThan(timeoutMs);
    const outcomes = await Promise.all(attack);
    expect(new Set(outcomes.map((o) => o.code))).toEqual(new Set(['ETIMEOUT']));
    expect(names.load('attacker')).toEqual({ inFlight: 0, waiting: 0 });
  });

  it('parses hosts files and name server entries', () => {
    expect(
      parseHostsFile('10.0.0.1 a.test b.test.\n\n# 10.0.0.9 c.test\nbad line\n::1 a.test\n10.0.0.1 A.TEST\n'),
    ).toEqual(
      new Map([
        ['a.test', ['10.0.0.1', '::1']],
        ['b.test', ['10.0.0.1']],
      ]),
    );
    for (const good of ['10.0.0.1', '10.0.0.1:5353', '::1', '[::1]:53', '[2001:db8::1]:5353'])
      expect(isNameServer(good), good).toBe(true);
    for (const bad of ['', 'dns.example', '10.0.0.1:0', '10.0.0.1:70000', '[10.0.0.1]:53', '::1:53x', '[::1]'])
      expect(isNameServer(bad), bad).toBe(false);
  });
});
