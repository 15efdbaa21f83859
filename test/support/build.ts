import { execFileSync } from 'node:child_process';
import { chmodSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './service.js';

/** Set once the service is built: every e2e project lists this setup, and vitest runs them all in one process. */
const BUILT = Symbol.for('source-fetch.e2e-built');

/** Global setup of the e2e projects: the tests start the built service, so build it once. */
export default function setup(): void {
  const marks = globalThis as { [BUILT]?: true };
  if (marks[BUILT]) return;
  marks[BUILT] = true;
  execFileSync(process.execPath, [`${ROOT}/node_modules/typescript/bin/tsc`, '-p', 'tsconfig.build.json'], {
    cwd: ROOT,
    stdio: 'inherit',
  });
  // As `npm run build` does: the CLI is an executable.
  chmodSync(path.join(ROOT, 'dist/cli/main.js'), 0o755);
}
