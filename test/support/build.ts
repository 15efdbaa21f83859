import { execFileSync } from 'node:child_process';
import { chmodSync } from 'node:fs';
import path from 'node:path';
import { ROOT } from './service.js';

/** Global setup of the e2e project: the tests start the built service, so build it once. */
export default function setup(): void {
  execFileSync(process.execPath, [`${ROOT}/node_modules/typescript/bin/tsc`, '-p', 'tsconfig.build.json'], { cwd: ROOT, stdio: 'inherit' });
  // As `npm run build` does: the CLI (package.json bin) is an executable.
  chmodSync(path.join(ROOT, 'dist/cli/main.js'), 0o755);
}
