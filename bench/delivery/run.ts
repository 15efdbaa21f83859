/**
 * Delivery benchmark, run by hand (not part of the test suite):
 *
 *   npm run build && npx tsx bench/delivery/run.ts [seconds per case, default 5] [rounds, default 3]
 *
 * One 10 MB WAV, servers on loopback, wrk as the load (Debian package wrk), each case for the
 * whole file, for random 64 KiB ranges (a wrk Lua script writes each request) and for one fixed
 * 64 KiB range (a plain `Range` header: no Lua on the client, whose CPU the server shares on a
 * small machine), the cases interleaved round after round; the table is the median of the rounds
 * (the machine is shared: single runs vary by ±20%). Cases:
 *   nginx static    nginx serving the artifact root directly, plain `location` + `alias`: the
 *                   ceiling everything is measured against
 *   static+ofc      the same with the open_file_cache the signed location uses: what that cache
 *                   alone is worth, so that the signed case is not flattered by it
 *   nginx signed    nginx/templates in front of the delivery handler in a bare Hono app, asked
 *                   with a signed URL: nginx checks it (Lua) and answers alone
 *   nginx keyed     the same with the API key: nginx answers alone while it remembers the app's
 *                   yes to the key (nginx/lua/source_fetch_keyed.lua), else the app answers with
 *                   X-Accel-Redirect
 *   app fallback    that bare app streaming the file itself, signed URL
 *   app keyed       the same with the API key
 *   svc signed      nginx in front of the whole service (dist/main.js: request id, access log,
 *                   metrics, rate limit, usage log), which fetched the WAV itself; the job's
 *                   signed URL, as a browser asks
 *   svc fallback    the whole service streaming it, the job's signed URL
 *   node plain      http.createServer + fs.createReadStream().pipe(res): the floor of the fallback
 * Prints requests/s, MB/s, p99 latency, each as a ratio to nginx static, and the fallbacks' rates
 * as a ratio to node plain; and the servers' CPU time per request (this process, where the apps
 * and node plain run, with every nginx and service process: all that serves, not wrk), with node
 * plain's against each case's (above 1: less CPU a request than the floor). On 2 cores wrk takes
 * CPU the servers would use, most with its Lua script, so a rate ratio can be the client's limit
 * where the CPU per request still tells the servers apart. BENCH_CASES (a pattern on the case
 * names; nginx static and node plain always run, as the ratios need them) and BENCH_SIZES (on
 * "whole file", "64 KiB ranges", "64 KiB fixed range") pick what runs; the services (svc cases)
 * start only when picked. Every nginx writes the same JSON access log line per request; the
 * services write theirs to a file; the services run with their default rate limit, which does not
 * count signed URLs (they carry no API key).
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
import { freePort, SHARED_URL_SIGNING_SECRET, startNginx } from '../../test/support/nginx.js';
import { startMediaServer } from '../../test/support/media-server.js';
import { treeCpuSeconds } from '../process-cpu.js';
import { startBenchService } from '../service.js';
import { API_KEY, createArtifactStore, SIGNING_SECRET, startDeliveryApp } from './stack.js';

const run = promisify(execFile);
const SECONDS = Number(process.argv[2] ?? 5);
const ROUNDS = Number(process.argv[3] ?? 3);
const THREADS = 2;
const CONNECTIONS = 32;
const RANGE_BYTES = 64 * 1024;
const CASES = process.env.BENCH_CASES ? new RegExp(process.env.BENCH_CASES) : undefined;
const SIZES = process.env.BENCH_SIZES ? new RegExp(process.env.BENCH_SIZES) : undefined;
// Not on a page boundary, like most of the random ranges.
const FIXED_RANGE = `bytes=1000-${1000 + RANGE_BYTES - 1}`;
const WAV_SECONDS = 57; // 44.1 kHz 16-bit stereo: 57 s ≈ 10 MB

interface Result {
  requestsPerSecond: number;
  megabytesPerSecond: number;
  p99Ms: number;
  errors: number;
  /** The servers' CPU microseconds per request answered. */
  cpuUsPerRequest: number;
}

/** CPU seconds so far of what serves: this process (the apps, node plain), and the nginx and service processes. */
interface ServerCpu {
  own(): number;
  others(): Promise<number>;
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
  const scripts = await mkdtemp(path.join(tmpdir(), 'sf-bench-'));
  // The service behind nginx reads nginx's usage log, as in compose.
  const usageLog = path.join(scripts, 'usage.log');
  const withServices = !CASES || CASES.test('svc signed') || CASES.test('svc fallback');
  const services = await Promise.all(
    (withServices ? (['/_artifacts/', null] as const) : []).map((accelRedirectPrefix) =>
      startBenchService({
        sourceUrl: media.url('/bench.wav'),
        allowHost: media.hostPort,
        accelRedirectPrefix,
        env: {
          URL_SIGNING_SECRET: SHARED_URL_SIGNING_SECRET,
          ...(accelRedirectPrefix ? { NGINX_USAGE_LOG: usageLog } : {}),
        },
      }),
    ),
  );
  const [accelService, fallbackService] = services;
  const serviceNginx =
    accelService &&
    (await startNginx({
      appPort: accelService.port,
      artifactRoot: accelService.artifactRoot,
      usageLogPath: usageLog,
      urlSigningSecret: SHARED_URL_SIGNING_SECRET,
    }));
  const staticPort = await freePort();
  // The ceilings write the same JSON access log line per request as the artifact locations do.
  const nginx = await startNginx({
    appPort: accelApp.port,
    artifactRoot: store.root,
    urlSigningSecret: SIGNING_SECRET,
    extraHttpConfig: `
    server {
        listen 127.0.0.1:${staticPort};
        access_log ${path.join(scripts, 'static-access.json')} source_fetch_json;
        location /static/ { alias ${store.root}/; sendfile on; }
        location /static-ofc/ { alias ${store.root}/; sendfile on; open_file_cache max=1024 inactive=20s; open_file_cache_valid 2s; }
    }`,
  });
  const serverPids = [
    nginx.pid,
    ...(serviceNginx ? [serviceNginx.pid] : []),
    ...services.map((service) => service.pid),
  ];
  const serverCpu: ServerCpu = {
    own: () => {
      const own = process.cpuUsage();
      return (own.user + own.system) / 1e6;
    },
    others: async () => {
      let total = 0;
      for (const pid of serverPids) total += await treeCpuSeconds(pid);
      return total;
    },
  };
  const rangeScript = path.join(scripts, 'range.lua');
  await writeFile(rangeScript, rangeLua(bytes.length));

  const relative = artifactRelativePath(cid, AUDIO_ARTIFACT_NAME);
  const artifact = artifactUrlPath(cid, AUDIO_ARTIFACT_NAME);
  // Signed URLs carry their own credentials: no API key header (as for a browser). Valid for the
  // whole run.
  const signed = accelApp.signedPath(cid, AUDIO_ARTIFACT_NAME, 6 * 3600);
  const allTargets: Array<[string, string, { apiKey: boolean }]> = [
    ['nginx static', `http://127.0.0.1:${staticPort}/static/${relative}`, { apiKey: false }],
    ['static+ofc', `http://127.0.0.1:${staticPort}/static-ofc/${relative}`, { apiKey: false }],
    ['nginx signed', nginx.url(signed), { apiKey: false }],
    ['nginx keyed', nginx.url(artifact), { apiKey: true }],
    ['app fallback', `http://127.0.0.1:${fallbackApp.port}${signed}`, { apiKey: false }],
    ['app keyed', `http://127.0.0.1:${fallbackApp.port}${artifact}`, { apiKey: true }],
    ...(serviceNginx && accelService && fallbackService
      ? ([
          ['svc signed', serviceNginx.url(accelService.signedPath), { apiKey: false }],
          ['svc fallback', `http://127.0.0.1:${fallbackService.port}${fallbackService.signedPath}`, { apiKey: false }],
        ] as Array<[string, string, { apiKey: boolean }]>)
      : []),
    ['node plain', `http://127.0.0.1:${(plain.address() as AddressInfo).port}/`, { apiKey: false }],
  ];
  const targets = allTargets.filter(
    ([name]) => !CASES || CASES.test(name) || name === 'nginx static' || name === 'node plain',
  );

  console.log(
    `delivery benchmark: ${(bytes.length / 1e6).toFixed(1)} MB WAV, wrk -t${THREADS} -c${CONNECTIONS} -d${SECONDS}s per case, ` +
      `${ROUNDS} rounds interleaved, medians; loopback`,
  );
  try {
    for (const [label, request] of [
      ['whole file', {}],
      ['64 KiB ranges', { script: rangeScript }],
      ['64 KiB fixed range', { range: FIXED_RANGE }],
    ] as const) {
      if (SIZES && !SIZES.test(label)) continue;
      const rounds = new Map<string, Result[]>(targets.map(([name]) => [name, []]));
      for (let round = 0; round < ROUNDS; round++) {
        for (const [name, url, { apiKey }] of targets) {
          rounds.get(name)!.push(await wrk(url, request, apiKey, serverCpu));
        }
      }
      const results = new Map([...rounds].map(([name, list]) => [name, medianOf(list)]));
      const ceiling = results.get('nginx static')!;
      const floor = results.get('node plain')!;
      console.log(`\n${label}`);
      console.log(
        `${'case'.padEnd(14)}${'req/s'.padStart(9)}${'MB/s'.padStart(8)}${'p99 ms'.padStart(9)}` +
          `${'× static'.padStart(10)}${'× plain'.padStart(9)}${'CPU µs/req'.padStart(12)}${'plain ÷'.padStart(9)}` +
          `${'errors'.padStart(8)}   req/s of each round`,
      );
      for (const [name, r] of results) {
        console.log(
          name.padEnd(14) +
            r.requestsPerSecond.toFixed(0).padStart(9) +
            r.megabytesPerSecond.toFixed(0).padStart(8) +
            r.p99Ms.toFixed(2).padStart(9) +
            (r.requestsPerSecond / ceiling.requestsPerSecond).toFixed(2).padStart(10) +
            (r.requestsPerSecond / floor.requestsPerSecond).toFixed(2).padStart(9) +
            r.cpuUsPerRequest.toFixed(0).padStart(12) +
            (floor.cpuUsPerRequest / r.cpuUsPerRequest).toFixed(2).padStart(9) +
            String(r.errors).padStart(8) +
            `   ${rounds
              .get(name)!
              .map((each) => each.requestsPerSecond.toFixed(0))
              .join(' ')}`,
        );
      }
    }
  } finally {
    await nginx.stop();
    await serviceNginx?.stop();
    await Promise.all(services.map((service) => service.stop()));
    await media.close();
    await accelApp.close();
    await fallbackApp.close();
    await new Promise((resolve) => plain.close(resolve));
    await rm(scripts, { recursive: true, force: true });
    await store.remove();
  }
}

/** Each figure's median over the rounds; errors summed. */
function medianOf(list: Result[]): Result {
  const median = (values: number[]) => {
    const sorted = [...values].sort((a, b) => a - b);
    const middle = Math.floor(sorted.length / 2);
    return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
  };
  return {
    requestsPerSecond: median(list.map((r) => r.requestsPerSecond)),
    megabytesPerSecond: median(list.map((r) => r.megabytesPerSecond)),
    p99Ms: median(list.map((r) => r.p99Ms)),
    errors: list.reduce((sum, r) => sum + r.errors, 0),
    cpuUsPerRequest: median(list.map((r) => r.cpuUsPerRequest)),
  };
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

/**
 * Random 64 KiB ranges starting at any byte, as clients reading in chunks ask (aligned ranges
 * hid nginx's 40 ms stall on the others when corking: see the template); the other headers
 * (the API key, if any) ride along.
 */
function rangeLua(size: number): string {
  return `
local size = ${size}
local span = ${RANGE_BYTES}
math.randomseed(os.time())
request = function()
  local start = math.random(0, size - span)
  local headers = {}
  for k, v in pairs(wrk.headers) do headers[k] = v end
  headers["Range"] = "bytes=" .. start .. "-" .. (start + span - 1)
  return wrk.format(nil, nil, headers)
end
`;
}

async function wrk(
  url: string,
  request: { script?: string; range?: string },
  apiKey: boolean,
  serverCpu: ServerCpu,
): Promise<Result> {
  const args = [
    `-t${THREADS}`,
    `-c${CONNECTIONS}`,
    `-d${SECONDS}s`,
    '--latency',
    ...(apiKey ? ['-H', `X-API-Key: ${API_KEY}`] : []),
    ...(request.range ? ['-H', `Range: ${request.range}`] : []),
    ...(request.script ? ['-s', request.script] : []),
    url,
  ];
  // This process's CPU read just around wrk's run, so that its reads of /proc stay outside.
  const othersBefore = await serverCpu.others();
  const ownBefore = serverCpu.own();
  const { stdout } = await run('wrk', args, { maxBuffer: 1 << 20 });
  const cpuSeconds = serverCpu.own() - ownBefore + (await serverCpu.others()) - othersBefore;
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
    cpuUsPerRequest: (cpuSeconds * 1e6) / number(/(\d+) requests in /),
  };
}

await main();
