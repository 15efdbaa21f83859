import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEgressGuard } from '../../src/egress/guard.js';
import { createSandbox, readHostNetns, REFUSED_CONNECT, type Sandbox } from '../../src/sandbox/sandbox.js';
import { runProcess, type RunProcessResult } from '../../src/tools/process.js';
import { startCountingListener, type CountingListener } from '../support/counting-listener.js';
import { makeTone } from '../support/media.js';
import { startMediaServer, type MediaServer } from '../support/media-server.js';
import { startPlainProxy, type PlainProxy } from '../support/plain-proxy.js';
import { processesMatching } from '../support/processes.js';

/**
 * The sandbox alone, with the real tools and no other safeguard: each input below is run twice,
 * once as a plain process (the control: it really does reach the trap) and once confined (it
 * does not). yt-dlp's proxy here is a plain forward proxy with no policy beyond the one allowed
 * media server, and yt-dlp gets an ffmpeg to hand downloads to: none of the belts the service
 * adds on top (the guard's redirect checks, the fragment refusal, no ffmpeg for yt-dlp, the
 * protocol whitelists of our ffmpeg runs) is in play. Whatever reaches the trap can only have
 * gone around the proxy, and confinement must stop it at connect().
 */
const FIXTURE_DIR = path.join(tmpdir(), 'source-fetch-fixtures');
const NOPROXY = { http_headers: { 'Ytdl-request-proxy': '__noproxy__' } };
const smuggle = (url: string) => `${url}#__youtubedl_smuggle=${encodeURIComponent(JSON.stringify(NOPROXY))}`;

let media: MediaServer;
let trap: CountingListener;
let tcpProxy: PlainProxy;
let unixProxy: PlainProxy;
let dir: string;
let sandbox: Sandbox;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-sandbox-'));
  media = await startMediaServer();
  trap = await startCountingListener('127.0.0.1');
  tcpProxy = await startPlainProxy({ allowed: media.hostPort });
  const socketPath = path.join(dir, 'proxy.sock');
  unixProxy = await startPlainProxy({ allowed: media.hostPort, socketPath });
  sandbox = createSandbox({
    mode: 'netns',
    unshare: 'unshare',
    python: '/usr/bin/python3',
    guardSocket: socketPath,
    guardAuthority: null,
    hostNetns: readHostNetns(),
    run: runProcess,
  });

  const tone = await makeTone(FIXTURE_DIR, { seconds: 2, channels: 1, sampleRate: 44100, format: 'mp3' });
  const segment = await readFile(tone.path);
  media.route('/seg0.mp3', (_req, res) => {
    res.writeHead(200, { 'content-type': 'audio/mpeg', 'content-length': segment.length });
    res.end(segment);
  });
  const playlist = (lines: string[]) => (_req: unknown, res: import('node:http').ServerResponse) => {
    res.writeHead(200, { 'content-type': 'application/vnd.apple.mpegurl' });
    res.end(['#EXTM3U', '#EXT-X-VERSION:3', '#EXT-X-TARGETDURATION:2', '#EXT-X-MEDIA-SEQUENCE:0', ...lines, '#EXT-X-ENDLIST', ''].join('\n'));
  };
  media.route('/local.m3u8', playlist(['#EXTINF:2.0,', media.url('/seg0.mp3')]));
  media.route('/trap-segments.m3u8', playlist(['#EXTINF:2.0,', `http://${trap.authority}/seg0.ts`]));
  media.route('/ftp-segments.m3u8', playlist(['#EXTINF:2.0,', `ftp://${trap.authority}/seg0.ts`]));
  media.route(
    '/sample-aes.m3u8',
        // yt-dlp gives ffmpeg its proxy as http_proxy, which httpproxy: ignores.
    playlist([`#EXT-X-KEY:METHOD=SAMPLE-AES,URI="${media.url('/key.bin')}",KEYFORMAT="identity"`, '#EXTINF:2.0,', `httpproxy://${trap.authority}/127.0.0.1:80/seg.ts`]),
  );
  media.redirect('/to-ftp', `ftp://${trap.authority}/a.mp3`);
});

afterAll(async () => {
  await media?.close();
  await trap?.close();
  await tcpProxy?.close();
  await unixProxy?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Connections the trap has seen once everything made so far has arrived. */
async function trapCount(): Promise<number> {
  await trap.settle();
  return trap.connections;
}

/** Runs a command unconfined (the control) or confined, and returns what the trap saw meanwhile. */
async function run(
  confined: boolean,
  command: string,
  args: (proxy: string) => string[],
): Promise<{ reached: number; result: RunProcessResult & { confinementFailure?: string | null } }> {
  const before = await trapCount();
  const cwd = await mkdtemp(path.join(dir, 'run-'));
  const common = { command, cwd, timeoutMs: 60_000, stdoutCaptureBytes: 1 << 20 };
  const result = confined
    ? await sandbox.run({ ...common, args: args(`http://${sandbox.guardAuthority}`), network: 'guard' })
    : await runProcess({ ...common, args: args(tcpProxy.url!) });
  return { reached: (await trapCount()) - before, result };
}

const ytdlp = (url: string, extra: string[] = []) => (proxy: string) => [
  '--ignore-config',
  '--no-cache-dir',
  '--no-playlist',
  '--proxy',
  proxy,
  '--hls-prefer-native',
  '-o',
  'source.%(ext)s',
  ...extra,
  '--',
  url,
];

describe('the sandbox, against the real tools', () => {
  it('checks itself: its own network namespace, only loopback, and the egress guard answering through the bridge', async () => {
    const socketPath = path.join(dir, 'guard.sock');
    const guard = await startEgressGuard({ resolve: async () => [], dial: async () => { throw new Error('no dialing here'); }, allowHosts: [], socketPath });
    try {
      const withGuard = createSandbox({ mode: 'netns', unshare: 'unshare', python: '/usr/bin/python3', guardSocket: socketPath, guardAuthority: null, hostNetns: readHostNetns(), run: runProcess });
      expect(await withGuard.check()).toEqual({ mode: 'netns', ok: true });
    } finally {
      await guard.close();
    }
    // The plain proxy is no egress guard: it does not ask for credentials, and the check says so.
    expect(await sandbox.check()).toEqual({ mode: 'netns', ok: false, reason: 'the egress guard is not reachable from the sandbox (HTTP/1.1 403 Forbidden)' });
  });

  it('control: yt-dlp fetches a local HLS playlist through the bridge', async () => {
    const { reached, result } = await run(true, 'yt-dlp', ytdlp(media.url('/local.m3u8')));
    expect(result.stderrTail).not.toMatch(/ERROR/);
    expect(result.exitCode).toBe(0);
    expect(reached).toBe(0);
    expect(unixProxy.requests.some((line) => line.includes('/seg0.mp3'))).toBe(true);
  });

  const cases: Array<[string, string, (proxy: string) => string[]]> = [
    ['a plain TCP connect() from any program', 'python3', () => ['-c', `import socket; socket.create_connection(('127.0.0.1', ${trap.port}), timeout=5)`]],
    ["yt-dlp's smuggled fragment that turns the proxy off", 'yt-dlp', (p) => ytdlp(smuggle(media.url('/trap-segments.m3u8')))(p)],
    ['yt-dlp following a redirect to ftp://', 'yt-dlp', (p) => ytdlp(media.url('/to-ftp'))(p)],
    ['yt-dlp fetching HLS segments over ftp://', 'yt-dlp', (p) => ytdlp(media.url('/ftp-segments.m3u8'))(p)],
    ['yt-dlp handing a SAMPLE-AES playlist to ffmpeg', 'yt-dlp', (p) => ytdlp(media.url('/sample-aes.m3u8'))(p)],
    ['ffmpeg opening tcp:', 'ffmpeg', () => ['-nostdin', '-i', `tcp://${trap.authority}`, '-f', 'null', '-']],
    ['ffmpeg opening rtmp:', 'ffmpeg', () => ['-nostdin', '-i', `rtmp://${trap.authority}/live/x`, '-f', 'null', '-']],
    ['ffmpeg opening httpproxy:', 'ffmpeg', () => ['-nostdin', '-i', `httpproxy://${trap.authority}/127.0.0.1:80/x`, '-f', 'null', '-']],
  ];

  for (const [name, command, args] of cases) {
    it(`${name}: reaches the trap as a plain process, and not from the sandbox`, async () => {
      const control = await run(false, command, args);
      expect(control.reached, control.result.stderrTail).toBeGreaterThan(0);
      const confined = await run(true, command, args);
      expect(confined.reached, confined.result.stderrTail).toBe(0);
      expect(confined.result.confinementFailure).toBeNull();
      // What the service sees in the tool's output, to fail the job with direct_connection_refused.
      expect(confined.result.stderrTail).toMatch(REFUSED_CONNECT);
    });
  }

  it('a UDP datagram (a DNS query, say) leaves a plain process, and not the sandbox', async () => {
    const udp = createSocket('udp4');
    const received: string[] = [];
    udp.on('message', (message) => received.push(message.toString()));
    udp.bind(0, '127.0.0.1');
    await once(udp, 'listening');
    const send = (text: string) =>
      ['-c', `import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'${text}', ('127.0.0.1', ${udp.address().port}))`];
    expect((await runProcess({ command: 'python3', args: send('control'), timeoutMs: 10_000 })).exitCode).toBe(0);
    // Sent without error, onto the sandbox's own loopback, where nobody receives it.
    expect((await sandbox.run({ command: 'python3', args: send('confined'), network: 'guard', timeoutMs: 10_000 })).exitCode).toBe(0);
    // Our own datagram last: once it is in, anything sent before it on this loopback is too.
    udp.send('marker', udp.address().port, '127.0.0.1');
    await waitFor(() => received.includes('marker'));
    udp.close();
    expect(received.sort()).toEqual(['control', 'marker']);
  });

  it('ends the whole sandbox, helpers included, when the tool is killed', async () => {
    const marker = `sandbox-orphan-${process.pid}-${Date.now()}`;
    const controller = new AbortController();
    // The tool starts a helper in a session of its own (setsid), out of our process group.
    const running = sandbox.run({
      command: 'sh',
      args: ['-c', `setsid sh -c 'sleep 300; : ${marker}' & echo started; exec sleep 300`],
      network: 'none',
      signal: controller.signal,
      onStdoutLine: () => controller.abort(),
      killGraceMs: 200,
    });
    const result = await running;
    expect(result.aborted).toBe(true);
    await waitFor(async () => (await processesWith(marker)).length === 0);
  });

  it('works for an unprivileged user, through an unprivileged user namespace', async () => {
    const wrapper = path.join(dir, 'unshare-as-nobody');
    await writeFile(wrapper, '#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups unshare "$@"\n');
    await chmod(wrapper, 0o755);
    const unprivileged = createSandbox({
      mode: 'netns',
      unshare: wrapper,
      python: '/usr/bin/python3',
      guardSocket: path.join(dir, 'absent.sock'),
      guardAuthority: null,
      hostNetns: readHostNetns(),
      run: runProcess,
    });
    const result = await unprivileged.run({ command: 'python3', args: ['-I', '-S', '-c', 'import os; print(os.getuid(), open("/proc/self/uid_map").read().split())'], network: 'none', stdoutCaptureBytes: 4096 });
    expect(result.confinementFailure).toBeNull();
    expect(result.exitCode).toBe(0);
    // Root inside, mapped to nobody (65534) outside.
    expect(result.stdout.trim()).toBe("0 ['0', '65534', '1']");
  });

  it('refuses to run a tool when the namespace could not be made, and says why', async () => {
    const broken = createSandbox({
      mode: 'netns',
      unshare: path.join(dir, 'no-such-unshare'),
      python: '/usr/bin/python3',
      guardSocket: path.join(dir, 'absent.sock'),
      guardAuthority: null,
      hostNetns: readHostNetns(),
      run: runProcess,
    });
    const result = await broken.run({ command: 'true', args: [], network: 'none' });
    expect(result.confinementFailure).toMatch(/unshare/);
    expect(await broken.check()).toMatchObject({ mode: 'netns', ok: false });
    // A wrapper that runs the tool without a new network namespace is caught by confine.py.
    const fake = path.join(dir, 'fake-unshare');
    await writeFile(fake, '#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift; exec "$@"\n');
    await chmod(fake, 0o755);
    const shared = createSandbox({ mode: 'netns', unshare: fake, python: '/usr/bin/python3', guardSocket: path.join(dir, 'absent.sock'), guardAuthority: null, hostNetns: readHostNetns(), run: runProcess });
    const ran = await shared.run({ command: 'touch', args: [path.join(dir, 'should-not-exist')], network: 'none' });
    expect(ran.confinementFailure).toMatch(/not in a network namespace of its own/);
    await expect(readFile(path.join(dir, 'should-not-exist'))).rejects.toThrow();
    expect(await shared.check()).toEqual({ mode: 'netns', ok: false, reason: 'not in a network namespace of its own' });
  });
});

async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const processesWith = processesMatching;
