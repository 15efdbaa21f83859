import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { createResidentSandbox, type ResidentSandbox } from '../../src/sandbox/resident.js';
import { createSandbox, readHostNetns, type Sandbox } from '../../src/sandbox/sandbox.js';
import { runProcess } from '../../src/tools/process.js';

/**
 * The mount view of a tool run (confine.py's enter_mount_view), in a sandbox of its own and in
 * the resident: a tool sees its job's folder (read-write), the programs and libraries, and none of
 * the service's data: not the data folder's other files (database, secrets), not another job's
 * folder, not the service's /proc entries, not the resident's socket, not /etc/shadow. The same
 * run without the view sees them all (the control).
 */
let dir: string;
let jobDir: string;
let confined: Sandbox;
let resident: ResidentSandbox;
let residentSocket: string;

const SECRET = 'not-for-tools';

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-mount-view-'));
  await writeFile(path.join(dir, 'source-fetch.sqlite'), 'database');
  await writeFile(path.join(dir, 'url-signing-secret'), SECRET);
  jobDir = path.join(dir, 'work', 'job-a.1');
  await mkdir(jobDir, { recursive: true });
  await mkdir(path.join(dir, 'work', 'job-b.1'));
  await writeFile(path.join(dir, 'work', 'job-b.1', 'download.mp3'), 'another job');
  residentSocket = path.join(dir, 'resident.sock');
  const common = {
    unshare: 'unshare',
    python: '/usr/bin/python3',
    guardSocket: path.join(dir, 'absent.sock'),
    hostNetns: readHostNetns(),
    run: runProcess,
  };
  confined = createSandbox({ mode: 'netns', guardAuthority: null, ...common });
  resident = createResidentSandbox({
    spawned: confined,
    ytdlpPath: '/usr/bin/yt-dlp',
    python: '/usr/bin/python3',
    socketPath: residentSocket,
    hostNetns: readHostNetns(),
    guardSocket: null,
    enabled: true,
    log: createLogger('silent'),
  });
  await resident.start();
  const deadline = Date.now() + 60_000;
  while (resident.runs() !== 'resident') {
    if (Date.now() > deadline) throw new Error('the resident did not start');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
});

afterAll(async () => {
  await resident?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** What a tool in `jobDir` can see of the host: each path, and whether it exists for it. */
function probe(paths: Record<string, string>) {
  const code = [
    'import json, os, sys',
    `paths = json.loads(${JSON.stringify(JSON.stringify(paths))})`,
    'seen = {name: os.path.exists(p) for name, p in paths.items()}',
    "open('written-by-the-tool', 'w').write('ok')",
    "print(json.dumps({'seen': seen, 'root': sorted(os.listdir('/'))}))",
  ].join('\n');
  return { command: '/usr/bin/python3', args: ['-I', '-S', '-c', code] };
}

describe.each([
  ['in a sandbox of its own', () => confined],
  ['in the resident sandbox', () => resident],
] as const)('%s', (_way, sandboxOf) => {
  it('a tool sees its folder and the system, none of the service data; without the view it sees all', async () => {
    const paths = {
      database: path.join(dir, 'source-fetch.sqlite'),
      secret: path.join(dir, 'url-signing-secret'),
      otherJob: path.join(dir, 'work', 'job-b.1', 'download.mp3'),
      serviceProc: `/proc/${process.pid}/environ`,
      residentSocket,
      shadow: '/etc/shadow',
      ownFolder: jobDir,
      certificates: '/etc/ssl/certs',
      python: '/usr/bin/python3',
    };
    const run = (mountView: boolean) =>
      sandboxOf().run({
        ...probe(paths),
        cwd: jobDir,
        network: 'none',
        mountView,
        timeoutMs: 30_000,
        stdoutCaptureBytes: 64 * 1024,
      });

    const viewed = await run(true);
    expect(viewed.stderrTail).toBe('');
    expect(viewed.exitCode).toBe(0);
    const inside = JSON.parse(viewed.stdout) as { seen: Record<string, boolean>; root: string[] };
    expect(inside.seen).toEqual({
      database: false,
      secret: false,
      otherJob: false,
      serviceProc: false,
      residentSocket: false,
      shadow: false,
      ownFolder: true,
      certificates: true,
      python: true,
    });
    expect(inside.root).not.toContain('root');
    expect(inside.root).not.toContain('work');
    expect(await readFile(path.join(jobDir, 'written-by-the-tool'), 'utf8')).toBe('ok');

    const control = await run(false);
    expect(control.exitCode).toBe(0);
    const outside = JSON.parse(control.stdout) as { seen: Record<string, boolean> };
    // The tool runs as root of its own user namespace, mapped to the service's user: without the
    // view it can open whatever that user can, and its PID namespace does not hide the host's /proc.
    expect(outside.seen).toMatchObject({
      database: true,
      secret: true,
      otherJob: true,
      serviceProc: true,
      residentSocket: true,
      ownFolder: true,
    });
  });
});
