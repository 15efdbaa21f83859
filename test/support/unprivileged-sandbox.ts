import { chmod, copyFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { CONFINE_SCRIPT, createSandbox, readHostNetns, type Sandbox } from '../../src/sandbox/sandbox.js';
import { runProcess } from '../../src/tools/process.js';

/**
 * A 'netns' sandbox whose tools run as nobody (65534), through an unprivileged user namespace:
 * unshare started by setpriv. Its files go in `dir`, made readable by nobody: the checkout may
 * not be (a clone in a 0700 folder), so confine.py runs from a copy there. No egress guard.
 */
export async function unprivilegedSandbox(dir: string): Promise<Sandbox> {
  const wrapper = path.join(dir, 'unshare-as-nobody');
  await writeFile(wrapper, '#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups unshare "$@"\n');
  await chmod(wrapper, 0o755);
  const confineScript = path.join(dir, 'confine.py');
  await copyFile(CONFINE_SCRIPT, confineScript);
  await chmod(dir, 0o755);
  return createSandbox({
    mode: 'netns',
    unshare: wrapper,
    python: '/usr/bin/python3',
    confineScript,
    guardSocket: path.join(dir, 'absent.sock'),
    guardAuthority: null,
    hostNetns: readHostNetns(),
    run: runProcess,
  });
}
