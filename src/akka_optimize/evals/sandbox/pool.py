"""Run a bundle's grader outside the service's process, with limits.

A grader is the user's code: veRL's reward-function convention (``verl/utils/reward_score``),
``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` returning a
number (``int``/``bool`` too, not NaN or infinite) or a dict with a numeric ``score`` whose
other JSON keys become the example's ``details``. It is called with keyword arguments.

:class:`GraderPool` keeps ``Limits.workers`` worker processes
(:mod:`akka_optimize.evals.sandbox.child`, a folder run by path as ``python -I -S -B``) that
talk JSON lines over pipes. Each worker:

- works in a fresh scratch folder holding a copy of the bundle's regular files (links and
  special files are left out); that folder is its cwd, ``HOME``, ``TMPDIR`` and first
  ``sys.path`` entry; the standard library is the only other thing importable;
- gets an environment of ``PATH`` (a fixed system path), ``LANG=C.UTF-8``, ``HOME`` and
  ``TMPDIR``, nothing of the service's (no ``AKKA_*``, no token);
- isolates itself before importing the grader (namespaces, empty mounts over the paths in
  ``hidden``, uid 65534 when started as root; see
  :func:`akka_optimize.evals.sandbox.child.isolate` and :func:`isolation_report`);
- has ``RLIMIT_AS`` set to ``memory_bytes``, a CPU budget of ``cpu_seconds`` per call and
  the import, and a wall-clock limit of ``wall_seconds`` per call that the pool enforces by
  killing the worker; the next call gets a fresh worker.

Every failure is one example's error (:class:`GradeResult.error`), never an exception of
the pool: a grader that raises, hangs, spins, allocates too much, returns a non-number, or
kills its worker fails the call it was running, and the others in the batch still score.
A module that cannot be imported makes every call an error with that reason.

The pool's parts: :mod:`akka_optimize.evals.sandbox.records` (:class:`Limits`,
:class:`GradeResult`), :mod:`akka_optimize.evals.sandbox.scratch` (the scratch folders) and
:mod:`akka_optimize.evals.sandbox.workers` (one worker process); this module drives them.
"""

from __future__ import annotations

import json
import keyword
import os
import selectors
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .records import DEFAULT_LIMITS, MiB, fmt, limit_sentences, result
from .records import GradeResult as GradeResult
from .records import Limits as Limits
from .scratch import scratch_base
from .workers import Worker

MAX_RESULT_BYTES = 4 * MiB
"""The most bytes one result line from a worker may take."""


def _is_identifier(name: str) -> bool:
    return name.isascii() and name.isidentifier() and not keyword.iskeyword(name)


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
        self._workers: list[Worker] = []
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
            base = scratch_base(self.hidden)
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
            self._workers.append(Worker(self, self._serial))
        except OSError as exc:
            self._import_error = f"could not start a grader worker: {exc}"

    def _ended(self, w: Worker, reason: str, results: list[GradeResult | None]) -> None:
        """A worker is gone: its call (or the import) fails with ``reason``."""
        if w.state == "starting" and self._module is not None:
            self._import_error = f"importing {self.module} {reason}"
        elif w.state == "busy" and w.call is not None:
            results[w.call] = GradeResult(None, {}, reason)
        w.end()
        self._workers.remove(w)

    def _on_line(self, w: Worker, line: bytes, results: list[GradeResult | None]) -> None:
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
                        **limit_sentences(self.limits),
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
                results[w.call] = result(message)
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
                    self._ended(w, f"exceeded its {fmt(wall)} s wall-clock limit", results)
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
    report.update(limit_sentences(limits))
    return report
