"""What the grader sandbox takes and gives: :class:`Limits` and :class:`GradeResult`.

Also the sentences a pool reports its limits with (:func:`_limit_sentences`, part of
:func:`akka_optimize.evals.sandbox.pool.isolation_report`) and the check of a worker's answer
(:func:`_result`: a worker runs user code, so its output is not trusted). The pool itself is
:class:`akka_optimize.evals.sandbox.pool.GraderPool`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MiB = 2**20

STARTUP_GRACE_SECONDS = 5.0
"""Seconds a worker may take to start and isolate itself, on top of the wall-clock limit
its import has."""


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


def fmt(seconds: float) -> str:
    return f"{seconds:g}"


def limit_sentences(limits: Limits) -> dict[str, str]:
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
            f"limited: {fmt(limits.cpu_seconds)} s of CPU time per call and for the import "
            "(a SIGPROF timer, RLIMIT_CPU as a backstop)"
        ),
        "wall_clock": (
            f"limited: {fmt(limits.wall_seconds)} s per call and for the import; the pool "
            "kills a worker that runs over and starts a fresh one for the next call"
        ),
        "disk": "not limited: a grader may write into its scratch folder, removed afterwards",
    }


def result(message: Any) -> GradeResult:
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
