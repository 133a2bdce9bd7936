"""The grader worker: one process that imports a bundle's grader and scores calls.

Started only by :class:`akka_optimize.evals.sandbox.GraderPool` as
``python -I -S -B sandbox_child.py`` (the file by path, so nothing of the platform nor any
installed package is importable: the standard library and the bundle copy only). It
imports the standard library alone, on purpose.

Protocol (JSON lines; stdin from the pool, stdout to it; the grader's own prints go to
stderr, which the pool keeps in a log file):

1. the pool sends the configuration ``{"scratch", "libdir", "hidden", "module",
   "function", "memory_bytes", "cpu_seconds", "parent"}``;
2. the worker isolates itself (:func:`isolate`), sets its limits, imports the module and
   answers ``{"ready": true, "isolation": {...}}`` or ``{"ready": false, "error": "..."}``;
3. per call the pool sends ``{"id", "args": {data_source, solution_str, ground_truth,
   extra_info}}`` and the worker answers ``{"id", "score", "details", "error"}``.
"""

import ctypes
import errno
import importlib
import json
import math
import numbers
import os
import resource
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from typing import Any

NOBODY = 65534
"""The uid and gid a worker started as root drops to (``nobody``/``nogroup``)."""

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38

TRACEBACK_CHARS = 4000
"""The most characters of a grader's traceback kept in an error result's details."""
DETAILS_BYTES = 64 * 1024
"""The most bytes of JSON a result's details may take; larger details are left out."""
ERROR_CHARS = 1000
"""The most characters of an error's sentence."""

_libc = ctypes.CDLL(None, use_errno=True)
_armed = [False]


class CpuLimit(BaseException):
    """Raised in the grader when its call used up its CPU time (``SIGPROF``/``SIGXCPU``).

    A ``BaseException``, so a grader's ``except Exception`` does not swallow it."""


def _oserror(what: str) -> str:
    return f"{what}: {os.strerror(ctypes.get_errno())}"


def _unshare(flags: int) -> str | None:
    """None on success, else the reason."""
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        return _oserror("unshare")
    return None


def _mount(
    source: bytes | None, target: str, fstype: bytes | None, flags: int, data: bytes | None
) -> str | None:
    rc = _libc.mount(source, os.fsencode(target), fstype, ctypes.c_ulong(flags), data)
    if rc != 0:
        return _oserror(f"mount {target}")
    return None


def _write(path: str, text: str, dir_fd: int | None = None) -> None:
    fd = os.open(path, os.O_WRONLY, dir_fd=dir_fd)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _map_ids(uid: int, gid: int, dir_fd: int | None = None) -> None:
    """Map root inside a just-made user namespace to ``uid``/``gid`` outside."""
    prefix = "self/" if dir_fd is not None else "/proc/self/"
    _write(prefix + "setgroups", "deny", dir_fd)
    _write(prefix + "uid_map", f"0 {uid} 1", dir_fd)
    _write(prefix + "gid_map", f"0 {gid} 1", dir_fd)


def _hide(paths: list[str]) -> list[str]:
    """Cover each path with something empty: a read-only empty tmpfs over a folder,
    ``/dev/null`` over a file. Returns the failures."""
    failed = []
    for path in paths:
        if os.path.isdir(path):
            why = _mount(
                b"tmpfs", path, b"tmpfs", MS_NOSUID | MS_NODEV, b"size=16k,nr_inodes=4,mode=0555"
            )
        elif os.path.lexists(path):
            why = _mount(b"/dev/null", path, None, MS_BIND, None)
        else:
            continue  # nothing there to hide
        if why:
            failed.append(why)
    return failed


def _bind_stdlib(libdir: str) -> str | None:
    """Bind the standard library's folder onto ``libdir`` (readable by the worker after it
    drops to uid 65534 even where the interpreter lives under a private home such as
    ``/root``) and point ``sys.path`` there."""
    stdlib = os.path.dirname(os.__file__)
    why = _mount(os.fsencode(stdlib), libdir, None, MS_BIND | MS_REC, None)
    if why:
        return why
    _mount(None, libdir, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)

    def moved(path: str) -> str:
        return libdir + path[len(stdlib) :] if path.startswith(stdlib) else path

    sys.path[:] = [moved(p) for p in sys.path]
    # Packages imported already (encodings, json, ctypes…) find their submodules through
    # their own __path__, so it moves too.
    for mod in list(sys.modules.values()):
        search = getattr(mod, "__path__", None)
        if isinstance(search, list):
            search[:] = [moved(p) for p in search]
    return None


def _drop_to_nobody() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def _own_namespaces(
    uid: int, gid: int, hidden: list[str], want_net: bool
) -> tuple[bool, bool, list[str], bool]:
    """As an unprivileged user: a user namespace with a mount (and network) namespace.

    Hides ``hidden`` and ``/proc`` with empty mounts, then enters a second user and mount
    namespace, so those mounts are locked (a mount made in a more privileged namespace
    cannot be removed from a less privileged one: the grader, root in its own namespace,
    cannot unmount them to see what is underneath).

    Returns (mount namespace, network namespace, hide failures, mounts locked).
    """
    net = False
    mnt = False
    failed: list[str] = []
    tries = [
        CLONE_NEWUSER | CLONE_NEWNS | (CLONE_NEWNET if want_net else 0),
        CLONE_NEWUSER | CLONE_NEWNS,
    ]
    if want_net:
        tries.append(CLONE_NEWUSER | CLONE_NEWNET)
    for flags in tries:
        if _unshare(flags) is None:
            mnt = bool(flags & CLONE_NEWNS)
            net = bool(flags & CLONE_NEWNET)
            break
    else:
        return False, False, [], False
    try:
        _map_ids(uid, gid)
    except OSError as exc:
        return mnt, net, [f"uid_map: {exc.strerror}"], False
    if not mnt:
        return mnt, net, [], False
    why = _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    if why:
        return mnt, net, [why], False
    failed = _hide(hidden)
    proc = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        why = _hide(["/proc"])
        failed += why
        locked = False
        if _unshare(CLONE_NEWUSER | CLONE_NEWNS) is None:
            try:
                _map_ids(0, 0, dir_fd=proc)
                locked = True
            except OSError as exc:
                failed.append(f"uid_map (second namespace): {exc.strerror}")
    finally:
        os.close(proc)
    return mnt, net, failed, locked


RELAY_MARK = "akka-sandbox: the grader process ended by signal "
"""What the process namespace's first process writes to the log when the grader process
was killed by a signal (the pool reads it to name the signal)."""


def _die_with_parent(parent: int | None) -> None:
    """End this process when its parent ends (``PR_SET_PDEATHSIG``); end it now if the
    parent is gone already. Set after every change of credentials (a change clears it)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def _relay(child: int, init: bool) -> None:
    """Wait for ``child`` and end with its status; never returns. As a process namespace's
    first process (``init``), also reap every orphan of the namespace."""
    os.closerange(3, 65536)  # the protocol pipes stay with the grader process alone
    while True:
        try:
            pid, status = os.waitpid(-1 if init else child, 0)
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
        if pid != child:
            continue
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if init:
                try:
                    name = signal.Signals(sig).name
                except ValueError:
                    name = str(sig)
                os.write(2, f"\n{RELAY_MARK}{name}\n".encode())
            os._exit(128 + sig)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _enter_pid_namespace(parent: int | None) -> bool:
    """Run the rest of the worker as process 2 of a new process namespace.

    The calling process stays outside and waits (its exit mirrors the grader's); process 1
    reaps; process 2 (the caller's return) runs the grader. The grader then sees and
    signals no process outside the namespace (no ``ptrace``, no ``kill`` of the service),
    and everything it starts ends with process 1. Returns False (nothing forked) where no
    process namespace can be made.
    """
    if _unshare(CLONE_NEWPID) is not None:
        return False
    _die_with_parent(parent)
    child = os.fork()
    if child:
        _relay(child, init=False)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # process 1 ends with the waiter
    child = os.fork()
    if child:
        _relay(child, init=True)
    return True  # process 2; it ends with process 1, as the whole namespace does


def isolate(cfg: dict) -> dict[str, str]:
    """Isolate this process before any user code runs; say what worked.

    As root: a mount and a network namespace without a user namespace; the standard
    library bound into reach, the ``hidden`` paths and ``/proc`` covered by empty mounts;
    then down to uid/gid 65534 (no capability left to remove a mount). Where no mount
    namespace can be made as root, dropping to 65534 still keeps the service's home (mode
    0700) unreadable, and a user namespace is tried as 65534.

    Not root: a user namespace holding the mount and network namespaces, the same mounts,
    locked by a second user namespace (:func:`_own_namespaces`).

    Then, where allowed, a process namespace (:func:`_enter_pid_namespace`): the grader
    runs as its process 2. Always: ``no_new_privs`` (a setuid program gives no privilege
    back) and death with the pool (``PR_SET_PDEATHSIG``).

    Returns:
        ``{"network": ..., "files": ...}``: sentences starting ``isolated:``, ``partly:``
        or ``not isolated:``.
    """
    hidden = list(cfg.get("hidden") or [])
    libdir = cfg.get("libdir")
    parent = cfg.get("parent")
    if os.geteuid() == 0:
        got = _isolate_as_root(hidden, libdir, parent)
    else:
        mnt, net, failed, locked = _own_namespaces(os.getuid(), os.getgid(), hidden, True)
        pidns = _enter_pid_namespace(parent) if mnt or net else False
        got = _Held(mnt, net, failed, [], locked, False, pidns)
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if not got.pidns:
        _die_with_parent(parent)
    return _isolation_report(got, hidden, libdir)


class _Held:
    """What :func:`isolate` obtained: mount and network namespaces, the mount failures
    and notes, whether the mounts are locked, whether the process dropped to 65534 and
    whether it is in its own process namespace."""

    def __init__(
        self,
        mnt: bool,
        net: bool,
        failed: list[str],
        notes: list[str],
        locked: bool,
        dropped: bool,
        pidns: bool,
    ) -> None:
        self.mnt, self.net, self.failed, self.notes = mnt, net, failed, notes
        self.locked, self.dropped, self.pidns = locked, dropped, pidns


def _isolate_as_root(hidden: list[str], libdir: str | None, parent: int | None) -> _Held:
    """As root: mount and network namespaces without a user namespace, the standard
    library bound into reach, ``hidden`` and ``/proc`` covered, then down to 65534; where
    no mount namespace could be made, a user namespace is tried as 65534."""
    mnt = net = locked = False
    failed: list[str] = []
    notes: list[str] = []
    for flags in (CLONE_NEWNS | CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWNET):
        if _unshare(flags) is None:
            mnt = mnt or bool(flags & CLONE_NEWNS)
            net = net or bool(flags & CLONE_NEWNET)
            if flags != CLONE_NEWNS:
                break
    if mnt:
        why = _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        if why:
            failed.append(why)
        else:
            if libdir:
                why = _bind_stdlib(libdir)
                if why:
                    notes.append(f"the standard library could not be bound into reach ({why})")
            failed += _hide(hidden + ["/proc"])
            locked = True  # no capability is left to remove them after the drop
    pidns = _enter_pid_namespace(parent)
    _drop_to_nobody()
    if not mnt:
        _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # so the worker may write its own uid_map
        m2, n2, f2, locked = _own_namespaces(NOBODY, NOBODY, hidden, not net)
        mnt, net, failed = m2, net or n2, failed + f2
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        if m2 or n2:
            pidns = pidns or _enter_pid_namespace(parent)
    return _Held(mnt, net, failed, notes, locked, True, pidns)


def _isolation_report(got: _Held, hidden: list[str], libdir: str | None) -> dict[str, str]:
    """What actually holds, checked rather than assumed: the ``network``, ``files``,
    ``processes`` and ``imports`` sentences of :func:`isolate`."""
    visible = []
    for path in hidden:
        try:
            if os.path.isdir(path) and os.listdir(path):
                visible.append(path)
        except OSError:
            pass
    try:
        interfaces = sorted(name for _, name in socket.if_nameindex())
    except OSError:
        interfaces = []
    report: dict[str, str] = {}
    if got.net and interfaces in ([], ["lo"]):
        report["network"] = (
            "isolated: the grader runs in its own network namespace with no interface but "
            "a loopback that is down; every connection fails"
        )
    else:
        report["network"] = (
            "not isolated: no network namespace could be made here; the grader can reach "
            "whatever this machine can"
        )
    report["files"] = _files_sentence(got, hidden, visible)
    if got.pidns:
        report["processes"] = (
            "isolated: the grader runs in its own process namespace; it sees and signals no "
            "process outside it, and whatever it starts ends with its worker"
        )
    else:
        report["processes"] = (
            "partly: no process namespace could be made here; processes a grader starts are "
            "killed with its worker's process group, one that leaves the group is not tracked"
        )
    stdlib = os.path.dirname(os.__file__)
    readable = any(
        os.access(p, os.R_OK | os.X_OK) for p in sys.path if p.startswith((stdlib, libdir or "\0"))
    )
    report["imports"] = (
        "isolated: only the standard library and the bundle are importable (python -I -S)"
        if readable
        else "partly: the standard library is not readable after dropping to uid 65534; only "
        "modules imported before the drop are available"
    )
    if got.notes:
        report["imports"] += " (" + "; ".join(got.notes) + ")"
    return report


def _files_sentence(got: _Held, hidden: list[str], visible: list[str]) -> str:
    """The ``files`` sentence: isolated (every hidden path and /proc covered by mounts the
    grader cannot remove), partly (dropped to 65534 without the mounts) or not isolated."""
    who = (
        "runs as uid/gid 65534 (nobody)"
        if got.dropped
        else f"runs as uid {os.getuid()} in its own user namespace"
    )
    if got.mnt and not got.failed and not visible and got.locked:
        covered = (
            f"the {len(hidden)} hidden path(s) (the service's home and configuration) and "
            "/proc are covered by empty mounts"
            if hidden
            else "/proc is covered by an empty mount (no service path was given to hide)"
        )
        return (
            f"isolated: {covered} the grader cannot remove; it {who}, works in a scratch "
            "copy of the bundle and still reads what every user of this machine may read"
        )
    why = "; ".join(got.failed + [f"{p} is visible" for p in visible]) or "no mount namespace"
    if got.dropped:
        return (
            f"partly: the service paths are not covered by mounts ({why}); the grader {who}, "
            "so only files every user may read are readable (the service's home is mode 0700)"
        )
    return (
        f"not isolated: the service paths could not be hidden ({why}); the grader reads "
        "what the service's user may read"
    )


def last_line(exc: BaseException) -> str:
    """``Type: message`` on one line, as the last line of a traceback shows it."""
    lines = traceback.format_exception_only(type(exc), exc)
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list) and 0 < len(notes) < len(lines):
        lines = lines[: -len(notes)]  # notes (add_note) follow the Type: message line
    text = " ".join((lines[-1] if lines else repr(exc)).split())
    return text[:ERROR_CHARS]


def _fmt(seconds: float) -> str:
    return f"{seconds:g}"


def _on_cpu(signum: int, frame: object) -> None:
    if _armed[0]:
        raise CpuLimit()


def arm(seconds: float) -> None:
    """Start a call's CPU budget: a ``SIGPROF`` timer on this process's CPU time, and
    ``RLIMIT_CPU`` (whole seconds, ``SIGXCPU``) a second later as a backstop."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(used + seconds) + 2
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    _armed[0] = True
    signal.setitimer(signal.ITIMER_PROF, seconds)


def disarm() -> None:
    """End a call's CPU budget."""
    _armed[0] = False
    signal.setitimer(signal.ITIMER_PROF, 0)
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))


def _memory_error(memory_bytes: int) -> str:
    return f"exceeded its memory limit ({memory_bytes // 2**20} MiB)"


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, complex)


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:80] + "…"
    return f"{text} ({type(value).__name__})"


def _json_value(value: object) -> tuple[bool, object]:
    try:
        return True, json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError, OverflowError):
        return False, None


def convert(value: object) -> dict:
    """veRL's return convention → ``{"score", "details", "error"}``.

    A number (``bool`` and ``int`` too; ``numbers.Real``) or a dict with a numeric
    ``score``; the dict's other keys whose values are JSON are kept as ``details``
    (others are left out, listed under ``_omitted``). NaN and infinities are errors.
    """
    details: dict = {}
    if isinstance(value, dict):
        if "score" not in value or not _is_number(value["score"]):
            if "score" in value:
                return _error(
                    f"returned a dict whose 'score' is {_describe(value['score'])}, not a number"
                )
            keys = ", ".join(sorted(str(k) for k in value)[:10]) or "none"
            return _error(f"returned a dict without a numeric 'score' (keys: {keys})")
        raw = value["score"]
        omitted = []
        for key, item in value.items():
            if key == "score":
                continue
            ok, clean = _json_value(item)
            if isinstance(key, str) and ok:
                details[key] = clean
            else:
                omitted.append(str(key))
        if omitted:
            details["_omitted"] = f"not JSON, left out: {', '.join(sorted(omitted)[:10])}"
        size = len(json.dumps(details))
        if size > DETAILS_BYTES:
            details = {
                "_omitted": f"the details took {size:,} bytes of JSON; the limit is {DETAILS_BYTES:,}"
            }
    elif _is_number(value):
        raw = value
    else:
        return _error(f"returned {_describe(value)}, not a number or a dict with a numeric score")
    try:
        score = float(raw)
    except (TypeError, ValueError, OverflowError) as exc:
        return _error(f"returned a score that is not a float: {last_line(exc)}")
    if not math.isfinite(score):
        return _error(f"returned {score!r}, not a finite number")
    return {"score": score, "details": details, "error": None}


def _error(sentence: str, details: dict | None = None) -> dict:
    return {"score": None, "details": details or {}, "error": sentence[:ERROR_CHARS]}


def _user_error(exc: BaseException, cfg: dict) -> dict:
    if isinstance(exc, CpuLimit):
        return _error(f"exceeded its {_fmt(cfg['cpu_seconds'])} s CPU-time limit")
    if isinstance(exc, MemoryError):
        return _error(_memory_error(cfg["memory_bytes"]))
    frames = exc.__traceback__
    if frames is not None and frames.tb_frame.f_code is main.__code__:
        frames = frames.tb_next  # the worker's own frame is not the grader's business
    tb = "".join(traceback.format_exception(type(exc), exc, frames))
    if len(tb) > TRACEBACK_CHARS:
        tb = "…" + tb[-TRACEBACK_CHARS:]
    return _error(last_line(exc), {"traceback": tb})


def main() -> None:
    """Run the worker: configuration, isolation, import, then one call per line."""
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # the grader's prints land in the log, never in the protocol
    sys.stdin = open(os.devnull)
    sys.stdout = sys.stderr

    def send(message: dict) -> None:
        proto_out.write(json.dumps(message, allow_nan=False) + "\n")
        proto_out.flush()

    cfg = json.loads(proto_in.readline())
    report = isolate(cfg)
    os.chdir(cfg["scratch"])
    sys.path.insert(0, cfg["scratch"])
    _set_limits(int(cfg["memory_bytes"]))
    _reserve[0] = bytearray(256 * 1024)  # freed on MemoryError, so the answer can be written
    if not cfg.get("module"):
        send({"ready": True, "isolation": report})
        return
    fn = _load_grader(cfg, report, send)
    if fn is None:
        return
    send({"ready": True, "isolation": report})
    _serve(proto_in, send, fn, cfg)


_reserve: list[bytearray | None] = [None]
"""Memory held back while user code runs and freed when it raises (a ``MemoryError``
must still be answered)."""


def _set_limits(memory: int) -> None:
    """No core dumps; the address space capped at ``memory`` bytes (at most the hard
    limit); the CPU-time signals raise :class:`CpuLimit` in user code."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(
        resource.RLIMIT_AS, (memory, hard if hard == resource.RLIM_INFINITY else min(memory, hard))
    )
    signal.signal(signal.SIGPROF, _on_cpu)
    signal.signal(signal.SIGXCPU, _on_cpu)


def _load_grader(cfg: dict, report: dict[str, str], send: Callable[[dict], None]) -> Any:
    """Import ``cfg["module"]`` under the CPU limit and return its ``cfg["function"]``; on
    a failure send the ``ready: false`` answer naming it and return None."""
    module, function = cfg["module"], cfg["function"]
    try:
        arm(float(cfg["cpu_seconds"]))
        try:
            mod = importlib.import_module(module)
        finally:
            disarm()
        fn = getattr(mod, function, None)
        if fn is None:
            why = f"module {module} has no function {function}"
        elif not callable(fn):
            why = f"{module}.{function} is {_describe(fn)}, not a function"
        else:
            return fn
        send({"ready": False, "error": why, "isolation": report})
        return None
    except BaseException as exc:  # the user's import may raise anything
        _armed[0] = False
        disarm()
        _reserve[0] = None
        failure = _user_error(exc, cfg)
        why = failure["error"]
        if isinstance(exc, CpuLimit | MemoryError):
            why = f"importing {module} {why}"
        else:
            why = f"importing {module} failed: {why}"
        send({"ready": False, "error": why, "details": failure["details"], "isolation": report})
        return None


def _serve(proto_in: Any, send: Callable[[dict], None], fn: Any, cfg: dict) -> None:
    """Answer one grader call per request line until the pool closes the pipe: each call
    under the CPU limit, its value converted to a result, any exception (a user error,
    the CPU or memory limit) turned into the error result."""
    cpu = float(cfg["cpu_seconds"])
    while True:
        line = proto_in.readline()
        if not line:
            return
        request = json.loads(line)
        args = request["args"]
        try:
            arm(cpu)
            value = fn(
                data_source=args.get("data_source"),
                solution_str=args.get("solution_str"),
                ground_truth=args.get("ground_truth"),
                extra_info=args.get("extra_info"),
            )
            result = convert(value)
        except BaseException as exc:  # a grader may raise anything
            _armed[0] = False
            _reserve[0] = None
            result = _user_error(exc, cfg)
        finally:
            disarm()
        value = None
        if _reserve[0] is None:
            try:
                _reserve[0] = bytearray(256 * 1024)
            except MemoryError:
                pass
        result["id"] = request["id"]
        try:
            send(result)
        except (TypeError, ValueError) as exc:
            send(
                {
                    "id": request["id"],
                    **_error(f"returned a result that is not JSON: {last_line(exc)}"),
                }
            )


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        os._exit(0)
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            os._exit(0)
        raise
