"""The grader worker's limits: a CPU budget per call, the address-space cap, no core dumps.

:func:`arm` and :func:`disarm` bracket each call (and the import) with a ``SIGPROF`` timer
and ``RLIMIT_CPU`` as a backstop; :class:`CpuLimit` is what user code sees when the budget
runs out. :data:`_reserve` is memory held back so a ``MemoryError`` can still be answered.
Standard library only: it runs in a worker started by path (``python -I -S -B``).
"""

import resource
import signal

_armed = [False]


class CpuLimit(BaseException):
    """Raised in the grader when its call used up its CPU time (``SIGPROF``/``SIGXCPU``).

    A ``BaseException``, so a grader's ``except Exception`` does not swallow it."""


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
