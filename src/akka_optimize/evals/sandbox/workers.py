"""One grader worker process as the pool keeps it: its pipes, scratch folder and log.

:class:`_Worker` starts the worker (:mod:`akka_optimize.evals.sandbox.child`, the folder run
by path as ``python -I -S -B``) in its scratch folder with a bare environment, buffers what
goes to it and what comes back, stops it, and says why it died (:meth:`_Worker.death_reason`).
The pool that drives it is :class:`akka_optimize.evals.sandbox.pool.GraderPool`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

from .records import STARTUP_GRACE_SECONDS, Limits, MiB
from .scratch import chown_tree, copy_bundle

CHILD = Path(__file__).with_name("child")
"""The worker's folder (its ``__main__.py`` and ``_sandbox_*`` modules), run by path so the
platform's packages stay out of reach."""

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
"""The worker's ``PATH`` (the service's own is not passed on)."""

NOBODY = 65534
"""The uid/gid a worker started as root runs the grader under."""

LOG_TAIL_BYTES = 4096
"""How much of a dead worker's log is read to tell why it died."""

RELAY_MARK = "akka-sandbox: the grader process ended by signal "
"""The line a worker's first process writes when the grader process died of a signal (the
same text as :data:`akka_optimize.evals.sandbox.child.RELAY_MARK`)."""

_MEMORY_SIGNS = ("MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc")


class _PoolView(Protocol):
    """What a worker reads of its pool (:class:`akka_optimize.evals.sandbox.pool.GraderPool`)."""

    bundle_dir: Path
    function: str
    limits: Limits
    hidden: list[str]
    _module: str | None
    _root: Path | None


class Worker:
    """One worker process and its pipes, scratch folder and log (the pool's bookkeeping)."""

    def __init__(self, pool: _PoolView, serial: int) -> None:
        assert pool._root is not None
        name = f"w{serial}"
        self.scratch = pool._root / name
        self.libdir = pool._root / f"{name}.lib"
        self.log = pool._root / f"{name}.log"
        self.state = "starting"  # starting → idle ⇄ busy; dead
        self.call: int | None = None
        self.log_mark = 0
        self.inbuf = b""
        copy_bundle(pool.bundle_dir, self.scratch)
        self.libdir.mkdir(mode=0o755)
        if os.geteuid() == 0:
            chown_tree(self.scratch, NOBODY, NOBODY)
        cfg = {
            "scratch": str(self.scratch),
            "libdir": str(self.libdir),
            "hidden": pool.hidden,
            "module": pool._module,
            "function": pool.function,
            "memory_bytes": int(pool.limits.memory_bytes),
            "cpu_seconds": float(pool.limits.cpu_seconds),
            "parent": os.getpid(),
        }
        env = {
            "PATH": SAFE_PATH,
            "LANG": "C.UTF-8",
            "HOME": str(self.scratch),
            "TMPDIR": str(self.scratch),
        }
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", str(CHILD)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                cwd=self.scratch,
                env=env,
                close_fds=True,
                start_new_session=True,
            )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin.fileno()
        self.stdout = self.proc.stdout.fileno()
        os.set_blocking(self.stdin, False)
        os.set_blocking(self.stdout, False)
        self.outbuf = (json.dumps(cfg) + "\n").encode()
        self.deadline = time.monotonic() + pool.limits.wall_seconds + STARTUP_GRACE_SECONDS

    def send(self, line: bytes, deadline: float) -> None:
        self.outbuf += line
        self.deadline = deadline
        try:
            self.log_mark = self.log.stat().st_size
        except OSError:
            self.log_mark = 0

    def flush(self) -> bool:
        """Write what is pending; False when the worker's stdin is gone."""
        try:
            while self.outbuf:
                n = os.write(self.stdin, self.outbuf)
                self.outbuf = self.outbuf[n:]
        except BlockingIOError:
            pass
        except OSError:
            return False
        return True

    def read(self) -> list[bytes] | None:
        """Complete lines read so far; None at end of file (the worker is gone)."""
        try:
            chunk = os.read(self.stdout, 65536)
        except BlockingIOError:
            return []
        except OSError:
            return None
        if not chunk:
            return None
        self.inbuf += chunk
        lines = []
        while b"\n" in self.inbuf:
            line, _, self.inbuf = self.inbuf.partition(b"\n")
            lines.append(line)
        return lines

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def end(self, graceful: float = 0.0) -> None:
        """Stop the worker (after ``graceful`` seconds to leave on its own) and remove its
        scratch folder."""
        self.state = "dead"
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        if graceful > 0:
            try:
                self.proc.wait(timeout=graceful)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        shutil.rmtree(self.scratch, ignore_errors=True)
        for path in (self.libdir, self.log):
            try:
                path.rmdir() if path.is_dir() else path.unlink()
            except OSError:
                pass

    def death_reason(self, memory_bytes: int) -> str:
        """Why the worker ended (it closed its output): a sentence for the call it ran."""
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.kill()
            return "closed its output to the pool; its worker was stopped"
        tail = ""
        try:
            with open(self.log, "rb") as f:
                f.seek(max(self.log_mark, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
                tail = f.read().decode("utf-8", "replace")
        except OSError:
            pass
        if any(sign in tail for sign in _MEMORY_SIGNS):
            return f"exceeded its memory limit ({memory_bytes // MiB} MiB)"
        rc = self.proc.returncode
        mark = tail.rfind(RELAY_MARK)
        if mark >= 0:  # the grader ran in a process namespace; its first process said why
            name = tail[mark + len(RELAY_MARK) :].partition("\n")[0].strip() or "a signal"
            return f"crashed its worker process ({name})"
        if rc is not None and rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = f"signal {-rc}"
            return f"crashed its worker process ({name})"
        return f"ended its worker process (exit status {rc})"
