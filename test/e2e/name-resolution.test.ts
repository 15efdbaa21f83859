import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { namespacedUdpSocket, type NamespacedSocket } from '../support/dns-namespace.js';
import { startNameServer, type NameQuery, type TestNameServer } from '../support/dns-server.js';
import { makeTone, type MediaFixture } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startService, type JobBody, type ServiceHandle } from '../support/service.js';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver.js';

/**
 * Name resolution that one client cannot stall, with the real service: its only name server
 * (DNS_SERVERS) is one this test runs, on a socket in a network namespace the test makes (never
 * the machine's resolver configuration). Names under `.silent.test` are never answered; the
 * honest names lead to this machine (allow-listed by name, FETCH_ALLOW_HOSTS), where the media
 * and the callback receiver are. Key A sends batches of silent names; key B's submission of an
 * honest name is timed before (the control) and while they wait, and its job (the egress guard
 * resolves the source again) and callback (the sender resolves the receiver) go through meanwhile.
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const KEY_A = `key-a-${randomBytes(12).toString('base64url')}`;
const KEY_B = `key-b-${randomBytes(12).toString('base64url')}`;
const LOOKUPS_PER_KEY = 4;
const BATCHES = 3;
const BATCH_SIZE = 100;

let namespace: NamespacedSocket | undefined;
let dns: TestNameServer;
let media: MediaServer;
let tone: MediaFixture;
let receiver: WebhookReceiver;
let svc: ServiceHandle;
let hostsDir: string;

const silentName = (q: NameQuery) => q.name.endsWith('.silent.test');

beforeAll(async () => {
  tone = await makeTone(FIXTURE_DIR, { seconds: 1, channels: 1, sampleRate: 44100, format: 'flac' });
  media = await startMediaServer();
  receiver = await startWebhookReceiver();
  namespace = await namespacedUdpSocket();
  dns = await startNameServer((name) => {
    if (name.endsWith('.silent.test')) return 'silent';
    if (name === 'media.honest.test' || name === 'hook.honest.test') return { a: ['127.0.0.1'] };
    return 'nxdomain';
  }, namespace.socket);
  hostsDir = await mkdtemp(path.join(tmpdir(), 'sf-hosts-'));
  const hostsFile = path.join(hostsDir, 'hosts');
  await writeFile(hostsFile, '127.0.0.1 localhost\n127.0.0.1 files.honest.test\n');
  svc = await startService({
    apiKey: KEY_A,
    env: {
      API_KEYS: `${KEY_A},${KEY_B}`,
      DNS_SERVERS: dns.server,
      DNS_TIMEOUT_S: '2',
      DNS_LOOKUPS_PER_KEY: String(LOOKUPS_PER_KEY),
      HOSTS_FILE: hostsFile,
      FETCH_ALLOW_HOSTS: 'media.honest.test,hook.honest.test,files.honest.test',
    },
  });
}, 120_000);
afterAll(async () => {
  await svc?.stop();
  await dns?.close();
  await namespace?.remove();
  await receiver?.close();
  await media?.close();
  if (hostsDir) await rm(hostsDir, { recursive: true, force: true });
});

async function submitAs(
  key: string,
  body: object,
): Promise<{ status: number; body: JobBody & { code?: string }; ms: number }> {
  const started = performance.now();
  const res = await fetch(`${svc.baseUrl}/sources`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const answer = (await res.json()) as JobBody & { code?: string };
  return { status: res.status, body: answer, ms: performance.now() - started };
}

describe('name resolution under a flood of names that never answer', () => {
  it("answers another key's submission of a resolvable name within 1 s, and its job and callback go through", async () => {
    const port = media.hostPort.split(':')[1];
    media.serveFile('/honest.flac', tone.path, { contentType: tone.contentType });
    const honest = (n: string) => `http://media.honest.test:${port}/honest.flac?n=${n}`;

    // The control: before any attack, an honest name answers quickly; a name from the hosts file
    // needs no query, and localhost is still refused by name.
    const before = await submitAs(KEY_B, { url: honest('before') });
    expect(before.status, JSON.stringify(before.body)).toBe(202);
    const fromHostsFile = await submitAs(KEY_B, { url: `http://files.honest.test:${port}/honest.flac` });
    expect(fromHostsFile.status, JSON.stringify(fromHostsFile.body)).toBe(202);
    expect(dns.queries.some((q) => q.name === 'files.honest.test')).toBe(false);
    expect((await submitAs(KEY_B, { url: `http://localhost:${port}/honest.flac` })).body.code).toBe('host_localhost');

    // The attack: key A's batches of names that never answer, all sent at once.
    const batches = Array.from({ length: BATCHES }, (_, b) =>
      fetch(`${svc.baseUrl}/sources/batch`, {
        method: 'POST',
        headers: { authorization: `Bearer ${KEY_A}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          urls: Array.from({ length: BATCH_SIZE }, (_, i) => `http://n${i}-b${b}.silent.test/a.mp3`),
        }),
      }).then(async (res) => ({
        status: res.status,
        body: (await res.json()) as { results: Array<{ outcome: string; problem?: { code: string } }> },
        at: performance.now(),
      })),
    );
    // Under way: key A has every look-up it may have in flight.
    await dns.waitForQueries(LOOKUPS_PER_KEY, (q) => silentName(q) && q.type === 'A');

    const during = await submitAs(KEY_B, {
      url: honest('during'),
      callback_url: `http://hook.honest.test:${receiver.port}/done`,
    });
    expect(during.status, JSON.stringify(during.body)).toBe(202);
    // The egress guard and the callback sender resolve through the same name server meanwhile.
    const [callback] = await receiver.waitForRequests(1, 60_000);
    const callbackAt = performance.now();
    expect(JSON.parse(callback!.body)).toMatchObject({ job_id: during.body.job_id, status: 'done' });

    const answered = await Promise.all(batches);
    // The attack was real: its batches were still waiting while the honest job and callback went
    // through, and every one of its names ended unresolved.
    expect(answered.every((batch) => batch.at > callbackAt)).toBe(true);
    for (const batch of answered) {
      expect(batch.status).toBe(200);
      expect(new Set(batch.body.results.map((item) => item.problem?.code))).toEqual(new Set(['host_unresolvable']));
    }
    // Asked at each submission, and again by the guard (the source) and the sender (the callback).
    const asked = (name: string) => dns.queries.filter((q) => q.name === name && q.type === 'A').length;
    expect(asked('media.honest.test')).toBeGreaterThanOrEqual(3);
    expect(asked('hook.honest.test')).toBeGreaterThanOrEqual(2);

    console.log(
      `key B's submission: ${before.ms.toFixed(0)} ms before the attack, ${during.ms.toFixed(0)} ms during it`,
    );
    // A submission that waited for a place behind key A's look-ups would take DNS_TIMEOUT_S (2 s)
    // at least. The goal, within 1 s, is what the line above reports on a quiet machine; asserted
    // is only that B never waited for A (a loaded machine stretches every request).
    expect(before.ms).toBeLessThan(2000);
    expect(during.ms).toBeLessThan(2000);
  }, 180_000);
});
