"""The grader workers' scratch space: where it goes, and the bundle copied into it.

Each worker of :class:`akka_optimize.evals.sandbox.pool.GraderPool` works in a fresh folder under
a base that lies outside the hidden paths (and, as root, that uid 65534 can reach), holding
a copy of the bundle's folders and regular files only (never a link or a special file).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path


def _under(path: str, folders: Sequence[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _traversable_by_all(path: str) -> bool:
    """Whether every folder from ``/`` to ``path`` may be searched by any user."""
    p = Path(path)
    for folder in [p, *p.parents]:
        try:
            if not folder.stat().st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def scratch_base(hidden: Sequence[str]) -> str:
    """Where the workers' scratch folders go: the temporary folder, unless it lies in a
    hidden path (the service's home) or, as root, cannot be reached by uid 65534."""
    root = os.geteuid() == 0
    for candidate in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
        real = os.path.realpath(candidate)
        if not os.path.isdir(real) or _under(real, hidden):
            continue
        if root and not _traversable_by_all(real):
            continue
        return real
    raise RuntimeError(
        "No folder for the grader's scratch space: the temporary folder lies in a hidden path "
        "or cannot be reached by uid 65534; set TMPDIR to a folder such as /tmp."
    )


def copy_bundle(src: Path, dest: Path) -> None:
    """Copy the bundle's folders and regular files (never a link or a special file)."""
    dest.mkdir(mode=0o700)
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        rel = os.path.relpath(dirpath, src)
        target = dest if rel == "." else dest / rel
        keep = []
        for d in dirnames:
            if not os.path.islink(os.path.join(dirpath, d)):
                (target / d).mkdir(mode=0o700)
                keep.append(d)
        dirnames[:] = keep
        for name in filenames:
            source = os.path.join(dirpath, name)
            st = os.lstat(source)
            if stat.S_ISREG(st.st_mode):
                shutil.copyfile(source, target / name, follow_symlinks=False)
                os.chmod(target / name, (stat.S_IMODE(st.st_mode) & 0o755) | 0o600)


def chown_tree(path: Path, uid: int, gid: int) -> None:
    os.lchown(path, uid, gid)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)
