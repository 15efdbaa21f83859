import fs from 'node:fs/promises';

/**
 * Whether yt-dlp at a path can be kept warm in a resident Python process (src/sandbox/resident.ts):
 * only when it is a Python launcher script, as Debian's package and pip install (`#!/usr/bin/python3`
 * … `from yt_dlp import main`), whose interpreter can import the same yt_dlp. A standalone build
 * (PyInstaller binary, zipapp), a shell wrapper or anything else is run as a process per run.
 */
export type LauncherInspection = { importable: true; interpreter: string[] } | { importable: false; reason: string };

/** A launcher script is a few lines; anything larger is a build with yt-dlp inside. */
const MAX_LAUNCHER_BYTES = 16 * 1024;
const PYTHON = /(?:^|\/)python[0-9.]*$/;
const IMPORTS_MAIN = /^\s*from yt_dlp import main\s*$/m;

export async function inspectYtDlpLauncher(file: string): Promise<LauncherInspection> {
  let head: Buffer;
  try {
    const handle = await fs.open(file, 'r');
    try {
      const buf = Buffer.alloc(MAX_LAUNCHER_BYTES + 1);
      const { bytesRead } = await handle.read(buf, 0, buf.length, 0);
      head = buf.subarray(0, bytesRead);
    } finally {
      await handle.close();
    }
  } catch (err) {
    return { importable: false, reason: `cannot read it (${(err as NodeJS.ErrnoException).code ?? 'error'})` };
  }
  if (head.length > MAX_LAUNCHER_BYTES || head.includes(0))
    return { importable: false, reason: 'not a launcher script (a standalone build?)' };
  const text = head.toString('utf8');
  const shebang = /^#!\s*(\S+)(?:[ \t]+(.*?))?[ \t]*$/m.exec(text.split('\n', 1)[0]!);
  if (!shebang) return { importable: false, reason: 'not a script with an interpreter line' };
  // As the kernel runs it: the interpreter, then everything after it as one argument.
  const interpreter = [shebang[1]!, ...(shebang[2] ? [shebang[2]] : [])];
  const isPython =
    PYTHON.test(interpreter[0]!) || (/(?:^|\/)env$/.test(interpreter[0]!) && PYTHON.test(interpreter[1] ?? ''));
  if (!isPython) return { importable: false, reason: `its interpreter is not Python (${interpreter.join(' ')})` };
  if (!IMPORTS_MAIN.test(text))
    return { importable: false, reason: 'a Python script, but not the yt-dlp launcher (from yt_dlp import main)' };
  return { importable: true, interpreter };
}
