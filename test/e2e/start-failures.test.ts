import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, startService, type ServiceHandle } from '../support/service.js';

/**
 * A start that cannot go on for a reason its person can fix says so in one sentence on standard
 * error and exits 1, without a stack trace: the SQLite file held by another process, the port
 * taken. The control: the same start with its own data folder and a free port comes up. One that
 * comes up without its tools says what it lacks.
 */
let first: ServiceHandle;
let work: string;

beforeAll(async () => {
  first = await startService();
  work = await mkdtemp(path.join(tmpdir(), 'sf-start-'));
});

afterAll(async () => {
  await first?.stop();
  await rm(work, { recursive: true, force: true });
});

/**
 * dist/main.js with `env`, until it exits, or until it is ready and its first health check is
 * logged (then it is stopped): its exit code, its standard error, and whether it came up.
 */
function start(env: Record<string, string>): Promise<{ code: number | null; stderr: string; ready: boolean }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'dist/main.js')], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: process.env.HOME ?? '/root',
        HOST: '127.0.0.1',
        API_KEYS: 'start-failures-key-0123456789',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let ready = false;
    const stopOnceChecked = () => {
      if (ready || !stderr.includes('source-fetch is ready') || !stdout.includes('"msg":"first health check"')) return;
      ready = true;
      child.kill('SIGTERM');
    };
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      stopOnceChecked();
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
      stopOnceChecked();
    });
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stderr, ready }));
  });
}

describe('a start that cannot go on', () => {
  it('the SQLite file held by another process: one sentence, exit 1', async () => {
    const second = await start({ DATA_DIR: first.dataDir, PORT: '0' });
    expect(second.ready).toBe(false);
    expect(second.code).toBe(1);
    expect(second.stderr).toBe(
      `source-fetch cannot start: another process has the SQLite database ${path.join(first.dataDir, 'source-fetch.sqlite')} open: SQLite serves one process; stop the other one, or run many nodes on PostgreSQL (DATABASE_URL)\n`,
    );
  });

  it('the port taken: one sentence, exit 1', async () => {
    const second = await start({ DATA_DIR: path.join(work, 'port-taken'), PORT: String(first.port) });
    expect(second.ready).toBe(false);
    expect(second.code).toBe(1);
    expect(second.stderr).toBe(
      `source-fetch cannot start: 127.0.0.1:${first.port} is already in use (another source-fetch, or another program): stop it, or set PORT (and HOST) to a free address.\n`,
    );
  });

  it('the control: its own data folder and a free port, it comes up, and says nothing more once it can fetch', async () => {
    const third = await start({ DATA_DIR: path.join(work, 'own'), PORT: '0' });
    expect(third.ready).toBe(true);
    expect(third.stderr).not.toContain('cannot');
  });

  it('without its tools it still comes up, and says in plain words that it cannot fetch yet, and what to do', async () => {
    const toolless = await start({
      DATA_DIR: path.join(work, 'toolless'),
      PORT: '0',
      YTDLP_PATH: '/nonexistent/yt-dlp',
      FFMPEG_PATH: '/nonexistent/ffmpeg',
    });
    expect(toolless.ready).toBe(true);
    expect(toolless.stderr).toContain(
      [
        'It cannot fetch yet (GET /healthz says so too):',
        '  yt-dlp was not found (/nonexistent/yt-dlp): install it (apt-get install yt-dlp, or scripts/fetch-current-ytdlp.sh) or set YTDLP_PATH to it.',
        '  ffmpeg was not found (/nonexistent/ffmpeg): install it (apt-get install ffmpeg) or set FFMPEG_PATH to it.',
        '',
      ].join('\n'),
    );
  });
});
