"""
The resident sandbox: one long-lived process per service that forks a confined child for each tool
run, instead of starting unshare, Python and confine.py for every run; and with yt-dlp imported
once, so that yt-dlp runs in that child without starting Python and importing yt-dlp each time
(twice a job). Started by src/sandbox/resident.ts inside a sandbox of its own, with no network:

    unshare --user --map-root-user --net --pid --fork --kill-child -- \
        python3 -I -S confine.py --host-netns NS --lifeline -- \
        PYTHON resident.py --listen SOCKET --host-netns NS [--bridge PORT=GUARD_SOCKET] \
            [--ytdlp LAUNCHER --warm-up RUN] --title-room '      ...'

With --ytdlp it imports yt-dlp as LAUNCHER (a Python launcher script, `from yt_dlp import main`,
run by PYTHON, its interpreter) would, and warms it up with no job data: RUN, JSON
{"argv": [...], "info": {...}, "info_file": NAME} (src/tools/ytdlp-args.ts, buildWarmUpRun), is
a job's run simulated on made-up media (`info`, written to the file it names), made once here.
Work that each run's yt-dlp would repeat whatever its job (its CA certificates read into a TLS
context, its choice and list of extractors) is done here and shared with the runs (share_with_runs).
It prints one JSON line, {"ready": true, "ytdlp": VERSION or null, "warm_up": "done", how it
failed, or null, "shared": [WHAT, ...]} or {"ready": false, "reason": ...}, then accepts
connections on SOCKET. It never accepts or reads them: each connection is one run, served by a
child forked before it came, a spare (forked twice, so that confine.py, PID 1 of this sandbox,
reaps it with a wait, which adds the run's CPU time to the service's process tree; a child reaped
by the kernel, with SIGCHLD ignored, would add it nowhere). Up to SPARE_LEADERS spares wait in
accept(), so that a run does not wait for the forks of this large process; each tells this
process what took it, and this process forks new ones after any run but a download has taken one
(and at once when none is left); a spare's command line is `sandbox spare SOCKET`.
Nothing of any run ever enters this process, whose memory every later run inherits.

A run, in the forked child (the run's leader):
  1. before its connection: a session of its own, so that the service can kill the run's process
     group; a user, mount, network and PID namespace of its own (its own credentials, nothing but
     its own loopback), checked;
  2. connected: it sends its PID as the service sees it (frame P) and reads the request, one JSON
     line:
     {"command", "argv", "cwd", "network": "guard" or "none", "limits": {"data": BYTES, ...},
      "view": null or {"read_only": [PATH, ...]}};
     with "view" a root of its own (confine.enter_mount_view: the cwd read-write, nothing else of
     the host's data), and for "guard" the bridge 127.0.0.1:PORT → GUARD_SOCKET, as confine.py
     gives a tool it starts;
  3. forks the run's PID 1, which serves the bridge, and either runs yt_dlp.main(argv) itself
     (when command is the imported LAUNCHER; a MemoryError that ends it is the status
     confine.MEMORY_EXHAUSTED) or starts command as confine.py does (passing
     signals on, reaping orphans): stdin /dev/null, stdout and stderr on pipes, cwd; the tool, or
     yt-dlp in PID 1, under the request's limits (confine.apply_limits);
  4. relays stdout (frame O) and stderr (frame E), then the exit status (frame X, JSON). A setup
     failure is frame F with the reason. End of file on the connection kills the run.
Frames: one type byte, a 4-byte big-endian length, the payload. A run's processes name the
run's cwd (the job's folder) in their command line, as a spawned tool's arguments would.
"""

import ctypes
import gc
import importlib
import inspect
import json
import os
import select
import shutil
import signal
import socket
import ssl
import struct
import sys
import tempfile
import threading
import traceback

# Beside this file; under -I (no yt-dlp to import) the script's folder is not on sys.path.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import confine  # noqa: E402

# yt-dlp is imported as its launcher script would see it: its own folder first, not this one.
sys.path = [entry for entry in sys.path if entry != HERE]

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
MAX_REQUEST_BYTES = 1 << 20
# Run leaders forked ahead of their connections: for a job's download and its converter.
SPARE_LEADERS = 2
# What a spare tells the resident once it has a connection: whether its run is a download.
TAKEN_BY_DOWNLOAD = b'd'
TAKEN = b't'
CHUNK = 64 * 1024

libc = ctypes.CDLL(None, use_errno=True)


def parse_args(argv):
    opts = {'bridge': None, 'ytdlp': None, 'warm_up': None, 'title_room': 0}
    for i in range(0, len(argv), 2):
        arg, value = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        if value is None:
            raise SystemExit(f'resident.py: {arg} needs a value')
        if arg == '--listen':
            opts['listen'] = value
        elif arg == '--host-netns':
            opts['host_netns'] = value
        elif arg == '--bridge':
            port, _, path = value.partition('=')
            opts['bridge'] = (int(port), path)
        elif arg == '--ytdlp':
            opts['ytdlp'] = value
        elif arg == '--warm-up':
            opts['warm_up'] = json.loads(value)
        elif arg == '--title-room':
            opts['title_room'] = len(value)
        else:
            raise SystemExit(f'resident.py: unknown argument {arg!r}')
    for required in ('listen', 'host_netns'):
        if required not in opts:
            raise SystemExit(f'resident.py: --{required.replace("_", "-")} is required')
    return opts


def report(**fields):
    sys.stdout.write(json.dumps(fields) + '\n')
    sys.stdout.flush()


def import_ytdlp(launcher):
    """Imports yt_dlp as the launcher script would: its folder first on sys.path, like a script's."""
    sys.path.insert(0, os.path.dirname(launcher))
    import yt_dlp
    return yt_dlp


def warm_up(yt_dlp):
    """Work every run would repeat, done once here: no job data, no network."""
    from yt_dlp.extractor import gen_extractor_classes
    from yt_dlp.utils import unified_timestamp
    for ie in gen_extractor_classes():
        # Compiles and caches each extractor's _VALID_URL on its class.
        ie.suitable('http://warm-up.invalid/')
    import yt_dlp.extractor.generic  # noqa: F401 (the extractor of direct media links)
    # yt-dlp reads Last-Modified and the like with strptime, whose formats compile on first use.
    unified_timestamp('Sat, 01 Jan 2000 00:00:00 GMT')
    yt_dlp.parse_options(['--ignore-config', '--skip-download', 'http://warm-up.invalid/'])
    # Plugins on sys.path, loaded here, where their folder can be seen: Debian's 2023.03.04 loads
    # them when its extractors are imported (above), a current yt-dlp only when a run starts, in
    # the run's mount view, which does not show that folder; a run's own loading, finding nothing
    # there, leaves these in place.
    try:
        from yt_dlp.plugins import load_all_plugins
    except ImportError:
        return
    load_all_plugins()


def share_with_runs(yt_dlp):
    """Work every run's YoutubeDL repeats whatever its job, made once here: each run, a fork, is
    handed this process's result, as the same call would have made it in the run. Returns the
    names of what is shared; a yt-dlp without the function a share wraps, or a share that fails
    here, leaves that work to each run, as before."""
    shared = []
    # Reading the CA bundle into a context: 40 ms for Debian's, http URLs included. The choice of
    # extractors, made with list scans over 1,800 names: 20-50 ms. The list of extractors each
    # YoutubeDL makes from that choice: 10 ms in a run, 3 ms replayed.
    shares = (('tls context', share_tls_contexts), ('extractor choice', share_extractor_choice),
              ('extractor list', share_extractor_list))
    for name, share in shares:
        try:
            if share(yt_dlp):
                shared.append(name)
        except Exception:
            pass
    return shared


def share_extractor_list(yt_dlp):
    """YoutubeDL.add_default_info_extractors (a pure function of its allowed_extractors, once
    plugins are loaded), its list of extractors kept from its first call here, in the warm-up
    run, and replayed into each later YoutubeDL: the classes as they were, a new instance of each
    instance (UnsupportedURLIE), bound to that YoutubeDL as add_info_extractor binds it."""
    youtube_dl = getattr(yt_dlp, 'YoutubeDL', None)
    original = getattr(youtube_dl, 'add_default_info_extractors', None)
    if original is None:
        return False
    lists = {}

    def add_default_info_extractors(self):
        allowed = self.params.get('allowed_extractors', ['default'])
        key = tuple(allowed) if isinstance(allowed, (list, tuple)) else None
        if key is None or not hashable(key) or getattr(self, '_ies', None) != {}:
            return original(self)
        if key not in lists:
            original(self)
            # Classes, and the class of each instance (not the instance, bound to this YoutubeDL).
            lists[key] = [(ie_key, ie, True) if isinstance(ie, type) else (ie_key, type(ie), False)
                          for ie_key, ie in self._ies.items()]
            return None
        for ie_key, ie, is_class in lists[key]:
            if is_class:
                self._ies[ie_key] = ie
            else:
                self.add_info_extractor(ie())
        self.write_debug(f'Loaded {len(lists[key])} extractors')
        return None
    youtube_dl.add_default_info_extractors = add_default_info_extractors
    return True


def share_extractor_choice(yt_dlp):
    original = getattr(yt_dlp.utils, 'orderedSet_from_options', None)
    if original is None:
        return False
    replace_in_ytdlp(original, remembered_choice(original))
    return True


def replace_in_ytdlp(original, replacement):
    """Every name for `original` in yt-dlp's modules, imported so far, now names `replacement`."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == 'yt_dlp' or name.startswith('yt_dlp.')):
            continue
        for attribute, value in list(vars(module).items()):
            if value is original:
                setattr(module, attribute, replacement)


def remembered_choice(choose):
    """yt-dlp's orderedSet_from_options (a pure function of its arguments), its results kept."""
    results = {}

    def choose_once(options, alias_dict, *, use_regex=False, start=None):
        key = (tuple(options), tuple((name, tuple(values) if isinstance(values, list) else values)
                                     for name, values in alias_dict.items()), use_regex, tuple(start or ()))
        if not hashable(key):
            return choose(options, alias_dict, use_regex=use_regex, start=start)
        if key not in results:
            results[key] = choose(options, alias_dict, use_regex=use_regex, start=start)
        # The caller's own list: it may change it.
        return list(results[key])
    return choose_once


def hashable(key):
    try:
        hash(key)
    except TypeError:
        return False
    return True


def share_tls_contexts(yt_dlp):
    """One SSLContext for each set of arguments and state of the CA files, made here for a default
    run. Returns whether this yt-dlp's maker of contexts was found: make_ssl_context (2023.10 and
    later) or make_HTTPS_handler (before)."""
    contexts = {}
    try:
        make_context = getattr(importlib.import_module('yt_dlp.networking._helper'), 'make_ssl_context', None)
    except ImportError:
        make_context = None
    make_handler = getattr(yt_dlp.utils, 'make_HTTPS_handler', None)
    handler_class = getattr(yt_dlp.utils, 'YoutubeDLHTTPSHandler', None)
    if make_context is not None:
        signature = inspect.signature(make_context)

        def shared_context(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            key = (tuple(bound.arguments.items()), ca_files_state())
            if bound.arguments.get('client_certificate') or not hashable(key):
                return make_context(*args, **kwargs)
            if key not in contexts:
                contexts[key] = make_context(*args, **kwargs)
            return contexts[key]
        replace_in_ytdlp(make_context, shared_context)
        shared_context()
        return True
    if make_handler is not None and handler_class is not None:
        def shared_handler(params, **kwargs):
            if params.get('client_certificate'):
                return make_handler(params, **kwargs)
            key = (bool(params.get('nocheckcertificate')), bool(params.get('legacyserverconnect')),
                   'no-certifi' in (params.get('compat_opts') or []), ca_files_state())
            if key in contexts:
                return handler_class(params, context=contexts[key], **kwargs)
            handler = make_handler(params, **kwargs)
            if getattr(handler, '_context', None) is not None:
                contexts[key] = handler._context
            return handler
        replace_in_ytdlp(make_handler, shared_handler)
        shared_handler({})
        return True
    return False


def ca_files_state():
    """Where a context's CA certificates are read from, as those files are now (a replaced bundle
    makes a new context), and the TLS key log file a context opens."""
    paths = ssl.get_default_verify_paths()
    files = [paths.cafile, paths.capath]
    try:
        import certifi
        files.append(certifi.where())
    except ImportError:
        pass
    state = []
    for path in files:
        try:
            found = os.stat(path)
            state.append((path, found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns))
        except (OSError, TypeError):
            state.append((path, None))
    return (tuple(state), os.environ.get('SSLKEYLOGFILE'))


def dry_run(yt_dlp, run):
    """A job's run, simulated on made-up media (RUN in the module's docstring), in a folder of its
    own, its output discarded: what every run would compile again at its start (its format
    selector, its templates) is compiled once, here. Returns 'done', or how it failed: a failure
    only leaves that work to the runs."""
    outcome = 'done'
    with open('/proc/self/comm', 'rb') as f:
        name = f.read().rstrip(b'\n')
    cwd = os.getcwd()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, run['info_file']), 'w') as f:
            json.dump(run['info'], f)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.chdir(folder)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            status = ytdlp_status(yt_dlp, run['argv'])
            if status != 0:
                outcome = f'exit {status}'
        except BaseException as err:
            # Nothing of a warm-up may end the resident.
            outcome = f'{type(err).__name__}: {err}'[:200]
        finally:
            flush_stdio()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (devnull, *saved):
                os.close(fd)
            os.chdir(cwd)
    # yt-dlp names its process "yt-dlp" (prctl PR_SET_NAME): the resident keeps its own name.
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
    # Every run is a fork of this process: a thread left running would be a hazard in each.
    if threading.active_count() > 1:
        return f'{outcome}, but it left {threading.active_count() - 1} threads running'
    return outcome


def set_title(room, words):
    """Shows `words` as this process's command line (ps, /proc/PID/cmdline), in the room reserved in argv."""
    if room == 0:
        return
    try:
        with open('/proc/self/stat', 'rb') as f:
            fields = f.read().rsplit(b')', 1)[1].split()
        # Fields 48 and 49 (arg_start, arg_end), counted from 1; the list starts at field 3.
        start, end = int(fields[45]), int(fields[46])
        title = b'\0'.join(os.fsencode(w) for w in words)[:end - start - 1]
        with open('/proc/self/mem', 'r+b', buffering=0) as mem:
            mem.seek(start)
            mem.write(title.ljust(end - start, b'\0'))
    except OSError:
        pass


def send(conn, kind, payload):
    conn.sendall(struct.pack('>cI', kind, len(payload)) + payload)


def read_request(conn):
    data = b''
    while b'\n' not in data:
        chunk = conn.recv(CHUNK)
        if not chunk:
            raise EOFError('the service closed the connection before the request')
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise ValueError('request too long')
    request = json.loads(data.split(b'\n', 1)[0])
    command, argv, cwd, network = request['command'], request['argv'], request['cwd'], request['network']
    limits = request.get('limits', {})
    view = request.get('view')
    if not (view is None or (isinstance(view, dict) and isinstance(view.get('read_only'), list) and all(isinstance(p, str) for p in view['read_only']))):
        raise ValueError('malformed view')
    if not (isinstance(command, str) and isinstance(argv, list) and all(isinstance(a, str) for a in argv) and isinstance(cwd, str) and network in ('guard', 'none')):
        raise ValueError('malformed request')
    if not (isinstance(limits, dict) and all(name in confine.LIMIT_NAMES and type(value) is int and value > 0 for name, value in limits.items())):
        raise ValueError('malformed limits')
    return command, argv, cwd, network, limits, view


def unshare(flags):
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def enter_own_namespaces():
    """A user namespace (its root is this sandbox's root, the service's user outside), a mount and
    a network namespace and, for the next child, a PID namespace, all of the run's own."""
    unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID)
    for name, text in (('setgroups', 'deny'), ('uid_map', '0 0 1'), ('gid_map', '0 0 1')):
        with open(f'/proc/self/{name}', 'w') as f:
            f.write(text)


def check_confined(host_netns, resident_netns):
    own = os.readlink('/proc/self/ns/net')
    if own in (host_netns, resident_netns):
        raise OSError('not in a network namespace of its own')
    found = confine.interfaces()
    if found != ['lo']:
        raise OSError(f'the network namespace has interfaces besides lo: {",".join(found)}')


def is_launcher(command, launcher_path):
    found = shutil.which(command)
    return launcher_path is not None and found is not None and os.path.realpath(found) == launcher_path


def run_pid1(yt_dlp, command, argv, cwd, limits, view, out_w, err_w, bridge):
    """The run's PID 1: the bridge's threads (its leader may not start threads: its children's
    PID namespace is not its own), and the tool. Never returns."""
    code = confine.SETUP_FAILED
    try:
        # Dies with the leader (PID 1 of a namespace ignores what it has no handler for).
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (devnull, out_w, err_w):
            os.close(fd)
        os.chdir(cwd)
        if view is not None:
            # The bridge's guard socket stays reachable at its path; yt-dlp's own files, imported
            # here on demand, too.
            packages = [os.path.dirname(os.path.dirname(yt_dlp.__file__))] if yt_dlp is not None else []
            confine.enter_mount_view(cwd, [*view['read_only'], *packages], [bridge[1]] if bridge is not None else [])
        if bridge is not None:
            threading.Thread(target=confine.serve_bridge, args=bridge, daemon=True).start()
        if yt_dlp is None:
            code = confine.supervise([command, *argv], False, limits)
        else:
            # The bridge's threads run in this process too: they count against the run's limits.
            confine.apply_limits(limits)
            code = run_ytdlp(yt_dlp, argv)
    except BaseException:
        traceback.print_exc()
    finally:
        flush_stdio()
        os._exit(code)


def flush_stdio():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def run_ytdlp(yt_dlp, argv):
    """yt-dlp's main() as a run's PID 1 runs it: ended by SIGTERM, SIGINT or SIGHUP; its status returned."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda s, _frame: os._exit(128 + s))
    sys.argv = ['yt-dlp', *argv]
    return ytdlp_status(yt_dlp, argv)


def ytdlp_status(yt_dlp, argv):
    """yt-dlp's main(), returning the status the interpreter would exit with, but for a MemoryError
    that ends it (raised, or met while handling another exception): confine.MEMORY_EXHAUSTED, with
    the traceback the interpreter would print."""
    try:
        yt_dlp.main(argv)
    except SystemExit as end:
        if end.code is None:
            return 0
        if isinstance(end.code, int):
            return end.code
        sys.stderr.write(f'{end.code}\n')
        return 1
    except BaseException as err:
        if not out_of_memory(err):
            raise
        try:
            traceback.print_exc()
        except MemoryError:
            pass
        return confine.MEMORY_EXHAUSTED
    return 0


def out_of_memory(err):
    """Whether a MemoryError is among an exception and those it was raised from or while handling."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, MemoryError):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def relay(conn, pid1, out_r, err_r):
    """Output to the service until the run's pipes close, then its status. A closed connection kills the run."""
    kinds = {out_r: b'O', err_r: b'E'}
    open_fds = [out_r, err_r]
    while open_fds:
        readable, _, _ = select.select([*open_fds, conn], [], [])
        # The service sends nothing after the request: readable with nothing to read means it is gone.
        if conn in readable and not conn.recv(CHUNK):
            os.kill(pid1, signal.SIGKILL)
            return 1
        for fd in readable:
            if fd is conn:
                continue
            data = os.read(fd, CHUNK)
            if data:
                send(conn, kinds[fd], data)
            else:
                open_fds.remove(fd)
                os.close(fd)
    _, status, usage = os.wait4(pid1, 0)
    if os.WIFSIGNALED(status):
        outcome = {'code': None, 'signal': signal.Signals(os.WTERMSIG(status)).name}
    else:
        outcome = {'code': os.WEXITSTATUS(status), 'signal': None}
    # CPU of the run's processes (PID 1 and every child it reaped), for the service's profile.
    outcome['cpu_s'] = round(usage.ru_utime + usage.ru_stime, 3)
    send(conn, b'X', json.dumps(outcome).encode())
    return 0


def serve_spare(yt_dlp, opts, listener, events_w, resident_netns):
    """A run's leader made before its connection: it becomes one (step 1 of the module's
    docstring), accepts the next connection, tells the resident what took it (taken), and serves
    that run. Never returns."""
    code = 1
    told = False

    def taken(by_download):
        nonlocal told
        if not told:
            told = True
            os.write(events_w, TAKEN_BY_DOWNLOAD if by_download else TAKEN)
    try:
        set_title(opts['title_room'], ['sandbox', 'spare', opts['listen']])
        os.setsid()
        # Its memory will hold the run's request and, for yt-dlp, the job's credentials: other
        # runs (the same user, in user namespaces of their own) may not read it through /proc.
        libc.prctl(PR_SET_DUMPABLE, 0)
        # The resident's stdio is its report to the service: a run writes to its connection only.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        setup_failure = None
        try:
            enter_own_namespaces()
            check_confined(opts['host_netns'], resident_netns)
        except OSError as err:
            # Told to the run that comes.
            setup_failure = f'{err.strerror or err}'
        conn, _ = listener.accept()
        listener.close()
        code = serve_run(yt_dlp, opts, conn, setup_failure, events_w, taken)
    except BaseException:
        pass
    try:
        taken(False)
    finally:
        os._exit(code)


def serve_run(yt_dlp, opts, conn, setup_failure, events_w, taken):
    """The run's leader, connected (see the module's docstring), in its namespaces unless
    `setup_failure` says why not; `taken` is told whether the run is a download (the imported
    yt-dlp). Returns its exit status once the run has ended."""
    try:
        # /proc is the service's: its "self" is this process as the service sees it.
        send(conn, b'P', os.readlink('/proc/self').encode())
        command, argv, cwd, network, limits, view = read_request(conn)
        in_process = yt_dlp if is_launcher(command, opts['ytdlp']) else None
        taken(in_process is not None)
        set_title(opts['title_room'], ['sandbox', cwd])
        failure = setup_failure
        listener = None
        if failure is None and network == 'guard':
            if opts['bridge'] is None:
                failure = 'no egress guard to bridge to'
            else:
                try:
                    listener = confine.open_bridge(opts['bridge'][0])
                except OSError as err:
                    failure = f'{err.strerror or err}'
        if failure is not None:
            send(conn, b'F', failure.encode())
            return confine.SETUP_FAILED
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid1 = os.fork()
        if pid1 == 0:
            conn.close()
            for fd in (out_r, err_r, events_w):
                os.close(fd)
            set_title(opts['title_room'], ['yt-dlp' if in_process else 'sandbox', cwd])
            run_pid1(in_process, command, argv, cwd, limits, view, out_w, err_w, None if listener is None else (listener, opts['bridge'][1]))
        os.close(out_w)
        os.close(err_w)
        if listener is not None:
            listener.close()
        return relay(conn, pid1, out_r, err_r)
    except BaseException:
        # The connection is gone (the run was given up): nothing more to tell anyone.
        return 1


def serve(yt_dlp, opts, warmed, shared):
    resident_netns = os.readlink('/proc/self/ns/net')
    if os.path.exists(opts['listen']):
        os.unlink(opts['listen'])
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(opts['listen'])
    listener.listen(64)
    # Children inherit these objects and never collect them: no copy-on-write for the collector.
    gc.freeze()
    report(ready=True, ytdlp=yt_dlp.version.__version__ if yt_dlp else None, warm_up=warmed, shared=shared)
    events_r, events_w = os.pipe()
    spares = 0
    wanted = SPARE_LEADERS
    while True:
        while spares < wanted:
            fork_spare(yt_dlp, opts, listener, events_r, events_w, resident_netns)
            spares += 1
        taken_by = os.read(events_r, 1)
        spares -= 1
        # A download's start is where a job waits for its run: no fork of this large process then
        # takes the cores from it, unless no spare is left. Other runs (a converter, mostly started
        # between jobs) are followed by a top-up.
        wanted = 1 if taken_by == TAKEN_BY_DOWNLOAD else SPARE_LEADERS


def fork_spare(yt_dlp, opts, listener, events_r, events_w, resident_netns):
    """Forks a spare twice (see the module's docstring)."""
    first = os.fork()
    if first == 0:
        if os.fork() == 0:
            os.close(events_r)
            serve_spare(yt_dlp, opts, listener, events_w, resident_netns)
        os._exit(0)
    os.waitpid(first, 0)


def main():
    opts = parse_args(sys.argv[1:])
    if opts['ytdlp'] is not None:
        opts['ytdlp'] = os.path.realpath(opts['ytdlp'])
    try:
        if os.readlink('/proc/self/ns/net') == opts['host_netns'] or confine.interfaces() != ['lo']:
            raise RuntimeError('not confined: resident.py runs only inside confine.py')
        yt_dlp = None
        warmed = None
        shared = []
        if opts['ytdlp'] is not None:
            yt_dlp = import_ytdlp(opts['ytdlp'])
            warm_up(yt_dlp)
            shared = share_with_runs(yt_dlp)
            if opts['warm_up'] is not None:
                warmed = dry_run(yt_dlp, opts['warm_up'])
    except BaseException as err:
        report(ready=False, reason=f'{type(err).__name__}: {err}'[:500])
        return 1
    serve(yt_dlp, opts, warmed, shared)
    return 0


if __name__ == '__main__':
    sys.exit(main())
