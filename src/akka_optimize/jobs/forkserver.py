"""A fork server for job workers: torch, transformers and peft imported once.

A job worker spends about 4 s of CPU importing torch, transformers and peft before its
first update (measured on the 2-core development machine: ``import torch, transformers,
peft`` takes 3.5 s user + 0.5 s system), which is most of a short run's start. The local
executor therefore starts this process once, on its first launch; it imports those
libraries and the worker's modules, then forks one child per single-device attempt. The
child starts its own session, writes to the attempt's log, takes the attempt's
environment, and runs ``MODULE.main()`` with ``sys.argv`` as ``python -m MODULE ARGS``
would set it.

The protocol is JSON lines. Requests on standard input: ``{"module", "args", "env",
"log"}``. Answers on standard output: ``{"ready": true}`` once after the imports, then
``{"pid": N}`` (or ``{"error": "…"}``) per request, and ``{"exited": N, "code": C}`` when
a child ends (``C`` as :attr:`subprocess.Popen.returncode` gives it: negative for a
signal). The loop is one thread (no lock can be held across a fork); on end of input it
exits and leaves its children running (they are then watched by process ID, like the
workers of an earlier service process).

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
import sys
import traceback
from typing import Any

from setproctitle import getproctitle, setproctitle

PRELOAD = ("torch", "transformers", "peft", "akka_optimize.jobs.worker")
"""Modules imported before the first fork."""


def _child(req: dict[str, Any]) -> None:
    """In the forked child: become the attempt's process and run its module; never returns."""
    code = 1
    try:
        os.setsid()
        fd = os.open(req["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own streams)
        sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), write_through=True)  # noqa: SIM115
        sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), write_through=True)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(req["env"])
        threads = os.environ.get("OMP_NUM_THREADS")
        if threads and threads.isdigit():
            import torch

            torch.set_num_threads(int(threads))
        sys.argv = [req["module"], *req["args"]]
        # `ps` and `pgrep -f` show the worker's command, as for a fresh interpreter
        setproctitle(" ".join([sys.executable, "-m", req["module"], *req["args"]]))
        try:
            importlib.import_module(req["module"]).main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int | None):
                print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 (the child reports and exits; nothing is above it)
        traceback.print_exc()
        code = 1
    finally:
        try:  # what an interpreter does at exit: temporary folders, finalizers
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


def serve() -> None:
    """Import :data:`PRELOAD`, say ready, then fork per request until input ends."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the protocol stream
    for name in PRELOAD:
        importlib.import_module(name)
    setproctitle(getproctitle())  # claims argv's memory now, before a child rewrites environ
    _say(out, {"ready": True})
    buf = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.2)
        _reap(out)
        if not readable:
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
                _child(req)
            _say(out, {"pid": pid})


class ForkServer:
    """The executor's side: starts :func:`serve` in a subprocess and asks it for workers.

    Args:
        env: the fork server's own environment (the service's).
        ready_timeout: seconds the imports may take before the server counts as broken.

    Raises:
        RuntimeError: (from the constructor) the server did not say ready in time.
    """

    def __init__(self, env: dict[str, str], ready_timeout: float = 300.0) -> None:
        import subprocess
        import threading

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "akka_optimize.jobs.forkserver"],
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

    def fork(self, module: str, args: list[str], env: dict[str, str], log: str) -> int:
        """A worker running ``python -m module args`` with ``env``, writing to ``log``;
        returns its process ID. Raises RuntimeError when the server cannot answer."""
        assert self.proc.stdin is not None
        req = {"module": module, "args": args, "env": env, "log": log}
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


if __name__ == "__main__":
    serve()
