/**
 * Lints the sandbox's Python (src/sandbox/*.py, or the files named as arguments) with Ruff,
 * compiled to WebAssembly (@astral-sh/ruff-wasm-nodejs: no Python tool to install), under Ruff's
 * default rules: pycodestyle's E4, E7 and E9, and Pyflakes (F). Prints one `file:line:column:
 * code message` line per finding and exits 1 when there is any; 0 when there is none.
 *
 *   node scripts/lint-python.mjs [file.py ...]
 */
import { readdir, readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);
const { PositionEncoding, Workspace } = require('@astral-sh/ruff-wasm-nodejs');

const ROOT = path.resolve(import.meta.dirname, '..');
const SANDBOX = path.join(ROOT, 'src/sandbox');

/** Ruff's default selection, and the Python the sandbox runs under (Debian 12's 3.11). */
const SETTINGS = { 'target-version': 'py311', lint: { select: ['E4', 'E7', 'E9', 'F'] } };

const files =
  process.argv.length > 2
    ? process.argv.slice(2).map((file) => path.resolve(file))
    : (await readdir(SANDBOX))
        .filter((name) => name.endsWith('.py'))
        .sort()
        .map((name) => path.join(SANDBOX, name));

const workspace = new Workspace(SETTINGS, PositionEncoding.Utf16);
let findings = 0;
for (const file of files) {
  const relative = path.relative(process.cwd(), file);
  const shown = relative.startsWith('..') ? file : relative;
  for (const diagnostic of workspace.check(await readFile(file, 'utf8'))) {
    const { row, column } = diagnostic.start_location;
    console.log(`${shown}:${row}:${column}: ${diagnostic.code ?? 'error'} ${diagnostic.message}`);
    findings += 1;
  }
}
if (findings > 0) {
  console.log(`ruff ${Workspace.version()}: ${findings} finding(s) in ${files.length} file(s)`);
  process.exitCode = 1;
}
