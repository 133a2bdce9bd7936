"""The grader worker's system calls: namespaces, mounts, credentials, process relays.

The lowest layer of the worker (:mod:`akka_optimize.evals.sandbox.child`): ``unshare``,
``mount`` and ``prctl`` through libc, hiding paths behind empty mounts, binding the standard
library into reach, the user-namespace setup of an unprivileged worker
(:func:`_own_namespaces`) and the process namespace with its relaying first processes
(:func:`_enter_pid_namespace`). It imports the standard library alone, on purpose: it runs
in a worker started by path (``python -I -S -B``), where nothing else is importable.
"""

import ctypes
import os
import signal
import sys

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

_libc = ctypes.CDLL(None, use_errno=True)


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
