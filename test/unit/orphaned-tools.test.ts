import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { killOrphanedTools } from '../../src/jobs/orphaned-tools.js';

describe('killOrphanedTools', () => {
  it('kills processes whose command line names an orphaned job folder, and only those', async () => {
    const base = await mkdtemp(path.join(tmpdir(), 'sf-orphans-'));
    const workDir = path.join(base, 'work');
    const orphan = spawn('sh', ['-c', 'sleep 600', `${workDir}/job.1/source.m4a`], { detached: true, stdio: 'ignore' });
    // A job another live node on this machine is running.
    const neighbour = spawn('sh', ['-c', 'sleep 600', `${workDir}/other.1/source.m4a`], {
      detached: true,
      stdio: 'ignore',
    });
    const bystander = spawn('sh', ['-c', 'sleep 600', `${base}/elsewhere/source.m4a`], {
      detached: true,
      stdio: 'ignore',
    });
    try {
      await new Promise((resolve) => setTimeout(resolve, 100));
      const orphanExit = once(orphan, 'exit');
      expect(await killOrphanedTools(workDir, (folder) => folder === 'job.1')).toBe(1);
      const [, signal] = (await orphanExit) as [code: number | null, signal: NodeJS.Signals | null];
      expect(signal).toBe('SIGKILL');
      for (const spared of [neighbour, bystander]) {
        expect(spared.exitCode).toBeNull();
        expect(spared.signalCode).toBeNull();
      }
    } finally {
      for (const child of [orphan, neighbour, bystander]) child.kill('SIGKILL');
    }
  });
});
