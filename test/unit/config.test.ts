import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';

describe('configuration', () => {
  it('has the documented defaults', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      host: '127.0.0.1',
      port: 8080,
      dataDir: path.resolve('data'),
      artifactRoot: path.resolve('data/artifacts'),
      apiKeys: [],
      tools: { ytdlp: 'yt-dlp', ffmpeg: 'ffmpeg' },
      workerConcurrency: 2,
      fetchAllowHosts: [],
      accelRedirectPrefix: null,
      database: { kind: 'sqlite', path: path.resolve('data/source-fetch.sqlite') },
      nodeId: undefined,
      jobLeaseMs: 30_000,
      confinement: { mode: 'netns', unshare: 'unshare', python: '/usr/bin/python3', resident: true },
      webhooks: { secret: undefined, timeoutMs: 10_000, retryBaseMs: 5_000, retryForMs: 86_400_000 },
    });
  });

  it("takes a fraction of a second as the callbacks' retry base", () => {
    const config = loadConfig({
      WEBHOOK_RETRY_BASE_S: '0.25',
      WEBHOOK_TIMEOUT_S: '3',
      WEBHOOK_RETRY_FOR_S: '600',
      WEBHOOK_SECRET: ' a-webhook-secret-of-32-characters-0 ',
    });
    expect(config.webhooks).toMatchObject({
      secret: 'a-webhook-secret-of-32-characters-0',
      timeoutMs: 3_000,
      retryBaseMs: 250,
      retryForMs: 600_000,
    });
  });

  it('takes the name servers, the look-up time limit, look-ups per key and the hosts file', () => {
    expect(loadConfig({}).dns).toEqual({ servers: [], timeoutMs: 5_000, lookupsPerKey: 8, hostsFile: '/etc/hosts' });
    const config = loadConfig({
      DNS_SERVERS: ' 10.0.0.53 , 10.0.0.54:5353,[2001:db8::53]:53 ',
      DNS_TIMEOUT_S: '1.5',
      DNS_LOOKUPS_PER_KEY: '3',
      HOSTS_FILE: '',
    });
    expect(config.dns).toEqual({
      servers: ['10.0.0.53', '10.0.0.54:5353', '[2001:db8::53]:53'],
      timeoutMs: 1_500,
      lookupsPerKey: 3,
      hostsFile: null,
    });
  });

  it("bounds callbacks' connects, and their attempts in flight in all, per key and per receiver", () => {
    expect(loadConfig({}).webhooks).toMatchObject({
      connectTimeoutMs: 3_000,
      concurrency: { total: 16, perKey: 4, perReceiver: 2 },
    });
    const config = loadConfig({
      WEBHOOK_CONNECT_TIMEOUT_S: '0.5',
      WEBHOOK_CONCURRENCY: '8',
      WEBHOOK_CONCURRENCY_PER_KEY: '2',
      WEBHOOK_CONCURRENCY_PER_RECEIVER: '1',
    });
    expect(config.webhooks).toMatchObject({
      connectTimeoutMs: 500,
      concurrency: { total: 8, perKey: 2, perReceiver: 1 },
    });
  });

  it('runs on PostgreSQL when DATABASE_URL is set, and as an API-only node with no workers', () => {
    const config = loadConfig({
      DATABASE_URL: 'postgres://app:pw@db:5432/app',
      DATABASE_POOL_SIZE: '20',
      WORKER_CONCURRENCY: '0',
      NODE_ID: 'api-1',
    });
    expect(config.database).toEqual({ kind: 'postgres', url: 'postgres://app:pw@db:5432/app', poolSize: 20 });
    expect(config.workerConcurrency).toBe(0);
    expect(config.nodeId).toBe('api-1');
  });

  it('parses lists and numbers', () => {
    const config = loadConfig({
      API_KEYS: ' key-one-0123456789 , key-two-0123456789 ',
      FETCH_ALLOW_HOSTS: '127.0.0.1:8000,media.internal',
      PORT: '9000',
    });
    expect(config.apiKeys).toEqual(['key-one-0123456789', 'key-two-0123456789']);
    expect(config.fetchAllowHosts).toEqual(['127.0.0.1:8000', 'media.internal']);
    expect(config.port).toBe(9000);
  });

  it.each([
    ['PORT', 'eighty'],
    ['PORT', '70000'],
    ['WORKER_CONCURRENCY', '-1'],
    ['DATABASE_URL', 'mysql://db/app'],
    ['NODE_ID', 'a node'],
    ['JOB_LEASE_S', '0'],
    ['API_KEYS', 'short'],
    ['ACCEL_REDIRECT_PREFIX', '_artifacts'],
    ['URL_SIGNING_SECRET', 'too-short'],
    ['LOG_LEVEL', 'loud'],
    ['MAX_DOWNLOAD_BYTES', '-1'],
    ['FETCH_ALLOW_HOSTS', 'http://127.0.0.1:8000/'],
    ['DNS_SERVERS', 'dns.example'],
    ['DNS_SERVERS', '10.0.0.53:0'],
    ['DNS_TIMEOUT_S', '0'],
    ['DNS_LOOKUPS_PER_KEY', '0'],
    ['WEBHOOK_CONNECT_TIMEOUT_S', '0'],
    ['WEBHOOK_CONCURRENCY_PER_RECEIVER', '0'],
    ['EGRESS_UPSTREAM_PROXY', 'proxy.internal:3128'],
    ['EGRESS_UPSTREAM_PROXY', 'https://proxy.internal:3128'],
    ['EGRESS_UPSTREAM_PROXY', 'http://proxy.internal:3128/some/path'],
    ['EVENTS_KEEPALIVE_S', '0'],
    ['EVENTS_KEEPALIVE_S', '60'],
    ['EVENT_STREAMS_PER_KEY', '0'],
    ['EVENT_STREAMS_PER_NODE', 'many'],
    ['RESIDENT_SANDBOX', 'yes'],
    ['WEBHOOK_SECRET', 'too-short'],
    ['WEBHOOK_TIMEOUT_S', '0'],
    ['WEBHOOK_RETRY_BASE_S', '0'],
    ['WEBHOOK_RETRY_BASE_S', 'soon'],
    ['WEBHOOK_RETRY_FOR_S', '1.5'],
  ])('refuses %s=%s with a message naming the variable', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^Invalid configuration:\\n  ${name}:`));
  });

  it('takes an upstream proxy for the egress guard, and never shows its password', () => {
    const config = loadConfig({ EGRESS_UPSTREAM_PROXY: 'http://fetcher:s%40cret-Pass@proxy.internal:3128' });
    const proxy = config.egressUpstreamProxy!;
    expect({ host: proxy.host, port: proxy.port }).toEqual({ host: 'proxy.internal', port: 3128 });
    expect(proxy.authorization).toBe(`Basic ${Buffer.from('fetcher:s@cret-Pass').toString('base64')}`);
    // Serialized (as a logger would), the credentials are gone.
    expect(JSON.stringify(config)).not.toMatch(/s%40cret|s@cret|ZmV0Y2hlcjpzQGNyZXQtUGFzcw/);
    expect(JSON.parse(JSON.stringify(proxy))).toEqual({
      host: 'proxy.internal',
      port: 3128,
      credentials: '[redacted]',
    });
    expect(loadConfig({ EGRESS_UPSTREAM_PROXY: 'http://[::1]:8888' }).egressUpstreamProxy).toMatchObject({
      host: '::1',
      port: 8888,
      authorization: null,
    });
    expect(loadConfig({}).egressUpstreamProxy).toBeUndefined();
  });

  it('names a bad upstream proxy without repeating it', () => {
    const attempt = () => loadConfig({ EGRESS_UPSTREAM_PROXY: 'https://fetcher:hunter2-secret@proxy.internal:3128' });
    expect(attempt).toThrow(/^Invalid configuration:\n {2}EGRESS_UPSTREAM_PROXY: must be an http:\/\/ URL/);
    expect(attempt).not.toThrow(/hunter2/);
  });

  it('bounds the app port: the head and request time limits, idle, all and per-client connections, the send and keep-alive timeouts, each checked against the other', () => {
    const { uncappedClients, ...defaults } = loadConfig({}).http;
    expect(defaults).toEqual({
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 60_000,
      maxIdle: 256,
      maxTotal: 1024,
      maxPerClient: 128,
      sendTimeoutMs: 60_000,
      keepAliveTimeoutMs: 75_000,
    });
    // Loopback, where nginx on the same host connects from, is taken for a proxy by default.
    expect(['127.0.0.1', '127.9.9.9', '::1', '::ffff:127.0.0.1'].map((a) => uncappedClients.includes(a))).toEqual([
      true,
      true,
      true,
      true,
    ]);
    expect(['10.0.0.1', '::2', undefined].map((a) => uncappedClients.includes(a))).toEqual([false, false, false]);
    const config = loadConfig({
      HTTP_HEADERS_TIMEOUT_S: '2',
      HTTP_REQUEST_TIMEOUT_S: '5',
      HTTP_MAX_IDLE_CONNECTIONS: '10',
      HTTP_MAX_CONNECTIONS: '40',
      HTTP_SEND_TIMEOUT_S: '7',
      HTTP_KEEP_ALIVE_TIMEOUT_S: '90',
      HTTP_PROXY_ADDRESSES: '10.1.0.0/16, fd00::5',
    });
    const { uncappedClients: proxies, ...set } = config.http;
    expect(set).toEqual({
      headersTimeoutMs: 2_000,
      requestTimeoutMs: 5_000,
      maxIdle: 10,
      maxTotal: 40,
      maxPerClient: 5,
      sendTimeoutMs: 7_000,
      keepAliveTimeoutMs: 90_000,
    });
    expect(['10.1.2.3', 'fd00::5', '127.0.0.1', '10.2.0.1'].map((a) => proxies.includes(a))).toEqual([
      true,
      true,
      false,
      false,
    ]);
    expect(loadConfig({ HTTP_PROXY_ADDRESSES: '' }).http.uncappedClients.includes('127.0.0.1')).toBe(false);
    expect(loadConfig({ HTTP_MAX_CONNECTIONS_PER_CLIENT: '1023' }).http.maxPerClient).toBe(1023);
    expect(() => loadConfig({ HTTP_HEADERS_TIMEOUT_S: '61' })).toThrow(
      /HTTP_HEADERS_TIMEOUT_S: must be at most HTTP_REQUEST_TIMEOUT_S/,
    );
    expect(() => loadConfig({ HTTP_MAX_IDLE_CONNECTIONS: '1024' })).toThrow(
      /HTTP_MAX_IDLE_CONNECTIONS: must be below HTTP_MAX_CONNECTIONS/,
    );
    expect(() => loadConfig({ HTTP_MAX_CONNECTIONS_PER_CLIENT: '1024' })).toThrow(
      /HTTP_MAX_CONNECTIONS_PER_CLIENT: must be below HTTP_MAX_CONNECTIONS/,
    );
    expect(() => loadConfig({ HTTP_PROXY_ADDRESSES: '10.0.0.0/8,nginx' })).toThrow(
      /HTTP_PROXY_ADDRESSES: "nginx" is neither an IP address nor a CIDR range/,
    );
    expect(() => loadConfig({ HTTP_MAX_CONNECTIONS: '0' })).toThrow(ConfigError);
  });

  it("bounds event streams and keeps their keep-alive below nginx's read timeout", () => {
    expect(loadConfig({}).events).toEqual({ keepAliveMs: 15_000, maxPerKey: 20, maxPerNode: 500, pollMs: 500 });
    expect(
      loadConfig({
        EVENTS_KEEPALIVE_S: '1',
        EVENT_STREAMS_PER_KEY: '2',
        EVENT_STREAMS_PER_NODE: '3',
        EVENTS_POLL_MS: '60000',
      }).events,
    ).toEqual({ keepAliveMs: 1000, maxPerKey: 2, maxPerNode: 3, pollMs: 60_000 });
    for (const pollMs of ['99', '60001', '0.5'])
      expect(() => loadConfig({ EVENTS_POLL_MS: pollMs }), pollMs).toThrow(/EVENTS_POLL_MS/);
  });
});
