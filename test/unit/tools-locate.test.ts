import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { locateTool, toolVersion } from '../../src/tools/locate.js';

describe('locateTool', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tools-locate-'));
    await mkdir(join(dir, 'bin'));
    await writeFile(join(dir, 'bin', 'mytool'), '#!/bin/sh\necho mytool 1.2.3\n');
    await chmod(join(dir, 'bin', 'mytool'), 0o755);
    await writeFile(join(dir, 'bin', 'plain'), 'not executable');
    await chmod(join(dir, 'bin', 'plain'), 0o644);
    await mkdir(join(dir, 'bin', 'adir'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('finds a bare name on PATH, first match wins', async () => {
    expect(await locateTool('mytool', ['/nonexistent', join(dir, 'bin'), '/usr/bin'].join(':'))).toBe(
      join(dir, 'bin', 'mytool'),
    );
    expect(await locateTool('yt-dlp', '/usr/local/bin:/usr/bin')).toBe('/usr/bin/yt-dlp');
  });

  it('skips empty and relative PATH entries', async () => {
    expect(await locateTool('mytool', `:${relative(process.cwd(), join(dir, 'bin'))}`)).toBeNull();
  });

  it('checks a path directly, absolute or relative', async () => {
    expect(await locateTool('/usr/bin/ffmpeg', '')).toBe('/usr/bin/ffmpeg');
    const rel = relative(process.cwd(), join(dir, 'bin', 'mytool'));
    expect(await locateTool(rel, '')).toBe(join(dir, 'bin', 'mytool'));
  });

  it('returns null for missing, non-executable files and folders', async () => {
    expect(await locateTool('no-such-tool-here', join(dir, 'bin'))).toBeNull();
    expect(await locateTool('plain', join(dir, 'bin'))).toBeNull();
    expect(await locateTool(join(dir, 'bin', 'adir'), '')).toBeNull();
    expect(await locateTool('', '/usr/bin')).toBeNull();
  });

  it('reads the first line of a version', async () => {
    expect(await toolVersion('/usr/bin/yt-dlp', ['--version'])).toMatch(/^\d{4}\.\d{2}\.\d{2}/);
    expect(await toolVersion('/usr/bin/ffmpeg', ['-version'])).toMatch(/^ffmpeg version /);
    expect(await toolVersion(join(dir, 'bin', 'mytool'), [])).toBe('mytool 1.2.3');
  });

  it('gives null for a tool that fails or is missing', async () => {
    expect(await toolVersion('/bin/false', [])).toBeNull();
    expect(await toolVersion(join(dir, 'nope'), ['--version'])).toBeNull();
  });
});
