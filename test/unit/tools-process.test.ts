import { spawn } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { LineSplitter, runProcess, toolEnvironment } from '../../src/tools/process.js';

/** True while the pid is a live process; a zombie waiting for init to reap it counts as gone. */
async function isAlive(pid: number): Promise<boolean> {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  // Field 3, after "pid (comm)", is the state.
  return stat !== '' && stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
}

async function waitGone(pid: number, ms = 3000): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (!(await isAlive(pid))) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return false;
}

describe('runProcess', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tools-process-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('reports the exit code and splits stdout on \\n, \\r and \\r\\n', async () => {
    const lines: string[] = [];
    const result = await runProcess({
      command: 'sh',
      args: ['-c', "printf 'a\\rb\\nc\\r\\n\\nd'; exit 3"],
      onStdoutLine: (l) => lines.push(l),
    });
    expect(lines).toEqual(['a', 'b', 'c', 'd']);
    expect(result).toMatchObject({ exitCode: 3, signal: null, timedOut: false, aborted: false, notFound: false });
  });

  it('passes arguments verbatim, never through a shell', async () => {
    const result = await runProcess({
      command: 'printf',
      args: ['%s|', '$HOME', '; echo hi', '*'],
      stdoutCaptureBytes: 1024,
    });
    expect(result.stdout).toBe('$HOME|; echo hi|*|');
  });

  it('keeps only the tail of stderr and delivers stderr lines', async () => {
    const lines: string[] = [];
    const result = await runProcess({
      command: 'sh',
      args: ['-c', "head -c 20000 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'ERROR: last words' >&2"],
      stderrTailBytes: 1024,
      onStderrLine: (l) => lines.push(l),
    });
    expect(result.stderrTail.length).toBeLessThanOrEqual(1024);
    expect(result.stderrTail.endsWith('ERROR: last words\n')).toBe(true);
    expect(lines).toEqual(['x'.repeat(20000), 'ERROR: last words']);
  });

  it('captures stdout up to a limit', async () => {
    const result = await runProcess({ command: 'sh', args: ['-c', 'printf 0123456789'], stdoutCaptureBytes: 4 });
    expect(result.stdout).toBe('0123');
    expect(result.stdoutTruncated).toBe(true);
  });

  it('reports a missing command as notFound', async () => {
    const result = await runProcess({ command: join(dir, 'no-such-tool'), args: [] });
    expect(result).toMatchObject({ notFound: true, spawnError: 'ENOENT', exitCode: null });
    // The 'close' Node emits after the spawn error must not change the settled result.
    await new Promise((r) => setTimeout(r, 50));
    expect(result.exitCode).toBeNull();
  });

  it('reports a command that is not executable as notFound', async () => {
    const file = join(dir, 'not-executable');
    await writeFile(file, '#!/bin/sh\necho hi\n');
    await chmod(file, 0o644);
    const result = await runProcess({ command: file, args: [] });
    expect(result).toMatchObject({ notFound: true, spawnError: 'EACCES' });
  });

  it('turns a spawn that throws into data', async () => {
    const throwing = (() => {
      throw Object.assign(new Error('too many files'), { code: 'EMFILE' });
    }) as unknown as typeof spawn;
    const result = await runProcess({ command: 'sh', args: [], spawn: throwing });
    expect(result).toMatchObject({ notFound: false, spawnError: 'EMFILE', exitCode: null });
  });

  it('does not start anything when the signal is already aborted', async () => {
    const spy = vi.fn(spawn);
    const result = await runProcess({
      command: 'sh',
      args: [],
      signal: AbortSignal.abort(),
      spawn: spy as unknown as typeof spawn,
    });
    expect(spy).not.toHaveBeenCalled();
    expect(result.aborted).toBe(true);
  });

  it('spawns detached, with stdin ignored and no shell', async () => {
    const spy = vi.fn(spawn);
    await runProcess({ command: 'true', args: [], spawn: spy as unknown as typeof spawn });
    expect(spy.mock.calls[0]?.[2]).toMatchObject({ detached: true, shell: false, stdio: ['ignore', 'ignore', 'pipe'] });
  });

  it('on abort kills the whole process group, grandchildren included', async () => {
    const controller = new AbortController();
    let grandchild = 0;
    const result = await runProcess({
      command: 'sh',
      args: ['-c', 'sleep 100 & echo $!; sleep 100'],
      signal: controller.signal,
      onStdoutLine: (line) => {
        grandchild = Number(line);
        controller.abort();
      },
    });
    expect(result).toMatchObject({ aborted: true, timedOut: false, exitCode: null, signal: 'SIGTERM' });
    expect(grandchild).toBeGreaterThan(0);
    expect(await waitGone(grandchild)).toBe(true);
  });

  it('sends SIGKILL after the grace period when SIGTERM is ignored', async () => {
    const controller = new AbortController();
    const started = Date.now();
    const result = await runProcess({
      command: 'sh',
      args: ['-c', "trap '' TERM; echo ready; sleep 100"],
      signal: controller.signal,
      killGraceMs: 300,
      onStdoutLine: () => controller.abort(),
    });
    expect(result.signal).toBe('SIGKILL');
    expect(Date.now() - started).toBeGreaterThanOrEqual(300);
  });

  it('stops the group on timeout', async () => {
    const result = await runProcess({ command: 'sh', args: ['-c', 'sleep 100 & sleep 100'], timeoutMs: 200 });
    expect(result).toMatchObject({ timedOut: true, aborted: false, signal: 'SIGTERM' });
  });

  it('sweeps a background process the tool left behind, instead of waiting for it', async () => {
    let straggler = 0;
    const started = Date.now();
    const result = await runProcess({
      command: 'sh',
      // The background sleep inherits stdout: without the sweep 'close' would wait 100 s.
      args: ['-c', 'sleep 100 & echo $!'],
      onStdoutLine: (line) => {
        straggler = Number(line);
      },
    });
    expect(result.exitCode).toBe(0);
    expect(Date.now() - started).toBeLessThan(5000);
    expect(await waitGone(straggler)).toBe(true);
  });

  it('kills the child and rethrows when a line callback throws', async () => {
    const started = Date.now();
    await expect(
      runProcess({
        command: 'sh',
        args: ['-c', 'echo one; sleep 100'],
        onStdoutLine: () => {
          throw new Error('callback broke');
        },
      }),
    ).rejects.toThrow('callback broke');
    expect(Date.now() - started).toBeLessThan(5000);
  });
});

describe('toolEnvironment', () => {
  it('keeps what a tool needs, and no proxy setting nor secret of the service', () => {
    const base = {
      http_proxy: 'http://corp:3128',
      HTTP_PROXY: 'http://corp:3128',
      https_proxy: 'http://corp:3128',
      HTTPS_PROXY: 'http://corp:3128',
      all_proxy: 'socks5://corp:1080',
      ALL_PROXY: 'socks5://corp:1080',
      no_proxy: '169.254.169.254,localhost',
      NO_PROXY: '*',
      No_Proxy: '127.0.0.1',
      socks_proxy: 'socks5://corp:1080',
      ftp_proxy: 'http://corp:3128',
      PATH: '/usr/local/bin:/usr/bin:/bin',
      HOME: '/home/svc',
      PYTHONPATH: '/opt/py',
      LANG: 'C.UTF-8',
      LC_ALL: 'C.UTF-8',
      TMPDIR: '',
      // The service's own settings and secrets.
      API_KEYS: 'k'.repeat(32),
      URL_SIGNING_SECRET: 's'.repeat(32),
      DATABASE_URL: 'postgres://app:password@db/app',
      FETCH_ALLOW_HOSTS: '127.0.0.1:8000',
      PROXY_MODE: 'strict',
    };
    expect(toolEnvironment(base)).toEqual({
      PATH: '/usr/local/bin:/usr/bin:/bin',
      HOME: '/home/svc',
      PYTHONPATH: '/opt/py',
      LANG: 'C.UTF-8',
      LC_ALL: 'C.UTF-8',
      TMPDIR: '',
    });
  });

  it('does not change its argument and drops undefined values', () => {
    const base: NodeJS.ProcessEnv = { NO_PROXY: '*', PATH: '/bin', HOME: undefined };
    const out = toolEnvironment(base);
    expect(out).toEqual({ PATH: '/bin' });
    expect('HOME' in out).toBe(false);
    expect(base).toEqual({ NO_PROXY: '*', PATH: '/bin', HOME: undefined });
  });
});

describe('runProcess environment', () => {
  const printEnv = (env?: NodeJS.ProcessEnv) =>
    runProcess({ command: 'sh', args: ['-c', 'env'], env, stdoutCaptureBytes: 1 << 20 }).then((r) =>
      Object.fromEntries(
        r.stdout
          .split('\n')
          .filter((line) => line.includes('='))
          .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
      ),
    );

  it('a tool started with an explicit env gets what it needs of it, without proxy variables', async () => {
    const seen = await printEnv({
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      NO_PROXY: '*',
      no_proxy: '127.0.0.1',
      HTTPS_PROXY: 'http://x:1',
      TZ: 'UTC',
      SECRET: 'x',
    });
    expect(seen.TZ).toBe('UTC');
    expect(seen.SECRET).toBeUndefined();
    expect(Object.keys(seen).filter((name) => /_proxy$/i.test(name))).toEqual([]);
  });

  it("by default a tool gets what it needs of the service's own environment: no proxy variable, no secret", async () => {
    vi.stubEnv('NO_PROXY', '*');
    vi.stubEnv('no_proxy', '169.254.169.254');
    vi.stubEnv('Socks_Proxy', 'socks5://127.0.0.1:1');
    vi.stubEnv('API_KEYS', 'a-key-of-the-service-0123456789');
    vi.stubEnv('LC_MESSAGES', 'C');
    try {
      const seen = await printEnv();
      expect(seen.PATH).toBe(process.env.PATH);
      expect(seen.LC_MESSAGES).toBe('C');
      expect(seen.API_KEYS).toBeUndefined();
      expect(Object.keys(seen).filter((name) => /_proxy$/i.test(name))).toEqual([]);
    } finally {
      vi.unstubAllEnvs();
    }
  });
});

describe('LineSplitter', () => {
  it('handles \\r\\n and UTF-8 characters split across chunks', () => {
    const lines: string[] = [];
    const splitter = new LineSplitter((l) => lines.push(l));
    const euro = Buffer.from('€'); // 3 bytes
    splitter.push(Buffer.concat([Buffer.from('price '), euro.subarray(0, 1)]));
    splitter.push(Buffer.concat([euro.subarray(1), Buffer.from('5\r')]));
    splitter.push(Buffer.from('\nnext'));
    splitter.end();
    expect(lines).toEqual(['price €5', 'next']);
  });
});
