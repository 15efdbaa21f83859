/**
 * Delivery benchmark, run by hand (not part of the test suite):
 *
 *   npm run build && npx tsx bench/delivery/run.ts [seconds per case, default 5]
 *
 * One 10 MB WAV, servers on loopback, wrk as the load (Debian package wrk):
 *   nginx static    nginx serving the artifact root directly: the ceiling
 *   nginx+accel     nginx in front of the delivery handler in a bare Hono app, bytes by
 *                   X-Accel-Redirect (nginx/templates), API key header
 *   app fallback    that bare app streaming the file itself (src/delivery/file-body.ts)
 *   svc+accel       nginx in front of the whole service (dist/main.js: request id, access log,
 *                   metrics, rate limit), which fetched the WAV itself; the job's signed URL
 *   svc fallback    the whole service streaming it, signed URL
 *   node plain      http.createServer + fs.createReadStream().pipe(res): the floor
 * each for the whole file and for random 64 KiB ranges. Prints requests/s, MB/s, p99 latency
 * and each as a ratio to nginx static. Every nginx writes the same JSON access log line per
 * request; the services write theirs to a file.
 */
import { execFile } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { artifactRelativePath, artifactUrlPath, AUDIO_ARTIFACT_NAME } from '../../src/store/layout.js';
import { freePort, startNginx } from '../../test/support/nginx.js';
import { startMediaServer } from '../../test/support/media-server.js';
import { startBenchService } from './service.js';
import { API_KEY, createArtifactStore, startDeliveryApp } from './stack.js';

const run = promisify(execFile);
const SECONDS = Number(process.argv[2] ?? 5);
const CONNECTIONS = 16;
const RANGE_BYTES = 64 * 1024;
const WAV_SECONDS = 57; // 44.1 kHz 16-bit stereo: 57 s ≈ 10 MB

interface Result {
  requestsPerSecond: number;
  megabytesPerSecond: number;
  p99Ms: number;
  errors: number;
}

async function main(): Promise<void> {
  const store = await createArtifactStore();
  const { cid, bytes } = await store.addWav(WAV_SECONDS);
  const file = path.join(store.root, artifactRelativePath(cid, AUDIO_ARTIFACT_NAME));
  const accelApp = await startDeliveryApp({ root: store.root, accelRedirectPrefix: '/_artifacts/', record: false });
  const fallbackApp = await startDeliveryApp({ root: store.root, accelRedirectPrefix: null, record: false });
  const plain = await startPlainNode(file, bytes.length);
  const media = await startMediaServer();
  media.serveFile('/bench.wav', file, { contentType: 'audio/wav' });
  const services = await Promise.all(
    ['/_artifacts/', null].map((accelRedirectPrefix) =>
      startBenchService({ sourceUrl: media.url('/bench.wav'), allowHost: media.hostPort, accelRedirectPrefix }),
    ),
  );
  const [accelService, fallbackService] = services as [(typeof services)[0], (typeof services)[0]];
  const serviceNginx = await startNginx({ appPort: accelService.port, artifactRoot: accelService.artifactRoot });
  const staticPort = await freePort();
  const scripts = await mkdtemp(path.join(tmpdir(), 'sf-bench-'));
  // The ceiling writes the same JSON access log line per request as the X-Accel server does.
  const nginx = await startNginx({
    appPort: accelApp.port,
    artifactRoot: store.root,
    extraHttpConfig: `
    server {
        listen 127.0.0.1:${staticPort};
        access_log ${path.join(scripts, 'static-access.json')} source_fetch_json;
        location /static/ { alias ${store.root}/; sendfile on; tcp_nopush on; }
    }`,
  });
  const rangeScript = path.join(scripts, 'range.lua');
  await writeFile(rangeScript, rangeLua(bytes.length));

  const artifact = artifactUrlPath(cid, AUDIO_ARTIFACT_NAME);
  // Signed URLs carry their own credentials: no API key header, so the services' per-key rate
  // limit does not count these requests (as for a browser).
  const targets: Array<[string, string, { apiKey: boolean }]> = [
    ['nginx static', `http://127.0.0.1:${staticPort}/static/${artifactRelativePath(cid, AUDIO_ARTIFACT_NAME)}`, { apiKey: true }],
    ['nginx+accel', nginx.url(artifact), { apiKey: true }],
    ['app fallback', `http://127.0.0.1:${fallbackApp.port}${artifact}`, { apiKey: true }],
    ['svc+accel', serviceNginx.url(accelService.signedPath), { apiKey: false }],
    ['svc fallback', `http://127.0.0.1:${fallbackService.port}${fallbackService.signedPath}`, { apiKey: false }],
    ['node plain', `http://127.0.0.1:${(plain.address() as AddressInfo).port}/`, { apiKey: true }],
  ];

  console.log(`delivery benchmark: ${(bytes.length / 1e6).toFixed(1)} MB WAV, wrk -t1 -c${CONNECTIONS} -d${SECONDS}s per case, loopback`);
  try {
    for (const [label, script] of [
      ['whole file', undefined],
      ['64 KiB ranges', rangeScript],
    ] as const) {
      const results = new Map<string, Result>();
      for (const [name, url, { apiKey }] of targets) results.set(name, await wrk(url, script, apiKey));
      const ceiling = results.get('nginx static')!;
      console.log(`\n${label}`);
      console.log(`${'case'.padEnd(14)}${'req/s'.padStart(10)}${'MB/s'.padStart(10)}${'p99 ms'.padStart(10)}${'req/s ×'.padStart(10)}${'MB/s ×'.padStart(9)}${'p99 ×'.padStart(9)}${'errors'.padStart(8)}`);
      for (const [name, r] of results) {
        console.log(
          name.padEnd(14) +
            r.requestsPerSecond.toFixed(0).padStart(10) +
            r.megabytesPerSecond.toFixed(0).padStart(10) +
            r.p99Ms.toFixed(2).padStart(10) +
            (r.requestsPerSecond / ceiling.requestsPerSecond).toFixed(2).padStart(10) +
            (r.megabytesPerSecond / ceiling.megabytesPerSecond).toFixed(2).padStart(9) +
            (r.p99Ms / ceiling.p99Ms).toFixed(2).padStart(9) +
            String(r.errors).padStart(8),
        );
      }
    }
  } finally {
    await nginx.stop();
    await serviceNginx.stop();
    await Promise.all(services.map((service) => service.stop()));
    await media.close();
    await accelApp.close();
    await fallbackApp.close();
    await new Promise((resolve) => plain.close(resolve));
    await rm(scripts, { recursive: true, force: true });
    await store.remove();
  }
}

/** The floor: what a few lines of plain Node do, with the same single-range support. */
function startPlainNode(file: string, size: number): Promise<Server> {
  const server = createServer((req, res) => {
    const match = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    const start = match ? Number(match[1]) : 0;
    const end = match ? Math.min(Number(match[2]), size - 1) : size - 1;
    res.writeHead(match ? 206 : 200, {
      'content-type': 'audio/wav',
      'content-length': end - start + 1,
      ...(match ? { 'content-range': `bytes ${start}-${end}/${size}` } : {}),
    });
    createReadStream(file, { start, end }).pipe(res);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/** Random 64 KiB-aligned ranges; the other headers (the API key, if any) ride along. */
function rangeLua(size: number): string {
  return `
local size = ${size}
local span = ${RANGE_BYTES}
math.randomseed(os.time())
request = function()
  local start = math.random(0, math.floor((size - span) / span)) * span
  local headers = {}
  for k, v in pairs(wrk.headers) do headers[k] = v end
  headers["Range"] = "bytes=" .. start .. "-" .. (start + span - 1)
  return wrk.format(nil, nil, headers)
end
`;
}

async function wrk(url: string, script: string | undefined, apiKey: boolean): Promise<Result> {
  const args = ['-t1', `-c${CONNECTIONS}`, `-d${SECONDS}s`, '--latency', ...(apiKey ? ['-H', `X-API-Key: ${API_KEY}`] : []), ...(script ? ['-s', script] : []), url];
  const { stdout } = await run('wrk', args, { maxBuffer: 1 << 20 });
  const number = (pattern: RegExp) => Number(pattern.exec(stdout)?.[1] ?? NaN);
  const transfer = /Transfer\/sec:\s+([\d.]+)([KMG]?B)/.exec(stdout);
  const p99 = /^\s+99%\s+([\d.]+)(us|ms|s)\s*$/m.exec(stdout);
  const unit: Record<string, number> = { B: 1e-6, KB: 1024 / 1e6, MB: 1024 ** 2 / 1e6, GB: 1024 ** 3 / 1e6 };
  const ms: Record<string, number> = { us: 1e-3, ms: 1, s: 1000 };
  return {
    requestsPerSecond: number(/Requests\/sec:\s+([\d.]+)/),
    megabytesPerSecond: transfer ? Number(transfer[1]) * unit[transfer[2]!]! : NaN,
    p99Ms: p99 ? Number(p99[1]) * ms[p99[2]!]! : NaN,
    errors: number(/Non-2xx or 3xx responses:\s+(\d+)/) || 0,
  };
}

await main();
