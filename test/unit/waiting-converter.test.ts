import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createConverterWaiting } from '../../src/jobs/fetch/waiting-converter.js';
import { waitingConverterNode } from '../../src/jobs/fetch/work-folder.js';
import { createLogger } from '../../src/logger.js';
import type { SandboxedResult, SandboxRunOptions } from '../../src/sandbox/sandbox.js';
import { makeFifo } from '../../src/tools/fifo.js';

/**
 * The waiting converter's lifecycle (src/jobs/fetch/waiting-converter.ts) with a stand-in for the
 * sandbox: each "ffmpeg" run waits until it is stopped, or until the test ends it. The real ffmpeg
 * waiting in its sandbox is in test/e2e/fetch-overlap.test.ts.
 */
/** A run's end; the waiting converter hands it on unread (the job that took it checks it). */
const ended = (aborted: boolean) => ({ exitCode: 0, aborted }) as SandboxedResult;

let workDir: string;
beforeEach(async () => {
  workDir = path.join(await mkdtemp(path.join(tmpdir(), 'waiting-converter-')), 'work');
});
afterEach(async () => {
  await rm(path.dirname(workDir), { recursive: true, force: true });
});

function converterWaiting() {
  const runs: Array<{ opts: SandboxRunOptions; end: () => void }> = [];
  const waiting = createConverterWaiting({
    nodeId: 'host.example-123-abcdef',
    workDir,
    sandbox: {
      mode: 'netns',
      run: (opts) =>
        new Promise((resolve) => {
          const end = () => resolve(ended(opts.signal?.aborted ?? false));
          opts.signal?.addEventListener('abort', end, { once: true });
          runs.push({ opts, end });
        }),
    },
    mountView: true,
    ffmpegPath: '/usr/bin/ffmpeg',
    limits: {
      timeoutMs: 60_000,
      metadataTimeoutMs: 10_000,
      downloadStall: { windowMs: 10_000, minBytes: 1 },
      maxDownloadBytes: 1 << 30,
      maxOutputBytes: 1 << 31,
      maxDurationS: 3600,
      tool: { memoryBytes: 1 << 30, cpuSeconds: 600, processes: 64 },
    },
    makeFifo,
    log: createLogger('silent'),
  });
  return { waiting, runs };
}

describe('the waiting converter', () => {
  it('starts one ffmpeg in a folder of its own, on its FIFO, and hands it to one job only', async () => {
    const { waiting, runs } = converterWaiting();
    expect(waiting.take()).toBeUndefined();
    waiting.replenish();
    waiting.replenish();
    const taken = waiting.take()!;
    await taken.ready;
    expect(waiting.take()).toBeUndefined();
    expect(path.dirname(taken.folder)).toBe(workDir);
    expect(waitingConverterNode(path.basename(taken.folder))).toBe('host.example-123-abcdef');
    expect((await stat(taken.fifo)).isFIFO()).toBe(true);
    expect(path.dirname(taken.wavPath)).toBe(taken.folder);
    while (runs.length === 0) await new Promise((resolve) => setImmediate(resolve));
    expect(runs).toHaveLength(1);
    const { opts } = runs[0]!;
    expect(opts).toMatchObject({ command: '/usr/bin/ffmpeg', cwd: taken.folder, network: 'none', mountView: true });
    expect(opts.args).toContain(`async:file:${taken.fifo}`);
    expect(opts.args).toContain(`file:${taken.wavPath}`);
    // The job that took it stops it.
    taken.stop();
    expect((await taken.run).aborted).toBe(true);
  });

  it('drops one that ended while waiting, and stops and removes the last at close', async () => {
    const { waiting, runs } = converterWaiting();
    waiting.replenish();
    while (runs.length === 0) await new Promise((resolve) => setImmediate(resolve));
    // Its run ended on its own (the sandbox restarted, say): nothing to take, its folder goes.
    runs[0]!.end();
    while ((await readdir(workDir)).length > 0) await new Promise((resolve) => setTimeout(resolve, 2));
    expect(waiting.take()).toBeUndefined();

    waiting.replenish();
    while (runs.length < 2) await new Promise((resolve) => setImmediate(resolve));
    expect(await readdir(workDir)).toHaveLength(1);
    await waiting.close();
    expect(runs[1]!.opts.signal?.aborted).toBe(true);
    expect(await readdir(workDir)).toEqual([]);
    waiting.replenish();
    expect(waiting.take()).toBeUndefined();
    expect(runs).toHaveLength(2);
  });

  it('tells its folders from job folders', () => {
    expect(waitingConverterNode('converter.node-1-abcdef.0a1b2c')).toBe('node-1-abcdef');
    expect(waitingConverterNode('3f1c9f0e-1d2b-4c5a-9e8f-0a1b2c3d4e5f.1')).toBeUndefined();
    expect(waitingConverterNode('converter.')).toBeUndefined();
  });
});
