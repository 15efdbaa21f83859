"""
The first process inside a tool's sandbox: a new network namespace (and PID namespace) made by
`unshare`, whose only network is its own loopback. Started by src/sandbox/sandbox.ts as

    unshare --user --map-root-user --net --pid --fork --kill-child [--mount] -- \
        python3 -I -S confine.py --host-netns 'net:[4026531840]' [--bridge PORT=GUARD_SOCKET] \
            [--limits data=BYTES,cpu=SECONDS,fsize=BYTES,nproc=COUNT] \
            [--mount-view [--read-only PATH]...] -- TOOL ARGS...

It refuses to start the tool unless it really is in another network namespace than the service
(`--host-netns`) holding nothing but `lo`. With --bridge it brings `lo` up and forwards every TCP
connection to 127.0.0.1:PORT to the egress guard's Unix socket, which is a path on the file system
and so reachable from any network namespace. That bridge is the only thing a tool can connect to:
an option, a protocol or a helper program that tries any other address fails at connect().

With --mount-view (in a mount namespace of its own, unshare --mount) the tool sees a root of its
own (enter_mount_view): the system's programs and libraries, the --read-only paths, its working
folder, and nothing else of the host.

With --limits the tool starts under those resource ceilings (see apply_limits), whatever the tool
or the media it reads does; confine.py itself, which serves the bridge, stays outside them.

As PID 1 of its namespace it starts the tool as its child, reaps whatever the tool leaves behind,
and exits with the tool's status; the kernel then kills everything left in the namespace. Its stdin
is a pipe the service holds open and never writes: end of file there means the service is gone,
and the sandbox ends with it.

Setup failures exit 125 with one line on stderr starting with MARKER; a tool that cannot be
started exits 127 the same way. Standard library only, so that it runs with -I -S.
"""

import ctypes
import errno
import fcntl
import json
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

MARKER = 'source-fetch-sandbox:'
SETUP_FAILED = 125
NOT_FOUND = 127
# yt-dlp run in the sandbox's own interpreter (resident.py) ended by a MemoryError: an allocation
# the run's data ceiling refused, told by the exception itself, never by words a tool printed.
MEMORY_EXHAUSTED = 123

# pivot_root(2), which the C library need not wrap.
PIVOT_ROOT = {'x86_64': 155, 'aarch64': 41}.get(os.uname().machine, 155)
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
CHUNK = 64 * 1024


def fail(code, reason):
    sys.stderr.write(f'{MARKER} {reason}\n')
    sys.stderr.flush()
    os._exit(code)


# The ceilings a tool run may be given, by the name used in --limits and in resident.py's requests.
LIMIT_NAMES = ('data', 'cpu', 'fsize', 'nproc')
# Seconds between the CPU limit's SIGXCPU and the kernel's SIGKILL, for a tool that ignores the first.
CPU_KILL_AFTER_S = 2


def parse_limits(text):
    limits = {}
    for item in text.split(','):
        name, _, value = item.partition('=')
        if name not in LIMIT_NAMES or not value.isdigit() or int(value) <= 0:
            fail(SETUP_FAILED, f'usage: --limits {"=N,".join(LIMIT_NAMES)}=N')
        limits[name] = int(value)
    return limits


def apply_limits(limits):
    """Sets the calling process's ceilings, inherited by everything it starts: its data segment
    (heap and private writable mappings: what a decompression or an allocation can grow), CPU
    seconds (SIGXCPU, then SIGKILL CPU_KILL_AFTER_S later), the size of any file it writes
    (SIGXFSZ, or EFBIG where the signal is ignored), its user's processes and threads in its own
    user namespace (not enforced by the kernel for a real root), and no core dumps."""
    if not limits:
        return
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if 'data' in limits:
        resource.setrlimit(resource.RLIMIT_DATA, (limits['data'], limits['data']))
    if 'cpu' in limits:
        resource.setrlimit(resource.RLIMIT_CPU, (limits['cpu'], limits['cpu'] + CPU_KILL_AFTER_S))
    if 'fsize' in limits:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits['fsize'], limits['fsize']))
    if 'nproc' in limits:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits['nproc'], limits['nproc']))


MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_RELATIME = 0x200000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2
# What any tool needs of the system, read-only: programs and libraries, and the few files of /etc
# they read (certificates, time zones, name service switch, the dynamic linker's cache).
SYSTEM_PATHS = ('/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32')
ETC_PATHS = ('ssl', 'ca-certificates', 'ca-certificates.conf', 'pki', 'localtime', 'timezone', 'nsswitch.conf', 'host.conf',
             'gai.conf', 'passwd', 'group', 'ld.so.cache', 'ld.so.conf', 'ld.so.conf.d', 'alternatives', 'mime.types',
             'python3', 'python3.11', 'python3.12', 'python3.13')
DEVICES = ('null', 'zero', 'random', 'urandom')
TMP_BYTES = 64 * 1024 * 1024

libc = ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f'{what}: {os.strerror(err)}')


def _mount(source, target, fstype, flags, data=None):
    _check(libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), ctypes.c_ulong(flags), data and data.encode()), f'mount {target}')


def _bind(host_path, root, writable):
    """host_path at the same path under root: a symlink copied as a symlink, anything else bound."""
    target = root + host_path
    if os.path.islink(host_path):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.symlink(os.readlink(host_path), target)
        return
    if os.path.isdir(host_path):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, 'a').close()
    _mount(host_path, target, None, MS_BIND | MS_REC)
    if not writable:
        # Inside a user namespace the host mount's noexec and atime flags are locked: a remount
        # must keep them, or it is refused.
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
        current = os.statvfs(target).f_flag
        for statvfs_flag, mount_flag in ((os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME)):
            if current & statvfs_flag:
                flags |= mount_flag
        _mount(None, target, None, flags)


def enter_mount_view(workdir, read_only=(), sockets=()):
    """Makes this process's root a view of its own (it must be alone in a mount namespace it owns):
    the system's programs and libraries and `read_only` paths (the tools' own folders) read-only,
    `workdir` (the job's folder) read-write, `sockets` (the egress guard's) at their paths, a fresh
    /tmp, /dev with null, zero and the random devices, and a /proc of its own PID namespace where
    the kernel allows one. Nothing else of the host: no data folder, database, secrets, other
    jobs' folders, nor the service's /proc entries. Paths keep their host names."""
    _mount(None, '/', None, MS_REC | MS_PRIVATE)
    root = '/tmp/.source-fetch-view'
    os.makedirs(root, exist_ok=True)
    _mount('tmpfs', root, 'tmpfs', MS_NOSUID | MS_NODEV, 'mode=0755')
    for path in SYSTEM_PATHS:
        if os.path.lexists(path):
            _bind(path, root, writable=False)
    for name in ETC_PATHS:
        if os.path.lexists(f'/etc/{name}'):
            _bind(f'/etc/{name}', root, writable=False)
    os.makedirs(root + '/dev', exist_ok=True)
    for name in DEVICES:
        _bind(f'/dev/{name}', root, writable=True)
    os.makedirs(root + '/tmp', mode=0o1777, exist_ok=True)
    _mount('tmpfs', root + '/tmp', 'tmpfs', MS_NOSUID | MS_NODEV, f'mode=1777,size={TMP_BYTES}')
    os.makedirs(root + '/proc', exist_ok=True)
    try:
        _mount('proc', root + '/proc', 'proc', MS_NOSUID | MS_NODEV)
    except OSError:
        # A container that masks parts of its /proc forbids a fresh one: the tools go without.
        pass
    # After /tmp's own tmpfs, which would hide what is bound beneath it (a data folder in /tmp).
    for path in read_only:
        if os.path.exists(path):
            _bind(os.path.realpath(path), root, writable=False)
    for path in sockets:
        if os.path.exists(path):
            _bind(path, root, writable=True)
    real_workdir = os.path.realpath(workdir)
    _bind(real_workdir, root, writable=True)
    os.makedirs(root + '/.old-root', exist_ok=True)
    _check(libc.syscall(PIVOT_ROOT, root.encode(), (root + '/.old-root').encode()), 'pivot_root')
    os.chdir('/')
    _check(libc.umount2(b'/.old-root', MNT_DETACH), 'umount the old root')
    os.rmdir('/.old-root')
    _mount(None, '/', None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(real_workdir)


def parse_args(argv):
    host_netns = None
    bridge = None
    check = False
    lifeline = False
    limits = {}
    view = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == '--':
            return host_netns, bridge, check, lifeline, limits, view, argv[i + 1:]
        if arg == '--host-netns' and i + 1 < len(argv):
            host_netns = argv[i + 1]
            i += 2
        elif arg == '--bridge' and i + 1 < len(argv):
            port, _, path = argv[i + 1].partition('=')
            if not port.isdigit() or not path:
                fail(SETUP_FAILED, 'usage: --bridge PORT=SOCKET_PATH')
            bridge = (int(port), path)
            i += 2
        elif arg == '--limits' and i + 1 < len(argv):
            limits = parse_limits(argv[i + 1])
            i += 2
        elif arg == '--mount-view':
            view = view or []
            i += 1
        elif arg == '--read-only' and i + 1 < len(argv):
            view = (view or []) + [argv[i + 1]]
            i += 2
        elif arg == '--check':
            check = True
            i += 1
        elif arg == '--lifeline':
            lifeline = True
            i += 1
        else:
            fail(SETUP_FAILED, f'unknown argument {arg!r}')
    return host_netns, bridge, check, lifeline, limits, view, []


def interfaces():
    return sorted(name for _, name in socket.if_nameindex())


def assert_confined(host_netns):
    own = os.readlink('/proc/self/ns/net')
    if host_netns is None or own == host_netns:
        fail(SETUP_FAILED, 'not in a network namespace of its own')
    found = interfaces()
    if found != ['lo']:
        fail(SETUP_FAILED, f'the network namespace has interfaces besides lo: {",".join(found)}')
    return own


def bring_loopback_up():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack('16sH', b'lo', 0)
        flags = struct.unpack('16sH', fcntl.ioctl(s, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack('16sH', b'lo', flags | IFF_UP))


def pump(source, sink):
    """Copies one direction until end of file, then half-closes the other side."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def serve_bridge(listener, guard_path):
    """Forwards every connection to the guard for as long as the sandbox lives. A connection that
    fails (reset before it was accepted, no descriptor or thread to be had) costs that connection
    alone: were this loop to end, every later connect() would wait in the listen queue, and the
    tool with it, until its run's timeout."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError as err:
            # Out of descriptors (EMFILE and the like) lasts until a connection closes: no spinning.
            if err.errno not in (errno.ECONNABORTED, errno.EINTR):
                time.sleep(0.05)
            continue
        try:
            forward(client, guard_path)
        except OSError:
            # Not even a socket for the guard.
            client.close()


def forward(client, guard_path):
    """Pumps one connection both ways through the guard's socket, one thread a direction; the tool
    sees the connection close if that cannot be set up (the guard gone, no thread to be had)."""
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    done = threading.Barrier(2, action=lambda: (client.close(), upstream.close()))

    def run(a, b):
        pump(a, b)
        try:
            done.wait()
        except threading.BrokenBarrierError:
            pass

    try:
        upstream.connect(guard_path)
        threading.Thread(target=run, args=(client, upstream), daemon=True).start()
        threading.Thread(target=run, args=(upstream, client), daemon=True).start()
    except (OSError, RuntimeError):
        # A direction already started wakes at the shutdown (a close alone would not end its
        # recv) and leaves the barrier at once.
        done.abort()
        for sock in (client, upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def open_bridge(port):
    """Loopback up and the bridge's port bound; serve_bridge() then forwards what connects."""
    bring_loopback_up()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(('127.0.0.1', port))
    listener.listen(64)
    return listener


def start_bridge(port, guard_path):
    listener = open_bridge(port)
    threading.Thread(target=serve_bridge, args=(listener, guard_path), daemon=True).start()


def check_bridge(port):
    """One request through the bridge: the guard answers 407 to a request without credentials."""
    with socket.create_connection(('127.0.0.1', port), timeout=5) as s:
        s.sendall(b'GET http://sandbox-check.invalid/ HTTP/1.1\r\nHost: sandbox-check.invalid\r\nConnection: close\r\n\r\n')
        head = b''
        while b'\r\n' not in head and len(head) < 1024:
            data = s.recv(1024)
            if not data:
                break
            head += data
    return head.split(b'\r\n', 1)[0].decode('latin-1', 'replace')


def watch_lifeline(child):
    """The service holds our stdin open; end of file means it is gone, so the sandbox ends."""
    def run():
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        try:
            child.kill()
        except OSError:
            pass
        os._exit(SETUP_FAILED)
    threading.Thread(target=run, daemon=True).start()


def main():
    host_netns, bridge, check, lifeline, limits, view, command = parse_args(sys.argv[1:])
    own = assert_confined(host_netns)
    if bridge is not None:
        start_bridge(*bridge)
    if view is not None:
        try:
            enter_mount_view(os.getcwd(), view, [bridge[1]] if bridge else [])
        except OSError as err:
            fail(SETUP_FAILED, f'cannot make the mount view: {err.strerror or err}')

    if check:
        report = {'netns': own, 'interfaces': interfaces(), 'root': sorted(os.listdir('/'))}
        if bridge is not None:
            try:
                report['bridge'] = check_bridge(bridge[0])
            except OSError as err:
                report['bridge'] = f'error: {err.strerror or err}'
        print(json.dumps(report))
        return 0

    if not command:
        fail(SETUP_FAILED, 'no command given')
    return supervise(command, lifeline, limits)


def supervise(command, lifeline, limits):
    """Starts the tool as our child under `limits`, passes signals on to it, reaps every orphan it
    leaves behind, and returns its status as an exit code (128 + the signal that killed it)."""
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, close_fds=True, preexec_fn=lambda: apply_limits(limits))
    except OSError as err:
        fail(NOT_FOUND if err.errno in (errno.ENOENT, errno.EACCES) else SETUP_FAILED, f'cannot start {command[0]}: {err.strerror}')
    except subprocess.SubprocessError as err:
        fail(SETUP_FAILED, f'cannot set the limits of {command[0]}: {err}')

    # PID 1 ignores signals it has no handler for: pass the usual ones on to the tool.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda s, _frame: child.send_signal(s))
    if lifeline:
        watch_lifeline(child)

    status = None
    while status is None:
        # Reap every orphan the tool leaves behind, keep the tool's own status.
        try:
            pid, raw = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == child.pid:
            status = raw
    if status is None:
        return SETUP_FAILED
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == '__main__':
    sys.exit(main())
