"""How the grader worker isolates itself before any user code runs, and what it reports.

:func:`isolate` (as root, or in a user namespace when not) and the ``network``, ``files``,
``processes`` and ``imports`` sentences it answers with, checked rather than assumed. The
system calls it uses live in :mod:`_sandbox_syscalls`. Standard library and sibling modules
only: it runs in a worker started by path (``python -I -S -B``).
"""

import os
import socket
import sys

# Run by path, this folder is sys.path[0]: the siblings import as top-level modules.
from _sandbox_syscalls import (
    CLONE_NEWNET,
    CLONE_NEWNS,
    MS_PRIVATE,
    MS_REC,
    NOBODY,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    _bind_stdlib,
    _die_with_parent,
    _drop_to_nobody,
    _enter_pid_namespace,
    _hide,
    _libc,
    _mount,
    _own_namespaces,
    _unshare,
)


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
