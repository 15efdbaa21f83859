import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../support/service.js';

/**
 * scripts/lint-python.mjs, the Python step of `npm run lint`: Ruff (WebAssembly) over the
 * sandbox's Python, beside a control that shows a finding is reported with its place and fails.
 */
const run = promisify(execFile);
const SCRIPT = path.join(ROOT, 'scripts/lint-python.mjs');

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'lint-python-'));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The script's exit code and output over `files` (none: src/sandbox/*.py). */
async function lint(...files: string[]): Promise<{ code: number; stdout: string }> {
  try {
    const { stdout } = await run(process.execPath, [SCRIPT, ...files], { cwd: ROOT });
    return { code: 0, stdout };
  } catch (err) {
    const failed = err as { code: number; stdout: string };
    return { code: failed.code, stdout: failed.stdout };
  }
}

describe('lint-python', () => {
  it("finds nothing in the sandbox's Python", async () => {
    expect(await lint()).toEqual({ code: 0, stdout: '' });
  });

  it('reports an unused import with its file, line and column, and fails (control)', async () => {
    const file = path.join(dir, 'unused.py');
    await writeFile(file, 'import os\n\nprint("hello")\n');
    const { code, stdout } = await lint(file);
    expect(code).toBe(1);
    expect(stdout).toContain(`${file}:1:8: F401 \`os\` imported but unused`);
  });

  it('reports a syntax error', async () => {
    const file = path.join(dir, 'broken.py');
    await writeFile(file, 'def f(:\n    pass\n');
    const { code, stdout } = await lint(file);
    expect(code).toBe(1);
    expect(stdout).toMatch(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:1:`, 'm'));
  });
});
