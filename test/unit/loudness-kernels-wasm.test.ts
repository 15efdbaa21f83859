import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

/**
 * The committed WebAssembly of the loudness meter and the waveform peaks is the build of its committed C source: rebuilt
 * by the same script with the clang it names (Debian bookworm's 14), it has the same bytes. Where
 * that clang is not installed (the build and CI need none) there is nothing to rebuild with.
 */
const ROOT = path.resolve(import.meta.dirname, '../..');
const COMMITTED = path.join(ROOT, 'src/audio/wasm/loudness-kernels.wasm');
const clang = spawnSync('clang', ['--version'], { encoding: 'utf8' });
const clang14 = clang.status === 0 && /clang version 14\./.test(clang.stdout);
const dir = mkdtempSync(path.join(tmpdir(), 'sf-wasm-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('loudness kernels', () => {
  it.skipIf(!clang14)('the committed .wasm is what scripts/build-wasm.sh makes of the C source', () => {
    const rebuilt = path.join(dir, 'loudness-kernels.wasm');
    execFileSync(path.join(ROOT, 'scripts/build-wasm.sh'), [rebuilt]);
    expect(readFileSync(rebuilt).equals(readFileSync(COMMITTED))).toBe(true);
  });
});
