"""The grader worker: one process that imports a bundle's grader and scores calls.

Started only by :class:`akka_optimize.evals.sandbox.pool.GraderPool` as
``python -I -S -B .../sandbox_child`` (this folder by path, so nothing of the platform nor
any installed package is importable: the standard library, this folder's ``_sandbox_*``
modules and the bundle copy only). It imports the standard library and those sibling
modules alone, on purpose: :mod:`_sandbox_syscalls` (namespaces, mounts),
:mod:`_sandbox_isolation` (:func:`isolate`), :mod:`_sandbox_limits` (the CPU and memory
limits) and :mod:`_sandbox_results` (a grader's value as a result).

Protocol (JSON lines; stdin from the pool, stdout to it; the grader's own prints go to
stderr, which the pool keeps in a log file):

1. the pool sends the configuration ``{"scratch", "libdir", "hidden", "module",
   "function", "memory_bytes", "cpu_seconds", "parent"}``;
2. the worker isolates itself (:func:`isolate`), sets its limits, imports the module and
   answers ``{"ready": true, "isolation": {...}}`` or ``{"ready": false, "error": "..."}``;
3. per call the pool sends ``{"id", "args": {data_source, solution_str, ground_truth,
   extra_info}}`` and the worker answers ``{"id", "score", "details", "error"}``.
"""

import errno
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

# Run by path, this folder is sys.path[0]: the siblings import as top-level modules.
from _sandbox_isolation import isolate
from _sandbox_limits import (
    CpuLimit,
    _armed,
    _fmt,
    _memory_error,
    _reserve,
    _set_limits,
    arm,
    disarm,
)
from _sandbox_results import TRACEBACK_CHARS, _describe, _error, convert, last_line


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
