"""A fork server for workers: torch, transformers and peft imported once.

A job worker spends about 4 s of CPU importing torch, transformers and peft before its
first update (measured on the 2-core development machine: ``import torch, transformers,
peft`` takes 3.5 s user + 0.5 s system), which is most of a short run's start, and a
serving worker about 2.7 s. The service therefore starts this process once (its runtime's
:class:`Forker`), on the first CPU worker it needs; it imports those libraries and the workers' modules,
then forks one child per worker: single-device CPU attempts (``jobs/executor.py``) and
endpoint workers that will not use a GPU (``serving/process.py``). The child starts its
own session, writes to the worker's log, takes the worker's environment, and runs
``MODULE.main()`` with ``sys.argv`` as ``python -m MODULE ARGS`` would set it; an int that
``main()`` returns is its exit code, as ``sys.exit(main())`` would make it. (The test
suite keeps one more, with the CLI and the service imported: ``tests/forked_cli.py``.)

The protocol is JSON lines. Requests on standard input: ``{"module", "args", "env",
"log"}``, optionally ``"func"`` (the entry point, default ``main``), ``"argv0"`` (default
the module's name), ``"err"`` (a separate file for standard error), ``"stdin"`` (a file
to read instead of ``/dev/null``) and ``"cwd"``. Answers on standard output:
``{"ready": true}`` once after the imports, then ``{"pid": N}`` (or ``{"error": "…"}``)
per request, and ``{"exited": N, "code": C}`` when a child ends (``C`` as
:attr:`subprocess.Popen.returncode` gives it: negative for a signal). The loop is one
thread (no lock can be held across a fork) that sleeps until a request or a child's end
(SIGCHLD through a wake-up pipe) arrives; on end of input it exits and leaves its
children running (they are then watched by process ID, like the workers of an earlier
service process).

The server never initialises CUDA (its environment hides every GPU), and a worker that
may use one starts as a fresh interpreter instead (:func:`may_fork`): a process must not
fork once CUDA is initialised, and a child cannot see devices its parent hid.

Nothing here reads the environment at import time except what the service itself runs
with: the child's environment is the attempt's, which the executor derives from the
service's (``LocalExecutor.launch``).
"""

from __future__ import annotations

import atexit
import importlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, NoReturn

from setproctitle import getproctitle, setproctitle

PRELOAD = (
    "torch",
    "transformers",
    "peft",
    "akka_optimize.jobs.worker",
    "akka_optimize.serving.worker",
)
"""Modules imported before the first fork."""
FORK_WORKERS_ENV = "AKKA_OPTIMIZE_FORK_WORKERS"
"""``0`` starts every worker as a fresh interpreter (README, "Environment")."""
REPORT_WAIT_S = 5.0
"""How long a handle waits for the server's report of a worker already reaped."""
_GPU_NODES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")
"""Device files of an NVIDIA, AMD or WSL GPU driver: where none exists, no worker of
this machine can use a GPU."""


def _child(req: dict[str, Any]) -> None:
    """In the forked child: become the attempt's process and run its module; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        fd = os.open(req["log"], flags, 0o666)
        err = os.open(req["err"], flags, 0o666) if req.get("err") else fd
        inp = os.open(req.get("stdin") or os.devnull, os.O_RDONLY)
        os.dup2(inp, 0)
        os.dup2(fd, 1)
        os.dup2(err, 2)
        for opened in {fd, err, inp}:
            os.close(opened)
        if req.get("cwd"):
            os.chdir(req["cwd"])
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own streams)
        sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), write_through=True)  # noqa: SIM115
        sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), write_through=True)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(req["env"])
        threads = os.environ.get("OMP_NUM_THREADS")
        torch = sys.modules.get("torch")  # imported later, torch reads the variable itself
        if threads and threads.isdigit() and torch is not None:
            torch.set_num_threads(int(threads))
        argv0 = req.get("argv0")
        sys.argv = [argv0 or req["module"], *req["args"]]
        # `ps` and `pgrep -f` show the worker's command, as for a fresh interpreter
        command = [argv0] if argv0 else [sys.executable, "-m", req["module"]]
        setproctitle(" ".join([*command, *req["args"]]))
        try:
            entry = getattr(importlib.import_module(req["module"]), req.get("func") or "main")
            returned = entry()
            code = returned if isinstance(returned, int) else 0
        except SystemExit as exc:  # as the interpreter: an int, None (0) or a message (1)
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:  # noqa: BLE001 (the child reports and exits; nothing is above it)
        traceback.print_exc()
        code = 1
    finally:
        exit_now(code)


def exit_now(code: int) -> NoReturn:
    """Exit with ``code`` as an interpreter does at a normal exit (exit handlers:
    temporary folders, finalizers; flushed streams), but without its teardown."""
    try:
        atexit._run_exitfuncs()  # noqa: SLF001 (CPython's own exit path)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(code)


def _say(out: io.TextIOBase, answer: dict[str, Any]) -> None:
    out.write(json.dumps(answer) + "\n")
    out.flush()


def _reap(out: io.TextIOBase) -> None:
    """Report every child that has ended (without waiting for the others)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _say(out, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def serve(preload: tuple[str, ...] = PRELOAD) -> None:
    """Import ``preload``, say ready, then fork per request until input ends."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the protocol stream
    for name in preload:
        importlib.import_module(name)
    setproctitle(getproctitle())  # claims argv's memory now, before a child rewrites environ
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)  # a child's end wakes the select below
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _say(out, {"ready": True})
    buf = b""
    while True:
        readable, _, _ = select.select([0, wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
        _reap(out)
        if 0 not in readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            try:
                pid = os.fork()
            except OSError as exc:
                _say(out, {"error": f"fork failed: {exc}"})
                continue
            if pid == 0:
                os.close(wake_r)
                os.close(wake_w)
                _child(req)
            _say(out, {"pid": pid})


class ForkServer:
    """The service's side: starts :func:`serve` in a subprocess and asks it for workers.

    Args:
        env: the fork server's own environment (the service's).
        ready_timeout: seconds the imports may take before the server counts as broken.
        preload: the modules it imports before the first fork (:data:`PRELOAD`).

    Raises:
        RuntimeError: (from the constructor) the server did not say ready in time.
    """

    def __init__(
        self,
        env: dict[str, str],
        ready_timeout: float = 300.0,
        preload: tuple[str, ...] = PRELOAD,
    ) -> None:
        self._lock = threading.Lock()  # one request and its answer at a time
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "akka_optimize.forkserver", *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.codes: dict[int, int] = {}
        self._answers: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._closed = False
        threading.Thread(target=self._read, name="forkserver-reader", daemon=True).start()
        if self._answer(ready_timeout) is None:
            self.stop()
            raise RuntimeError("the fork server did not start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            with self._cond:
                if "exited" in msg:
                    self.codes[msg["exited"]] = msg["code"]
                else:
                    self._answers.append(msg)
                self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _answer(self, timeout: float) -> dict[str, Any] | None:
        with self._cond:
            self._cond.wait_for(lambda: self._answers or self._closed, timeout)
            return self._answers.pop(0) if self._answers else None

    def fork(
        self, module: str, args: list[str], env: dict[str, str], log: str, **options: str
    ) -> int:
        """A worker running ``python -m module args`` with ``env``, writing to ``log``;
        returns its process ID. ``options``: the protocol's optional keys (``func``,
        ``argv0``, ``err``, ``stdin``, ``cwd``; module docstring). Raises RuntimeError when
        the server cannot answer."""
        assert self.proc.stdin is not None
        req = {"module": module, "args": args, "env": env, "log": log, **options}
        with self._lock:
            try:
                self.proc.stdin.write((json.dumps(req) + "\n").encode())
                self.proc.stdin.flush()
            except OSError as exc:
                raise RuntimeError(f"the fork server has exited: {exc}") from exc
            answer = self._answer(30.0)
        if answer is None or "pid" not in answer:
            raise RuntimeError(f"the fork server did not fork: {answer}")
        return int(answer["pid"])

    def exit_code(self, pid: int, timeout: float = 0.0) -> int | None:
        """The exit code of ``pid`` once the server has reported it (waiting up to
        ``timeout`` seconds), else None."""
        with self._cond:
            self._cond.wait_for(lambda: pid in self.codes or self._closed, timeout)
            return self.codes.get(pid)

    def alive(self) -> bool:
        return self.proc.poll() is None and not self._closed

    def stop(self) -> None:
        """End the server (its children keep running)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class ForkedProcess:
    """A forked worker, answering as much of :class:`subprocess.Popen` as the service's
    worker handles use (``pid``, ``returncode``, ``poll``, ``wait``, ``terminate``,
    ``kill``). Its exit code is the fork server's report. As with ``Popen.poll``, a worker
    that no longer exists has a code: the server reaps it and reports within moments, so
    ``poll`` then waits up to :data:`REPORT_WAIT_S` for the report; with the server gone
    too, the code is lost and reads as killed (``-SIGKILL``)."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once the worker has ended, else None."""
        return self._code(0.0)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; raises :class:`subprocess.TimeoutExpired` after ``timeout`` s."""
        code = self._code(3600.0 * 24 if timeout is None else timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout or 0.0)
        return code

    def terminate(self) -> None:
        """SIGTERM to the worker."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the worker."""
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def _code(self, timeout: float) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, timeout)
        if self.returncode is None and not pid_exists(self.pid):  # reaped: its report is due
            code = self.server.exit_code(self.pid, REPORT_WAIT_S)
            self.returncode = -signal.SIGKILL if code is None else code
        return self.returncode


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def may_fork(env: dict[str, str]) -> bool:
    """Whether a worker with environment ``env`` may be forked from the fork server: not
    where ``AKKA_OPTIMIZE_FORK_WORKERS`` is ``0``, and not where it could use a GPU (this
    machine has a GPU driver and ``env`` does not hide every device)."""
    if os.environ.get(FORK_WORKERS_ENV, "1") == "0":
        return False
    return env.get("CUDA_VISIBLE_DEVICES") == "" or not any(
        Path(node).exists() for node in _GPU_NODES
    )


class Forker:
    """The fork server of one service's runtime (:class:`akka_optimize.core.context.ServiceContext`
    holds it; the executor and the endpoint manager fork their CPU workers with it).

    The server starts on the first :meth:`fork` (importing torch, transformers and peft
    takes seconds, so a service that never runs a CPU worker never pays for it) and again
    when it has died. It runs with this process's environment, every GPU hidden.
    :meth:`stop` ends it; workers it forked keep running (they are watched by process ID,
    like the workers of an earlier service process).
    """

    def __init__(self) -> None:
        self._server: ForkServer | None = None
        self._lock = threading.Lock()

    def fork(
        self, module: str, args: list[str], env: dict[str, str], log: Path, **options: str
    ) -> ForkedProcess | None:
        """``python -m module args`` forked from the fork server, or None where it cannot
        fork (the caller then starts a fresh interpreter). ``options``: as
        :meth:`ForkServer.fork`'s."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            try:
                if self._server is None or not self._server.alive():
                    self._server = ForkServer(dict(os.environ, CUDA_VISIBLE_DEVICES=""))
                server = self._server
                return ForkedProcess(server, server.fork(module, args, env, str(log), **options))
            except RuntimeError:
                self._server = None
                return None

    def stop(self) -> None:
        """End the fork server, if started (its children keep running)."""
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None


if __name__ == "__main__":
    serve(tuple(sys.argv[1:]) or PRELOAD)
