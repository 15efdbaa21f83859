/**
 * getArtifact without nginx: node's router (src/http/node-router.ts) and the Hono app dispatch to
 * the same operation, so they must answer alike and leave the same traces (log line, metrics,
 * usage). First the delivery stack in this process (as in the benchmark), then the built service.
 */
import { createHash } from 'node:crypto';
import { mkdir, open, readdir, readFile, readlink, rm, unlink } from 'node:fs/promises';
import { get } from 'node:http';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  API_KEY,
  createArtifactStore,
  startDeliveryApp,
  type ArtifactStore,
  type DeliveryApp,
} from '../../bench/delivery/stack.js';
import { createUrlSigner } from '../../src/delivery/signed-url.js';
import { METRIC_PREFIX } from '../../src/metrics.js';
import { artifactRelativePath, artifactUrlPath } from '../../src/store/layout.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { rawRequest, type RawResponse } from '../support/raw-http.js';
import { startService, type ServiceHandle } from '../support/service.js';

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

async function eventually(check: () => Promise<boolean> | boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return check();
}

describe("getArtifact through node's router and through the app", () => {
  let store: ArtifactStore;
  let wav: { cid: string; bytes: Buffer };
  let routed: DeliveryApp;
  let appOnly: DeliveryApp;
  const last = (app: DeliveryApp) => app.seen.at(-1)!;

  beforeAll(async () => {
    store = await createArtifactStore();
    wav = await store.addWav(3);
    routed = await startDeliveryApp({ root: store.root, accelRedirectPrefix: null });
    appOnly = await startDeliveryApp({ root: store.root, accelRedirectPrefix: null, nodeRouter: false });
  });

  afterAll(async () => {
    await routed?.close();
    await appOnly?.close();
    await store?.remove();
  });

  /** The same request to both: the router answers one, the app the other, alike. */
  async function both(method: 'GET' | 'HEAD', target: string, headers: Record<string, string> = {}) {
    const answers = [];
    for (const app of [routed, appOnly]) {
      const res = await rawRequest(app.port, method, target, headers);
      answers.push(res);
      expect(last(app)).toMatchObject({ byRouter: app === routed, method });
    }
    const [viaRouter, viaApp] = answers as [RawResponse, RawResponse];
    const named = (res: RawResponse) =>
      Object.fromEntries(
        [...res.headers].filter(([name]) => !['date', 'x-request-id', 'keep-alive', 'connection'].includes(name)),
      );
    expect(viaRouter.status).toBe(viaApp.status);
    expect(named(viaRouter)).toEqual(named(viaApp));
    // A problem document names its own request.
    const body = (res: RawResponse) =>
      res.headers.get('content-type') === 'application/problem+json'
        ? { ...(JSON.parse(res.body.toString('utf8')) as object), request_id: undefined }
        : res.body;
    expect(body(viaRouter)).toEqual(body(viaApp));
    return viaRouter;
  }

  it('answers signed GETs (whole, range, If-Range) and HEADs alike, byte-exact, and counts the serve', async () => {
    const target = routed.signedPath(wav.cid);
    routed.served.length = 0;
    const whole = await both('GET', target);
    expect(whole.status).toBe(200);
    expect(sha256(whole.body)).toBe(wav.cid);
    const ranged = await both('GET', target, { range: 'bytes=1000-1999', 'if-range': `"${wav.cid}"` });
    expect(ranged.status).toBe(206);
    expect(ranged.body.equals(wav.bytes.subarray(1000, 2000))).toBe(true);
    expect((await both('GET', target, { range: 'bytes=0-9', 'if-range': '"other"' })).status).toBe(200);
    const head = await both('HEAD', target);
    expect(head.status).toBe(200);
    expect(head.body.length).toBe(0);
    expect(head.headers.get('content-length')).toBe(String(wav.bytes.length));
    expect(routed.served).toEqual([wav.cid, wav.cid, wav.cid, wav.cid]);
  });

  it.each([
    [
      'the parameters in another order',
      (signed: string) => [signed.replace(/\?(expires=[^&]+)&(sig=.+)$/, '?$2&$1'), {}],
      200,
      undefined,
    ],
    ['an API key', (signed: string) => [signed.split('?')[0]!, { 'x-api-key': API_KEY }], 200, undefined],
    ['If-None-Match', (signed: string) => [signed, { 'if-none-match': '*' }], 304, undefined],
    [
      'an unsatisfiable range',
      (signed: string) => [signed, { range: 'bytes=99999999-' }],
      416,
      'range_not_satisfiable',
    ],
    [
      'a tampered signature',
      (signed: string) => [signed.replace(/sig=(.)/, (_m, c: string) => `sig=${c === 'A' ? 'B' : 'A'}`), {}],
      403,
      'signature_invalid',
    ],
    ['another parameter', (signed: string) => [`${signed}&x=1`, {}], 200, undefined],
    ['no signature', (signed: string) => [signed.split('?')[0]!, {}], 401, 'unauthorized'],
    [
      'a wrong key',
      (signed: string) => [signed.split('?')[0]!, { authorization: 'Bearer not-the-key-0123456789' }],
      401,
      'unauthorized',
    ],
    [
      'no such content',
      () => [artifactUrlPath('e'.repeat(64), 'audio.wav'), { 'x-api-key': API_KEY }],
      404,
      'artifact_not_found',
    ],
  ] as const)('answers a request with %s alike', async (_label, make, status, code) => {
    const [target, headers] = make(routed.signedPath(wav.cid)) as [string, Record<string, string>];
    const res = await both('GET', target, headers);
    expect(res.status).toBe(status);
    if (code) expect((JSON.parse(res.body.toString('utf8')) as { code: string }).code).toBe(code);
  });

  it('refuses a signature once it expires, though it verified it before', async () => {
    const target = routed.signedPath(wav.cid, 'audio.wav', 2);
    const first = await fetch(`http://127.0.0.1:${routed.port}${target}`);
    expect(first.status).toBe(200);
    await first.arrayBuffer();
    let res: Response | undefined;
    expect(
      await eventually(async () => {
        res = await fetch(`http://127.0.0.1:${routed.port}${target}`);
        if (res.status === 403) return true;
        await res.arrayBuffer();
        return false;
      }, 4000),
    ).toBe(true);
    expect(((await res!.json()) as { code: string }).code).toBe('signature_expired');
  });

  it('answers 404 for content evicted since it was served', async () => {
    const cid = await store.add(Buffer.from('evicted while its path resolution is remembered'));
    const target = routed.signedPath(cid);
    expect((await fetch(`http://127.0.0.1:${routed.port}${target}`)).status).toBe(200);
    await unlink(path.join(store.root, artifactRelativePath(cid, 'audio.wav')));
    let res: Response | undefined;
    expect(
      await eventually(async () => {
        res = await fetch(`http://127.0.0.1:${routed.port}${target}`);
        if (res.status === 404) return true;
        await res.arrayBuffer();
        return false;
      }, 5000),
    ).toBe(true);
    expect(((await res!.json()) as { code: string }).code).toBe('artifact_not_found');
  });
});

describe('signed artifacts in the service', () => {
  const BIG_CID = '2'.repeat(64);
  const GIB = 1024 ** 3;
  let media: MediaServer;
  let svc: ServiceHandle;
  let signed: string;
  let cid: string;
  let signer: ReturnType<typeof createUrlSigner>;
  let bigFile: string;

  beforeAll(async () => {
    media = await startMediaServer();
    const tone = await makeTone(path.join(process.env.TMPDIR ?? '/tmp', 'source-fetch-fixtures'), {
      seconds: 2,
      channels: 2,
      sampleRate: 44100,
      format: 'flac',
    });
    media.serveFile('/lane.flac', tone.path, { contentType: 'audio/flac' });
    svc = await startService({ env: { FETCH_ALLOW_HOSTS: media.hostPort } });
    const job = await svc.waitForJob((await svc.submit(media.url('/lane.flac'))).job_id, ['done', 'failed']);
    expect(job.status).toBe('done');
    cid = job.result!.content_id;
    signed = job.result!.artifacts[0]!.signed_url;
    signer = createUrlSigner((await readFile(path.join(svc.dataDir, 'url-signing-secret'), 'utf8')).trim());
    // Sparse, 1 GiB long: the path resolution checks a content id's form, not its hash.
    bigFile = path.join(svc.dataDir, 'artifacts', artifactRelativePath(BIG_CID, 'audio.wav'));
    await mkdir(path.dirname(bigFile), { recursive: true });
    const handle = await open(bigFile, 'w');
    await handle.truncate(GIB);
    await handle.close();
  });

  afterAll(async () => {
    await svc?.stop();
    await media?.close();
  });

  const requestLines = () =>
    svc.logs.filter((line) => line.msg === 'request' && line.route === '/artifacts/{cid}/{name}');

  it("leaves the app's traces: one access-log line with the same fields, the request metrics and the request id", async () => {
    const params = new URLSearchParams(signed.split('?')[1]);
    const before = requestLines().length;
    const viaRouter = await rawRequest(svc.port, 'GET', signed, {
      range: 'bytes=0-99',
      'x-request-id': 'router-request-1',
    });
    // `Expect: 100-continue` is answered by the app (node's 'checkContinue' bypasses the router).
    const viaApp = await rawRequest(svc.port, 'GET', signed, {
      range: 'bytes=0-99',
      'x-request-id': 'app-request-1',
      expect: '100-continue',
    });
    expect([viaRouter.status, viaApp.status]).toEqual([206, 206]);
    expect(viaRouter.headers.get('x-request-id')).toBe('router-request-1');
    const replaced = await rawRequest(svc.port, 'GET', signed, { range: 'bytes=0-99', 'x-request-id': 'not kept' });
    expect(replaced.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    expect(await eventually(() => requestLines().length === before + 3, 3000)).toBe(true);
    const [routerLine, appLine] = requestLines().slice(before);
    expect(routerLine).toMatchObject({ request_id: 'router-request-1', method: 'GET', status: 206 });
    expect(appLine).toMatchObject({ request_id: 'app-request-1', method: 'GET', status: 206 });
    const shape = (line: Record<string, unknown>) =>
      Object.keys(line)
        .filter((key) => key !== 'time')
        .sort();
    expect(shape(routerLine!)).toEqual(shape(appLine!));
    const named = (res: { headers: Map<string, string> }) =>
      Object.fromEntries([...res.headers].filter(([name]) => !['date', 'x-request-id'].includes(name)));
    expect(named(viaRouter)).toEqual(named(viaApp));
    expect(viaRouter.headers.get('x-route-template')).toBe('/artifacts/{cid}/{name}');
    expect(viaRouter.headers.get('x-content-id')).toBe(cid);
    const metrics = await (await svc.request('/metrics')).text();
    const served = metrics
      .split('\n')
      .find(
        (line) =>
          line.startsWith(`${METRIC_PREFIX}http_requests_total{`) &&
          line.includes('route="/artifacts/{cid}/{name}"') &&
          line.includes('status="206"'),
      );
    expect(Number(served?.split(' ')[1])).toBe(3);
    // No signature in the log.
    expect(svc.output()).not.toContain(params.get('sig')!);
  });

  it('records the use for eviction', async () => {
    const lastUse = (contentId: string) => {
      const db = new Database(path.join(svc.dataDir, 'source-fetch.sqlite'), { readonly: true, fileMustExist: true });
      try {
        return (
          db.prepare('select last_used_at from cache_entries where content_id = ?').get(contentId) as {
            last_used_at: number;
          }
        ).last_used_at;
      } finally {
        db.close();
      }
    };
    // Content stored after it makes it the colder (the control: the one eviction would take).
    media.serveFile(
      '/lane-later.flac',
      (
        await makeTone(path.join(process.env.TMPDIR ?? '/tmp', 'source-fetch-fixtures'), {
          seconds: 1,
          channels: 2,
          sampleRate: 44100,
          format: 'flac',
        })
      ).path,
      { contentType: 'audio/flac' },
    );
    const later = await svc.waitForJob((await svc.submit(media.url('/lane-later.flac'))).job_id, ['done', 'failed']);
    expect(later.status).toBe('done');
    const laterCid = later.result!.content_id;
    expect(lastUse(cid)).toBeLessThan(lastUse(laterCid));

    const res = await fetch(`${svc.baseUrl}${signed}`);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect(await eventually(() => lastUse(cid) > lastUse(laterCid), 3000)).toBe(true);
  });

  /** How many of the service's descriptors are open on `file`. */
  async function openDescriptorsOn(file: string): Promise<number> {
    const pid = svc.process.pid!;
    let count = 0;
    for (const fd of await readdir(`/proc/${pid}/fd`)) {
      if ((await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')) === file) count++;
    }
    return count;
  }

  const rss = async () =>
    Number(/VmRSS:\s+(\d+) kB/.exec(await readFile(`/proc/${svc.process.pid}/status`, 'utf8'))![1]) * 1024;

  it('streams 1 GiB in flat memory, and a client that goes away mid-file releases the file', async () => {
    const target = `${artifactUrlPath(BIG_CID, 'audio.wav')}?${signer.sign(BIG_CID, 'audio.wav', 600).query}`;
    const before = await rss();
    let peak = before;
    const sampler = setInterval(() => void rss().then((now) => (peak = Math.max(peak, now))), 20);
    const received = await new Promise<number>((resolve, reject) => {
      let total = 0;
      get(`${svc.baseUrl}${target}`, (res) => {
        expect(res.statusCode).toBe(200);
        res.on('data', (chunk: Buffer) => (total += chunk.length));
        res.on('end', () => resolve(total));
      }).on('error', reject);
    });
    clearInterval(sampler);
    expect(received).toBe(GIB);
    expect(peak - before).toBeLessThan(128 * 1024 * 1024);
    const lastLine = requestLines().at(-1);
    expect(lastLine).toMatchObject({ status: 200 });

    // Gone after 16 MiB: the router stops reading and lets go of the file.
    await new Promise<void>((resolve, reject) => {
      let total = 0;
      get(`${svc.baseUrl}${target}`, (res) => {
        res.on('data', (chunk: Buffer) => {
          total += chunk.length;
          if (total < 16 * 1024 * 1024) return;
          res.destroy();
          resolve();
        });
      }).on('error', reject);
    });
    expect(await eventually(async () => (await openDescriptorsOn(bigFile)) === 0, 2000)).toBe(true);
    await rm(bigFile);
  });
});
