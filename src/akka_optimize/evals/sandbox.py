"""Run a bundle's grader outside the service's process, with limits.

A grader is the user's code: veRL's reward-function convention (``verl/utils/reward_score``),
``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` returning a
number (``int``/``bool`` too, not NaN or infinite) or a dict with a numeric ``score`` whose
other JSON keys become the example's ``details``. It is called with keyword arguments.

:class:`GraderPool` keeps ``Limits.workers`` worker processes
(:mod:`akka_optimize.evals.sandbox_child`, ``python -I -S -B`` run by path) that talk JSON
lines over pipes. Each worker:

- works in a fresh scratch folder holding a copy of the bundle's regular files (links and
  special files are left out); that folder is its cwd, ``HOME``, ``TMPDIR`` and first
  ``sys.path`` entry; the standard library is the only other thing importable;
- gets an environment of ``PATH`` (a fixed system path), ``LANG=C.UTF-8``, ``HOME`` and
  ``TMPDIR``, nothing of the service's (no ``AKKA_*``, no token);
- isolates itself before importing the grader (namespaces, empty mounts over the paths in
  ``hidden``, uid 65534 when started as root; see
  :func:`akka_optimize.evals.sandbox_child.isolate` and :func:`isolation_report`);
- has ``RLIMIT_AS`` set to ``memory_bytes``, a CPU budget of ``cpu_seconds`` per call and
  the import, and a wall-clock limit of ``wall_seconds`` per call that the pool enforces by
  killing the worker; the next call gets a fresh worker.

Every failure is one example's error (:class:`GradeResult.error`), never an exception of
the pool: a grader that raises, hangs, spins, allocates too much, returns a non-number, or
kills its worker fails the call it was running, and the others in the batch still score.
A module that cannot be imported makes every call an error with that reason.
"""

from __future__ import annotations

import json
import keyword
import math
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MiB = 2**20

CHILD = Path(__file__).with_name("sandbox_child.py")
"""The worker's script, run by path so the platform's packages stay out of reach."""

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
"""The worker's ``PATH`` (the service's own is not passed on)."""

NOBODY = 65534
"""The uid/gid a worker started as root runs the grader under."""

STARTUP_GRACE_SECONDS = 5.0
"""Seconds a worker may take to start and isolate itself, on top of the wall-clock limit
its import has."""

MAX_RESULT_BYTES = 4 * MiB
"""The most bytes one result line from a worker may take."""

LOG_TAIL_BYTES = 4096
"""How much of a dead worker's log is read to tell why it died."""

RELAY_MARK = "akka-sandbox: the grader process ended by signal "
"""The line a worker's first process writes when the grader process died of a signal (the
same text as :data:`akka_optimize.evals.sandbox_child.RELAY_MARK`)."""

_MEMORY_SIGNS = ("MemoryError", "Cannot allocate memory", "out of memory", "bad_alloc")


@dataclass
class GradeResult:
    """One example's grade.

    Attributes:
        score: the grader's score as a finite float; None when the example is an error.
        details: the other JSON keys of a dict result (``{}`` for a plain number); for a
            grader that raised, ``{"traceback": ...}`` (its last 4,000 characters).
        error: None when scored; else one line saying why not, e.g.
            ``ZeroDivisionError: division by zero``, ``exceeded its 5 s wall-clock limit``,
            ``exceeded its memory limit (256 MiB)``, ``returned 'abc' (str), not a number or
            a dict with a numeric score``.
    """

    score: float | None
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class Limits:
    """What one grader worker may use.

    Attributes:
        cpu_seconds: CPU time (user + system, seconds) per call, and for the import.
        wall_seconds: elapsed seconds per call, and for the import (plus
            :data:`STARTUP_GRACE_SECONDS` to start the worker).
        memory_bytes: the worker's address space (``RLIMIT_AS``, bytes); the interpreter
            itself takes about 20 MiB of it.
        workers: worker processes grading at once.

    Raises:
        ValueError: a limit that is not a positive number (``workers`` a positive integer).
    """

    cpu_seconds: float = 10
    wall_seconds: float = 30
    memory_bytes: int = 512 * MiB
    workers: int = 2

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "wall_seconds", "memory_bytes", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"Limits.{name} must be a number, not {type(value).__name__}.")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"Limits.{name} must be positive, not {value!r}.")
        if not isinstance(self.workers, int):
            raise ValueError(f"Limits.workers must be a whole number, not {self.workers!r}.")


DEFAULT_LIMITS = Limits()


def _fmt(seconds: float) -> str:
    return f"{seconds:g}"


def _is_identifier(name: str) -> bool:
    return name.isascii() and name.isidentifier() and not keyword.iskeyword(name)


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


def _scratch_base(hidden: Sequence[str]) -> str:
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


def _copy_bundle(src: Path, dest: Path) -> None:
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


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.lchown(path, uid, gid)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _limit_sentences(limits: Limits) -> dict[str, str]:
    return {
        "environment": (
            "isolated: only PATH, LANG, HOME and TMPDIR are set (HOME and TMPDIR are the "
            "worker's scratch folder); nothing of the service's environment (tokens, AKKA_* "
            "settings) reaches the grader"
        ),
        "memory": (
            f"limited: {limits.memory_bytes / MiB:g} MiB of address space per worker "
            "(RLIMIT_AS); an allocation past it fails that example"
        ),
        "cpu": (
            f"limited: {_fmt(limits.cpu_seconds)} s of CPU time per call and for the import "
            "(a SIGPROF timer, RLIMIT_CPU as a backstop)"
        ),
        "wall_clock": (
            f"limited: {_fmt(limits.wall_seconds)} s per call and for the import; the pool "
            "kills a worker that runs over and starts a fresh one for the next call"
        ),
        "disk": "not limited: a grader may write into its scratch folder, removed afterwards",
    }


class _Worker:
    """One worker process and its pipes, scratch folder and log (the pool's bookkeeping)."""

    def __init__(self, pool: GraderPool, serial: int) -> None:
        assert pool._root is not None
        name = f"w{serial}"
        self.scratch = pool._root / name
        self.libdir = pool._root / f"{name}.lib"
        self.log = pool._root / f"{name}.log"
        self.state = "starting"  # starting → idle ⇄ busy; dead
        self.call: int | None = None
        self.log_mark = 0
        self.inbuf = b""
        _copy_bundle(pool.bundle_dir, self.scratch)
        self.libdir.mkdir(mode=0o755)
        if os.geteuid() == 0:
            _chown_tree(self.scratch, NOBODY, NOBODY)
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


def _result(message: Any) -> GradeResult:
    """A worker's answer, checked (the worker runs user code; its output is not trusted)."""
    if not isinstance(message, dict):
        return GradeResult(None, {}, "its worker sent a malformed result")
    details = message.get("details")
    details = details if isinstance(details, dict) else {}
    error = message.get("error")
    if error is not None:
        text = error if isinstance(error, str) else "its worker sent a malformed result"
        return GradeResult(None, details, " ".join(text.split())[:1000] or "failed")
    score = message.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        return GradeResult(None, {}, "its worker sent a malformed result")
    return GradeResult(float(score), details, None)


class GraderPool:
    """Worker processes that grade with one bundle's function (see the module docstring).

    Use it as a context manager (or call :meth:`start` and :meth:`close`); it is used from
    one thread, the one that creates its workers: a worker ends when that thread ends
    (``PR_SET_PDEATHSIG``), so a pool does not outlive the process that made it.

    Args:
        bundle_dir: the bundle's files (copied into each worker's scratch folder).
        module: the dotted module to import from the bundle (``reward``, ``pkg.reward``).
        function: the function to call (``compute_score``).
        limits: :class:`Limits`.
        hidden: folders (or files) the grader must not see, covered by empty mounts where
            this machine allows: the service's home (``state.db``, ``blobs/``, the attempt's
            spec with its token) and its configuration folder (the admin token).

    Raises:
        ValueError: ``module`` or ``function`` is not a (dotted) Python identifier.
        NotADirectoryError: ``bundle_dir`` is not a folder.
    """

    def __init__(
        self,
        bundle_dir: Path,
        module: str,
        function: str,
        limits: Limits = DEFAULT_LIMITS,
        hidden: Sequence[Path] = (),
    ) -> None:
        if not isinstance(module, str) or not all(_is_identifier(p) for p in module.split(".")):
            raise ValueError(f"The grader module {module!r} is not a dotted Python identifier.")
        if not isinstance(function, str) or not _is_identifier(function):
            raise ValueError(f"The grader function {function!r} is not a Python identifier.")
        self.bundle_dir = Path(bundle_dir)
        if not self.bundle_dir.is_dir():
            raise NotADirectoryError(f"The grader bundle {self.bundle_dir} is not a folder.")
        self.module = module
        self.function = function
        self.limits = limits
        self.hidden = [os.path.realpath(p) for p in hidden]
        self.isolation: dict[str, str] = {}
        """What is and is not isolated for this pool's workers (:func:`isolation_report`'s
        shape); filled when the first worker has started."""
        self._module: str | None = module
        self._root: Path | None = None
        self._workers: list[_Worker] = []
        self._serial = 0
        self._import_error: str | None = None
        self._import_details: dict[str, Any] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> GraderPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the workers and wait until each has isolated itself and imported the
        grader (or failed to: then :meth:`score` answers every call with that error)."""
        if self._root is None:
            base = _scratch_base(self.hidden)
            self._root = Path(tempfile.mkdtemp(prefix="akka-grader-", dir=base))
            self._root.chmod(0o711)
        self._loop({}, [], fill=True)

    def close(self) -> None:
        """Stop every worker and remove the scratch folders."""
        workers, self._workers = self._workers, []
        for w in workers:
            for pipe in (w.proc.stdin,):
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:
                    pass
        deadline = time.monotonic() + 1.0
        for w in workers:
            w.end(graceful=max(0.0, deadline - time.monotonic()))
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    # -- grading -----------------------------------------------------------------------------

    def score(self, calls: Sequence[dict[str, Any]]) -> list[GradeResult]:
        """Grade ``calls``, spread over the workers; results in call order.

        Args:
            calls: ``{"data_source", "solution_str", "ground_truth", "extra_info"}`` each
                (JSON values; a missing key is None).

        Returns:
            One :class:`GradeResult` per call. Never raises for what a grader does.
        """
        if self._root is None:
            self.start()
        results: list[GradeResult | None] = [None] * len(calls)
        lines: dict[int, bytes] = {}
        for i, c in enumerate(calls):
            args = {
                k: c.get(k) for k in ("data_source", "solution_str", "ground_truth", "extra_info")
            }
            try:
                lines[i] = (json.dumps({"id": i, "args": args}, allow_nan=False) + "\n").encode()
            except (TypeError, ValueError) as exc:
                results[i] = GradeResult(None, {}, f"its inputs are not JSON: {exc}")
        self._loop(lines, results, fill=False)
        return [r if r is not None else GradeResult(None, {}, "was not graded") for r in results]

    def _spawn(self) -> None:
        self._serial += 1
        try:
            self._workers.append(_Worker(self, self._serial))
        except OSError as exc:
            self._import_error = f"could not start a grader worker: {exc}"

    def _ended(self, w: _Worker, reason: str, results: list[GradeResult | None]) -> None:
        """A worker is gone: its call (or the import) fails with ``reason``."""
        if w.state == "starting" and self._module is not None:
            self._import_error = f"importing {self.module} {reason}"
        elif w.state == "busy" and w.call is not None:
            results[w.call] = GradeResult(None, {}, reason)
        w.end()
        self._workers.remove(w)

    def _on_line(self, w: _Worker, line: bytes, results: list[GradeResult | None]) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if w.state == "starting":
            if isinstance(message, dict) and not self.isolation:
                report = message.get("isolation")
                if isinstance(report, dict):
                    self.isolation = {
                        **{str(k): str(v) for k, v in report.items()},
                        **_limit_sentences(self.limits),
                    }
            if isinstance(message, dict) and message.get("ready") is True:
                w.state = "idle"
            else:
                error = message.get("error") if isinstance(message, dict) else None
                self._import_error = (
                    " ".join(error.split())[:1000]
                    if isinstance(error, str)
                    else f"importing {self.module} failed"
                )
                details = message.get("details") if isinstance(message, dict) else None
                self._import_details = details if isinstance(details, dict) else {}
                w.end()
                self._workers.remove(w)
        elif w.state == "busy" and w.call is not None:
            if not isinstance(message, dict) or message.get("id") != w.call:
                results[w.call] = GradeResult(None, {}, "its worker sent a malformed result")
            else:
                results[w.call] = _result(message)
            w.state, w.call = "idle", None

    def _loop(self, lines: dict[int, bytes], results: list[GradeResult | None], fill: bool) -> None:
        """Feed ``lines`` to the workers until each has an answer (the pool's event loop)."""
        pending = deque(sorted(lines))
        wall = self.limits.wall_seconds
        while True:
            if self._import_error is not None:
                while pending:
                    results[pending.popleft()] = GradeResult(
                        None, dict(self._import_details), self._import_error
                    )
                fill = False
            while (
                (pending or fill)
                and len(self._workers) < self.limits.workers
                and self._import_error is None
            ):
                self._spawn()
            fill = False
            for w in self._workers:
                if w.state == "idle" and pending:
                    i = pending.popleft()
                    w.state, w.call = "busy", i
                    w.send(lines[i], time.monotonic() + wall)
            active = [w for w in self._workers if w.state in ("starting", "busy")]
            if not active and not pending:
                return
            if not active:  # pending calls but no worker to take them: cannot happen
                while pending:
                    results[pending.popleft()] = GradeResult(None, {}, "found no worker")
                return
            timeout = max(0.0, min(w.deadline for w in active) - time.monotonic())
            with selectors.DefaultSelector() as sel:
                for w in self._workers:
                    sel.register(w.stdout, selectors.EVENT_READ, (w, "read"))
                    if w.outbuf:
                        sel.register(w.stdin, selectors.EVENT_WRITE, (w, "write"))
                ready = sel.select(timeout)
            for key, _mask in ready:
                w, what = key.data
                if w.state == "dead":
                    continue
                if what == "write":
                    w.flush()  # a closed stdin shows as the end of its output
                else:
                    got = w.read()
                    if got is None:
                        if w.state == "idle" and self._module is None:
                            w.end()  # a probe leaves once it has reported
                            self._workers.remove(w)
                        else:
                            self._ended(w, w.death_reason(self.limits.memory_bytes), results)
                        continue
                    for line in got:
                        if w.state != "dead":
                            self._on_line(w, line, results)
                    if len(w.inbuf) > MAX_RESULT_BYTES and w.state != "dead":
                        self._ended(w, f"sent a result over {MAX_RESULT_BYTES // MiB} MiB", results)
            now = time.monotonic()
            for w in list(self._workers):
                if w.state in ("starting", "busy") and now >= w.deadline:
                    self._ended(w, f"exceeded its {_fmt(wall)} s wall-clock limit", results)
            for w in self._workers:
                if w.outbuf:
                    w.flush()  # a closed stdin shows as the end of its output


def isolation_report(limits: Limits | None = None, hidden: Sequence[Path] = ()) -> dict[str, str]:
    """What is and is not isolated for a grader on this machine, checked by starting a
    worker that isolates itself and reports (no grader code runs).

    Args:
        limits: the limits to describe (:data:`DEFAULT_LIMITS` when None).
        hidden: paths to hide, as a pool would be given.

    Returns:
        ``{"network", "files", "imports", "environment", "memory", "cpu", "wall_clock",
        "processes", "disk"}``: each a sentence starting ``isolated:``, ``limited:``,
        ``partly:`` or ``not isolated:``/``not limited:``.
    """
    limits = limits or DEFAULT_LIMITS
    with tempfile.TemporaryDirectory(prefix="akka-grader-probe-") as empty:
        pool = GraderPool(
            Path(empty),
            "probe",
            "probe",
            Limits(
                cpu_seconds=limits.cpu_seconds,
                wall_seconds=limits.wall_seconds,
                memory_bytes=limits.memory_bytes,
                workers=1,
            ),
            hidden,
        )
        pool._module = None
        with pool:
            report = dict(pool.isolation)
    if not report:
        report = {
            "network": "not isolated: the probe worker did not report",
            "files": "not isolated: the probe worker did not report",
            "imports": "unknown: the probe worker did not report",
        }
    report.update(_limit_sentences(limits))
    return report
