import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inspectYtDlpLauncher } from '../../src/tools/ytdlp-launcher.js';

describe('inspectYtDlpLauncher: whether yt-dlp can be imported once and kept warm', () => {
  let dir: string;
  const file = async (name: string, text: string | Buffer) => {
    const path = join(dir, name);
    await writeFile(path, text);
    await chmod(path, 0o755);
    return path;
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sf-launcher-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("takes Debian's yt-dlp, with its interpreter", async () => {
    expect(await inspectYtDlpLauncher('/usr/bin/yt-dlp')).toEqual({
      importable: true,
      interpreter: ['/usr/bin/python3'],
    });
  });

  it("takes pip's launcher and one run through env, the interpreter as the kernel would run it", async () => {
    const pip = await file(
      'pip-yt-dlp',
      "#!/opt/venv/bin/python3.11\n# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom yt_dlp import main\nif __name__ == '__main__':\n    sys.exit(main())\n",
    );
    expect(await inspectYtDlpLauncher(pip)).toEqual({ importable: true, interpreter: ['/opt/venv/bin/python3.11'] });
    const env = await file('env-yt-dlp', '#!/usr/bin/env python3\nfrom yt_dlp import main\nmain()\n');
    expect(await inspectYtDlpLauncher(env)).toEqual({ importable: true, interpreter: ['/usr/bin/env', 'python3'] });
  });

  it.each([
    ['a shell wrapper', '#!/bin/sh\nexec /usr/bin/yt-dlp "$@"\n', /interpreter is not Python/],
    ['a Python script that is something else', '#!/usr/bin/python3\nprint("not yt-dlp")\n', /not the yt-dlp launcher/],
    ['a file without an interpreter line', 'from yt_dlp import main\n', /not a script/],
  ])('runs %s per run instead', async (_name, text, reason) => {
    const inspection = await inspectYtDlpLauncher(await file(`other-${Math.random()}`, text));
    expect(inspection).toEqual({ importable: false, reason: expect.stringMatching(reason) });
  });

  it('runs a standalone build per run (a binary; a zipapp, larger than any launcher)', async () => {
    expect(await inspectYtDlpLauncher('/bin/true')).toEqual({
      importable: false,
      reason: expect.stringMatching(/standalone/),
    });
    const zipapp = await file(
      'zipapp',
      Buffer.concat([Buffer.from('#!/usr/bin/env python3\n'), Buffer.alloc(64 * 1024, 0x50)]),
    );
    expect(await inspectYtDlpLauncher(zipapp)).toMatchObject({ importable: false });
  });

  it('says when the file cannot be read', async () => {
    expect(await inspectYtDlpLauncher(join(dir, 'absent'))).toEqual({
      importable: false,
      reason: 'cannot read it (ENOENT)',
    });
  });
});
