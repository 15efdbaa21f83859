import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, open, readFile, readlink, rm, writeFile } from 'node:fs/promises';
import { createSocket } from 'node:dgram';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEgressGuard } from '../../src/egress/guard.js';
import { createLogger } from '../../src/logger.js';
import { createResidentSandbox, type ResidentSandbox } from '../../src/sandbox/resident.js';
import { createSandbox, readHostNetns, REFUSED_CONNECT, type Sandbox } from '../../src/sandbox/sandbox.js';
import { runProcess, type RunProcessResult } from '../../src/tools/process.js';
import { startCountingListener, type CountingListener } from '../support/counting-listener.js';
import { makeTone } from '../support/media.js';
import { hlsPlaylist, startMediaServer, type MediaServer } from '../support/media-server.js';
import { startPlainProxy, type PlainProxy } from '../support/plain-proxy.js';
import { processesMatching } from '../support/processes.js';
import { unprivilegedSandbox } from '../support/unprivileged-sandbox.js';

/**
 * The sandbox alone, with the real tools and no other safeguard: each input below is run three
 * times, as a plain process (the control: it really does reach the trap), confined in a sandbox
 * of its own, and confined in a child of the resident sandbox (src/sandbox/resident.ts, yt-dlp
 * imported there): neither of these two reaches it. yt-dlp's proxy here is a plain forward proxy with no policy beyond the one allowed
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
let resident: ResidentSandbox;
let residentSocket: string;

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
    res.end(hlsPlaylist(lines));
  };
  media.route('/local.m3u8', playlist(['#EXTINF:2.0,', media.url('/seg0.mp3')]));
  media.route('/trap-segments.m3u8', playlist(['#EXTINF:2.0,', `http://${trap.authority}/seg0.ts`]));
  media.route('/ftp-segments.m3u8', playlist(['#EXTINF:2.0,', `ftp://${trap.authority}/seg0.ts`]));
  media.route(
    '/sample-aes.m3u8',
    // yt-dlp gives ffmpeg its proxy as http_proxy, which httpproxy: ignores.
    playlist([
      `#EXT-X-KEY:METHOD=SAMPLE-AES,URI="${media.url('/key.bin')}",KEYFORMAT="identity"`,
      '#EXTINF:2.0,',
      `httpproxy://${trap.authority}/127.0.0.1:80/seg.ts`,
    ]),
  );
  media.redirect('/to-ftp', `ftp://${trap.authority}/a.mp3`);
  media.serveFile('/slow.mp3', tone.path, { contentType: 'audio/mpeg', throttleBytesPerSec: 1024 });

  residentSocket = path.join(dir, 'resident.sock');
  resident = createResidentSandbox({
    spawned: sandbox,
    ytdlpPath: '/usr/bin/yt-dlp',
    python: '/usr/bin/python3',
    socketPath: residentSocket,
    hostNetns: readHostNetns(),
    guardSocket: socketPath,
    enabled: true,
    log: createLogger('silent'),
  });
  await resident.start();
  await waitFor(() => resident.runs() === 'resident', 60_000);
});

afterAll(async () => {
  await resident?.stop();
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

/** Runs a command unconfined (the control), in a sandbox of its own, or in the resident sandbox, and returns what the trap saw meanwhile. */
async function run(
  how: 'plain' | 'confined' | 'resident',
  command: string,
  args: (proxy: string) => string[],
): Promise<{ reached: number; result: RunProcessResult & { confinementFailure?: string | null } }> {
  const before = await trapCount();
  const cwd = await mkdtemp(path.join(dir, 'run-'));
  const common = { command, cwd, timeoutMs: 60_000, stdoutCaptureBytes: 1 << 20 };
  const result =
    how === 'plain'
      ? await runProcess({ ...common, args: args(tcpProxy.url!) })
      : await (how === 'confined' ? sandbox : resident).run({
          ...common,
          args: args(`http://${sandbox.guardAuthority}`),
          network: 'guard',
        });
  return { reached: (await trapCount()) - before, result };
}

const ytdlp =
  (url: string, extra: string[] = []) =>
  (proxy: string) => [
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
    const guard = await startEgressGuard({
      resolve: () => Promise.resolve([]),
      dial: () => Promise.reject(new Error('no dialing here')),
      allowHosts: [],
      socketPath,
    });
    try {
      const withGuard = createSandbox({
        mode: 'netns',
        unshare: 'unshare',
        python: '/usr/bin/python3',
        guardSocket: socketPath,
        guardAuthority: null,
        hostNetns: readHostNetns(),
        run: runProcess,
      });
      expect(await withGuard.check()).toEqual({ mode: 'netns', ok: true });
    } finally {
      await guard.close();
    }
    // The plain proxy is no egress guard: it does not ask for credentials, and the check says so.
    expect(await sandbox.check()).toEqual({
      mode: 'netns',
      ok: false,
      reason: 'the egress guard is not reachable from the sandbox (HTTP/1.1 403 Forbidden)',
    });
  });

  it.each(['confined', 'resident'] as const)(
    'control: yt-dlp fetches a local HLS playlist through the bridge (%s)',
    async (how) => {
      const before = unixProxy.requests.length;
      const { reached, result } = await run(how, 'yt-dlp', ytdlp(media.url('/local.m3u8')));
      expect(result.stderrTail).not.toMatch(/ERROR/);
      expect(result.exitCode).toBe(0);
      expect(reached).toBe(0);
      expect(unixProxy.requests.slice(before).some((line) => line.includes('/seg0.mp3'))).toBe(true);
    },
  );

  const cases: Array<[string, string, (proxy: string) => string[]]> = [
    [
      'a plain TCP connect() from any program',
      'python3',
      () => ['-c', `import socket; socket.create_connection(('127.0.0.1', ${trap.port}), timeout=5)`],
    ],
    [
      "yt-dlp's smuggled fragment that turns the proxy off",
      'yt-dlp',
      (p) => ytdlp(smuggle(media.url('/trap-segments.m3u8')))(p),
    ],
    ['yt-dlp following a redirect to ftp://', 'yt-dlp', (p) => ytdlp(media.url('/to-ftp'))(p)],
    ['yt-dlp fetching HLS segments over ftp://', 'yt-dlp', (p) => ytdlp(media.url('/ftp-segments.m3u8'))(p)],
    ['yt-dlp handing a SAMPLE-AES playlist to ffmpeg', 'yt-dlp', (p) => ytdlp(media.url('/sample-aes.m3u8'))(p)],
    ['ffmpeg opening tcp:', 'ffmpeg', () => ['-nostdin', '-i', `tcp://${trap.authority}`, '-f', 'null', '-']],
    ['ffmpeg opening rtmp:', 'ffmpeg', () => ['-nostdin', '-i', `rtmp://${trap.authority}/live/x`, '-f', 'null', '-']],
    [
      'ffmpeg opening httpproxy:',
      'ffmpeg',
      () => ['-nostdin', '-i', `httpproxy://${trap.authority}/127.0.0.1:80/x`, '-f', 'null', '-'],
    ],
  ];

  for (const [name, command, args] of cases) {
    it(`${name}: reaches the trap as a plain process, and neither from a sandbox nor from the resident sandbox`, async () => {
      const control = await run('plain', command, args);
      expect(control.reached, control.result.stderrTail).toBeGreaterThan(0);
      for (const how of ['confined', 'resident'] as const) {
        const confined = await run(how, command, args);
        expect(confined.reached, `${how}: ${confined.result.stderrTail}`).toBe(0);
        expect(confined.result.confinementFailure).toBeNull();
        // What the service sees in the tool's output, to fail the job with direct_connection_refused.
        expect(confined.result.stderrTail, how).toMatch(REFUSED_CONNECT);
      }
    });
  }

  it('a UDP datagram (a DNS query, say) leaves a plain process, and not the sandbox', async () => {
    const udp = createSocket('udp4');
    const received: string[] = [];
    udp.on('message', (message) => received.push(message.toString()));
    udp.bind(0, '127.0.0.1');
    await once(udp, 'listening');
    const send = (text: string) => [
      '-c',
      `import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'${text}', ('127.0.0.1', ${udp.address().port}))`,
    ];
    expect((await runProcess({ command: 'python3', args: send('control'), timeoutMs: 10_000 })).exitCode).toBe(0);
    // Sent without error, onto the sandbox's own loopback, where nobody receives it.
    expect(
      (await sandbox.run({ command: 'python3', args: send('confined'), network: 'guard', timeoutMs: 10_000 })).exitCode,
    ).toBe(0);
    expect(
      (await resident.run({ command: 'python3', args: send('resident'), network: 'guard', timeoutMs: 10_000 }))
        .exitCode,
    ).toBe(0);
    // Our own datagram last: once it is in, anything sent before it on this loopback is too.
    udp.send('marker', udp.address().port, '127.0.0.1');
    await waitFor(() => received.includes('marker'));
    udp.close();
    expect(received.sort()).toEqual(['control', 'marker']);
  });

  it.each(['confined', 'resident'] as const)(
    'ends the whole sandbox, helpers included, when the tool is killed (%s)',
    async (how) => {
      const marker = `sandbox-orphan-${process.pid}-${Date.now()}`;
      const controller = new AbortController();
      // The tool starts a helper in a session of its own (setsid), out of our process group.
      const running = (how === 'confined' ? sandbox : resident).run({
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
    },
  );

  it('works for an unprivileged user, through an unprivileged user namespace', async () => {
    const unprivileged = await unprivilegedSandbox(dir);
    const result = await unprivileged.run({
      command: 'python3',
      args: ['-I', '-S', '-c', 'import os; print(os.getuid(), open("/proc/self/uid_map").read().split())'],
      network: 'none',
      stdoutCaptureBytes: 4096,
    });
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
    const shared = createSandbox({
      mode: 'netns',
      unshare: fake,
      python: '/usr/bin/python3',
      guardSocket: path.join(dir, 'absent.sock'),
      guardAuthority: null,
      hostNetns: readHostNetns(),
      run: runProcess,
    });
    const ran = await shared.run({ command: 'touch', args: [path.join(dir, 'should-not-exist')], network: 'none' });
    expect(ran.confinementFailure).toMatch(/not in a network namespace of its own/);
    await expect(readFile(path.join(dir, 'should-not-exist'))).rejects.toThrow();
    expect(await shared.check()).toEqual({ mode: 'netns', ok: false, reason: 'not in a network namespace of its own' });
  });
});

describe('the resident sandbox', () => {
  /** The resident's own process (not its confine.py, nor unshare). */
  async function residentPid(): Promise<number> {
    for (const pid of await processesMatching(`--listen ${residentSocket}`)) {
      const argv = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0');
      if (argv.some((arg) => arg.endsWith('resident.py')) && !argv.some((arg) => arg.endsWith('confine.py')))
        return pid;
    }
    throw new Error('no resident process');
  }

  /** A run that prints its namespaces and PID as JSON, then waits to be killed. */
  function namespaceReport(marker: string) {
    const lines: string[] = [];
    const controller = new AbortController();
    const script = `import json,os,sys,time; print(json.dumps({"net": os.readlink("/proc/self/ns/net"), "pid": os.readlink("/proc/self/ns/pid_for_children"), "user": os.readlink("/proc/self/ns/user")}), flush=True); time.sleep(300) # ${marker}`;
    const done = resident.run({
      command: 'python3',
      args: ['-c', script],
      network: 'none',
      signal: controller.signal,
      onStdoutLine: (line) => lines.push(line),
      killGraceMs: 200,
    });
    return { lines, stop: () => controller.abort(), done };
  }

  it("runs in a network namespace of its own, like any tool: not the service's", async () => {
    const pid = await residentPid();
    expect(await readlink(`/proc/${pid}/ns/net`)).not.toBe(readHostNetns());
  });

  it('gives each run namespaces of its own, and one run cannot signal another', async () => {
    const a = namespaceReport(`run-a-${process.pid}`);
    const b = namespaceReport(`run-b-${process.pid}`);
    await waitFor(() => a.lines.length > 0 && b.lines.length > 0);
    const nsA = JSON.parse(a.lines[0]!) as Record<string, string>;
    const nsB = JSON.parse(b.lines[0]!) as Record<string, string>;
    const own = await readlink(`/proc/${await residentPid()}/ns/net`);
    for (const kind of ['net', 'pid', 'user']) expect(nsA[kind], kind).not.toBe(nsB[kind]);
    for (const ns of [nsA, nsB]) expect([readHostNetns(), own]).not.toContain(ns.net);
    const [pidA] = await processesMatching(`run-a-${process.pid}`);
    expect(pidA).toBeGreaterThan(0);
    // Control: from outside, run A is there to be signalled.
    expect(() => process.kill(pidA!, 0)).not.toThrow();
    const probe = await resident.run({
      command: 'python3',
      args: [
        '-c',
        `import os\ntry:\n    os.kill(${pidA}, 0); print("reached")\nexcept ProcessLookupError:\n    print("no such process")`,
      ],
      network: 'none',
      stdoutCaptureBytes: 1024,
    });
    expect(probe.stdout.trim()).toBe('no such process');
    a.stop();
    b.stop();
    await Promise.all([a.done, b.done]);
  });

  it("has each run's leader forked before the run was asked for, and keeps two such spares", async () => {
    const spares = () => processesMatching(`sandbox spare ${residentSocket}`);
    await waitFor(async () => (await spares()).length === 2);
    const before = await spares();
    const cwd = await mkdtemp(path.join(dir, 'spare-'));
    const controller = new AbortController();
    const running = resident.run({
      command: 'sleep',
      args: ['300'],
      cwd,
      network: 'none',
      signal: controller.signal,
      killGraceMs: 200,
    });
    try {
      // The run's leader and its PID 1 name the run's folder; the leader was a spare, PID 1 is new.
      let named: number[] = [];
      await waitFor(async () => (named = await processesMatching(cwd)).length === 2, 30_000);
      expect(named.filter((pid) => before.includes(pid))).toHaveLength(1);
      // More runs at once than there are spares, downloads (the imported yt-dlp: no top-up as
      // they start, a spare forked only when none is left) and others: each is served, and then
      // two spares wait again.
      const versions = await Promise.all(
        Array.from({ length: 4 }, () =>
          resident.run({ command: 'yt-dlp', args: ['--version'], network: 'none', stdoutCaptureBytes: 64 }),
        ),
      );
      expect(new Set(versions.map((result) => result.stdout.trim())).size).toBe(1);
      expect(versions[0]!.stdout.trim()).toMatch(/^\d{4}\.\d{2}\.\d{2}/);
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, n) =>
          resident.run({ command: 'sh', args: ['-c', `echo ${n}`], network: 'none', stdoutCaptureBytes: 64 }),
        ),
      );
      expect(results.map((result) => result.stdout.trim())).toEqual(['0', '1', '2', '3', '4', '5', '6', '7']);
      await waitFor(async () => (await spares()).length === 2);
    } finally {
      controller.abort();
      await running;
    }
  });

  it("keeps a yt-dlp run's memory from other runs (a process of the run's own is readable: the control)", async () => {
    const controller = new AbortController();
    const cwd = path.join(dir, `memory-${process.pid}`);
    await mkdir(cwd);
    const running = resident.run({
      command: 'yt-dlp',
      args: ytdlp(media.url('/slow.mp3'), ['-o', `${cwd}/source.%(ext)s`])(`http://${sandbox.guardAuthority}`),
      cwd,
      network: 'guard',
      signal: controller.signal,
      killGraceMs: 200,
    });
    try {
      let pids: number[] = [];
      // The run's leader and its PID 1, the process running yt-dlp, both name the run's folder.
      await waitFor(async () => (pids = await processesMatching(cwd)).length === 2, 30_000);
      const script = [
        'import subprocess, sys',
        'def attempt(pid):',
        '    try:',
        '        open(f"/proc/{pid}/environ", "rb").read()',
        '        return "read"',
        '    except PermissionError:',
        '        return "denied"',
        '    except OSError as err:',
        '        return type(err).__name__',
        // The control: a child of this run's own, by its PID as /proc (the service's) knows it.
        'own = subprocess.Popen(["python3", "-c", "import os, time; print(os.readlink(\'/proc/self\'), flush=True); time.sleep(30)"], stdout=subprocess.PIPE)',
        'own_pid = int(own.stdout.readline())',
        `print(attempt(own_pid), ${pids.map((pid) => `attempt(${pid})`).join(', ')})`,
        'own.kill()',
      ].join('\n');
      const attempt = await resident.run({
        command: 'python3',
        args: ['-c', script],
        network: 'none',
        stdoutCaptureBytes: 1024,
      });
      expect(attempt.stdout.trim()).toBe('read denied denied');
    } finally {
      controller.abort();
      await running;
    }
  });

  it("never holds a run's request in its own memory, which every later run inherits", async () => {
    const marker = `secret-of-one-run-${randomBytes(8).toString('hex')}`;
    const result = await resident.run({
      command: 'sh',
      args: ['-c', `echo ${marker}`],
      network: 'none',
      stdoutCaptureBytes: 1024,
    });
    expect(result.stdout.trim()).toBe(marker);
    const memory = await writableMemoryOf(await residentPid());
    // Control: the scan finds what the resident does hold, such as the socket it listens on.
    expect(memory.includes(Buffer.from(residentSocket))).toBe(true);
    expect(memory.includes(Buffer.from(marker))).toBe(false);
  });

  it('refuses a run that needs the egress guard when it was started without one, and says why', async () => {
    const guardless = createResidentSandbox({
      spawned: sandbox,
      ytdlpPath: '/usr/bin/yt-dlp',
      python: '/usr/bin/python3',
      socketPath: path.join(dir, 'resident-guardless.sock'),
      hostNetns: readHostNetns(),
      guardSocket: null,
      enabled: true,
      log: createLogger('silent'),
    });
    try {
      await guardless.start();
      await waitFor(() => guardless.runs() === 'resident', 60_000);
      const marker = path.join(dir, 'guardless-ran');
      const refused = await guardless.run({ command: 'touch', args: [marker], network: 'guard' });
      expect(refused.confinementFailure).toBe('no egress guard to bridge to');
      await expect(readFile(marker)).rejects.toThrow();
      // Control: the same run without the network runs.
      const ran = await guardless.run({ command: 'touch', args: [marker], network: 'none' });
      expect(ran.confinementFailure).toBeNull();
      expect(ran.exitCode).toBe(0);
      await readFile(marker);
    } finally {
      await guardless.stop();
    }
  });

  it('starts again after dying; meanwhile each run is started on its own', async () => {
    process.kill(await residentPid(), 'SIGKILL');
    await waitFor(() => resident.runs() === 'spawned');
    const meanwhile = await resident.run({
      command: 'sh',
      args: ['-c', 'echo $PPID'],
      network: 'none',
      stdoutCaptureBytes: 1024,
    });
    expect(meanwhile.exitCode).toBe(0);
    await waitFor(() => resident.runs() === 'resident', 60_000);
    const again = await run('resident', 'yt-dlp', ytdlp(media.url('/local.m3u8')));
    expect(again.result.exitCode).toBe(0);
  });

  it('runs a yt-dlp it cannot import (a standalone build, or a wrapper) as a process of its own, confined the same way', async () => {
    const wrapper = path.join(dir, 'yt-dlp-wrapper');
    await writeFile(wrapper, '#!/bin/sh\nexec /usr/bin/yt-dlp "$@"\n');
    await chmod(wrapper, 0o755);
    const lines: string[] = [];
    const log = createLogger('info', { write: (line: string) => void lines.push(line) });
    const other = createResidentSandbox({
      spawned: sandbox,
      ytdlpPath: wrapper,
      python: '/usr/bin/python3',
      socketPath: path.join(dir, 'resident-wrapper.sock'),
      hostNetns: readHostNetns(),
      guardSocket: path.join(dir, 'proxy.sock'),
      enabled: true,
      log,
    });
    try {
      await other.start();
      await waitFor(() => other.runs() === 'resident', 60_000);
      expect(
        lines.map((line) => JSON.parse(line) as Record<string, unknown>).find((line) => line.runs === 'resident'),
      ).toMatchObject({
        msg: 'tool runs',
        ytdlp: 'spawned',
        reason: expect.stringMatching(/^YTDLP_PATH: its interpreter is not Python/),
      });
      const before = await trapCount();
      const fetched = await other.run({
        command: wrapper,
        args: ytdlp(media.url('/local.m3u8'))(`http://${sandbox.guardAuthority}`),
        cwd: await mkdtemp(path.join(dir, 'run-')),
        network: 'guard',
      });
      expect(fetched.exitCode, fetched.stderrTail).toBe(0);
      const trapped = await other.run({
        command: wrapper,
        args: ytdlp(media.url('/ftp-segments.m3u8'))(`http://${sandbox.guardAuthority}`),
        cwd: await mkdtemp(path.join(dir, 'run-')),
        network: 'guard',
      });
      expect(trapped.stderrTail).toMatch(REFUSED_CONNECT);
      expect((await trapCount()) - before).toBe(0);
    } finally {
      await other.stop();
    }
  });
});

/** The writable memory (heap, stacks, anonymous mappings) of a process, read through /proc. */
async function writableMemoryOf(pid: number): Promise<Buffer> {
  const maps = await readFile(`/proc/${pid}/maps`, 'utf8');
  const handle = await open(`/proc/${pid}/mem`, 'r');
  const parts: Buffer[] = [];
  try {
    for (const line of maps.split('\n')) {
      const m = /^([0-9a-f]+)-([0-9a-f]+) rw/.exec(line);
      if (!m) continue;
      const start = parseInt(m[1]!, 16);
      const length = parseInt(m[2]!, 16) - start;
      const buf = Buffer.alloc(length);
      const { bytesRead } = await handle.read(buf, 0, length, start).catch(() => ({ bytesRead: 0 }));
      parts.push(buf.subarray(0, bytesRead));
    }
  } finally {
    await handle.close();
  }
  return Buffer.concat(parts);
}

async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const processesWith = processesMatching;
