import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { exceededLimit, MEMORY_EXHAUSTED_STATUS } from '../../src/sandbox/limits.js';

/**
 * How a run that met its data ceiling is told from one that only printed the words of one
 * (src/sandbox/limits.ts exceededLimit): what yt-dlp writes to stderr may carry an origin's words
 * verbatim (an HTTP reason phrase, a site's error message), so a Python fatal error counts as
 * memory only with the abort that ends it, and yt-dlp in the resident sandbox's interpreter ends
 * with the sandbox's own status when a real MemoryError ends it (resident.py ytdlp_status, run
 * here under a real data ceiling).
 */
const SANDBOX = path.resolve('src/sandbox');

/** Python 3.11's own words (Py_FatalError: "Fatal Python error: FUNCTION: MESSAGE"), as it prints them before abort(). */
const FATAL = {
  stackOverflow:
    'Fatal Python error: _Py_CheckRecursiveCall: Cannot recover from stack overflow.\nPython runtime state: initialized\n\nCurrent thread 0x00007f0c (most recent call first):\n  File "/usr/lib/python3/dist-packages/yt_dlp/compat/__init__.py", line 27 in compat_etree_fromstring\n',
  normalizing:
    'Fatal Python error: _PyErr_NormalizeException: Cannot recover from MemoryErrors while normalizing exceptions.\nPython runtime state: initialized\n',
};

describe('exceededLimit: memory', () => {
  it("a Python fatal error of memory or stack is memory when the run aborted (a signal, or confine.py's 134)", () => {
    for (const stderrTail of Object.values(FATAL)) {
      expect(exceededLimit({ exitCode: null, signal: 'SIGABRT', stderrTail })).toBe('memory');
      expect(exceededLimit({ exitCode: 134, signal: null, stderrTail })).toBe('memory');
    }
  });

  it("the same words in a run that did not abort are an origin's, not a ceiling: nothing", () => {
    const injected = [
      `ERROR: [generic] Unable to download webpage: HTTP Error 500: ${FATAL.stackOverflow.split('\n')[0]!}`,
      `ERROR: [example] abc: the site says:\n${FATAL.normalizing}`,
    ];
    for (const stderrTail of injected) {
      expect(exceededLimit({ exitCode: 1, signal: null, stderrTail })).toBeNull();
    }
    // Control: an abort with other words (a C assertion, say) is no memory ceiling either.
    expect(
      exceededLimit({ exitCode: 134, signal: null, stderrTail: 'python3: Objects/obj.c:1: Assertion failed' }),
    ).toBeNull();
  });

  it("the resident sandbox's status for a MemoryError is memory, whatever was printed", () => {
    expect(exceededLimit({ exitCode: MEMORY_EXHAUSTED_STATUS, signal: null, stderrTail: '' })).toBe('memory');
  });

  it('resident.py ends yt-dlp with that status for a real MemoryError, raised or met while handling one, and for no words', () => {
    const script = `
import json, sys
sys.path.insert(0, ${JSON.stringify(SANDBOX)})
import resident

def refused(argv):
    bytearray(300 * 1024 * 1024)

def during(argv):
    try:
        bytearray(300 * 1024 * 1024)
    except MemoryError:
        raise KeyError('while handling it')

def words(argv):
    raise RuntimeError('ERROR: HTTP Error 500: MemoryError')

def ok(argv):
    bytearray(8 * 1024 * 1024)

def ran(main):
    try:
        return resident.ytdlp_status(type('yt_dlp', (), {'main': staticmethod(main)}), [])
    except Exception as err:
        return type(err).__name__

print(json.dumps({name: ran(main) for name, main in [('refused', refused), ('during', during), ('words', words), ('ok', ok)]}))
`;
    const out = execFileSync('prlimit', [`--data=${128 * 1024 * 1024}`, '/usr/bin/python3', '-I', '-S', '-c', script], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    expect(JSON.parse(out.toString())).toEqual({
      refused: MEMORY_EXHAUSTED_STATUS,
      during: MEMORY_EXHAUSTED_STATUS,
      words: 'RuntimeError',
      ok: 0,
    });
  });
});
