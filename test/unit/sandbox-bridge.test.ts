import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONFINE_SCRIPT } from '../../src/sandbox/sandbox.js';

const run = promisify(execFile);

/**
 * The bridge inside a sandbox (confine.py's serve_bridge, which the resident sandbox serves
 * too) is a tool's only way out: if its accept loop ended, every later connect() would sit in the
 * listen queue and the tool would hang until its run's timeout. Driven here in plain Python on
 * loopback, outside any namespace: a listener whose accept() fails once, then a connection for
 * which no thread can be started, then an ordinary one; a Unix socket server stands for the
 * guard and answers `pong <line>`. Each client waits at most 2 s for its answer.
 */
const SCRIPT = String.raw`
import errno, json, os, socket, sys, threading
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import confine

guard_path = sys.argv[2]
guard = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
guard.bind(guard_path)
guard.listen(8)

def answer():
    while True:
        conn, _ = guard.accept()
        line = b''
        while not line.endswith(b'\n'):
            data = conn.recv(100)
            if not data:
                break
            line += data
        try:
            conn.sendall(b'pong ' + line)
        except OSError:
            pass  # the bridge gave this one up
        conn.close()

threading.Thread(target=answer, daemon=True).start()

listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.bind(('127.0.0.1', 0))
listener.listen(8)

class FlakyListener:
    """accept() fails as the kernel may (a connection reset before it was accepted), once."""
    def __init__(self, real):
        self.real, self.failed = real, False
    def accept(self):
        if not self.failed:
            self.failed = True
            raise ConnectionAbortedError(errno.ECONNABORTED, 'Software caused connection abort')
        return self.real.accept()

threading.Thread(target=confine.serve_bridge, args=(FlakyListener(listener), guard_path), daemon=True).start()

# From here on, the first thread anyone starts fails, as when a process is out of threads.
real_start = threading.Thread.start
refused = []
def start(self):
    if not refused:
        refused.append(self)
        raise RuntimeError("can't start new thread")
    return real_start(self)
threading.Thread.start = start

def ask(text):
    with socket.create_connection(listener.getsockname(), timeout=2) as s:
        s.sendall(text.encode() + b'\n')
        got = b''
        try:
            while True:
                data = s.recv(100)
                if not data:
                    break
                got += data
        except socket.timeout:
            return 'no answer'
        return got.decode() or 'closed'

print(json.dumps([ask('one'), ask('two'), ask('three')]))
`;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'sf-bridge-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("the sandbox's bridge to the guard", () => {
  it('keeps forwarding after an accept() that failed and a connection it could not serve', async () => {
    const { stdout } = await run('python3', ['-I', '-S', '-c', SCRIPT, CONFINE_SCRIPT, path.join(dir, 'guard.sock')], {
      timeout: 20_000,
    });
    // The first connection comes after the failed accept() and gets no thread: closed at once,
    // not left waiting. The others are forwarded both ways.
    expect(JSON.parse(stdout)).toEqual(['closed', 'pong two\n', 'pong three\n']);
  });
});
