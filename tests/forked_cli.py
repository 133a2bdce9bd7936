"""The real CLI and service, forked with their imports done (issue 28 item 5).

A test that starts ``akka-optimize server start`` or runs a CLI command pays for a fresh
interpreter's imports each time (about 1.1 s of CPU for the service's modules, 0.3 s for
the CLI's), and the suite does that some hundreds of times on two cores. Each test process
therefore keeps one fork server (:class:`akka_optimize.forkserver.ForkServer`) that has
imported the CLI and the service, and runs each command as a forked child of it: the
same entry point (``akka_optimize.cli.main:main`` for ``akka-optimize``, ``akka_main`` for
``akka``) with ``sys.argv[0]`` the program's path, the test's environment, working folder,
standard input, and standard output and error in files read back like
:func:`subprocess.run` with ``capture_output=True, text=True`` gives them. The child takes
its own session, so ``killpg`` stops a forked service as it stopped a fresh one.

``AKKA_OPTIMIZE_TEST_FORK=0`` runs every command as a fresh subprocess instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from akka_optimize.forkserver import ForkedProcess, ForkServer

PRELOAD = ("akka_optimize.cli.main", "akka_optimize.service.app", "uvicorn", "httpx")
ENTRIES = {"akka-optimize": "main", "akka": "akka_main"}
"""The console scripts of pyproject.toml that run in ``akka_optimize.cli.main``."""

_server: ForkServer | None = None
_lock = threading.Lock()


def _fork_server() -> ForkServer | None:
    global _server
    if os.environ.get("AKKA_OPTIMIZE_TEST_FORK", "1") == "0":
        return None
    with _lock:
        if _server is None or not _server.alive():
            env = {k: v for k, v in os.environ.items() if not k.startswith("AKKA_")}
            _server = ForkServer(env, preload=PRELOAD)
        return _server


def start(
    cmd: list[str],
    env: dict[str, str],
    log: Path,
    stdin: Path | None = None,
    err: Path | None = None,
) -> ForkedProcess | None:
    """``cmd`` (a console script's path and its arguments) forked, writing standard output
    to ``log`` (and standard error too, unless ``err`` names its own file); None where it is
    not one of :data:`ENTRIES` or forking is off."""
    func = ENTRIES.get(Path(cmd[0]).name)
    server = _fork_server() if func else None
    if server is None or func is None:
        return None
    opts = {"func": func, "argv0": cmd[0], "cwd": os.getcwd()}
    if stdin is not None:
        opts["stdin"] = str(stdin)
    if err is not None:
        opts["err"] = str(err)
    pid = server.fork("akka_optimize.cli.main", cmd[1:], env, str(log), **opts)
    return ForkedProcess(server, pid)


def run(
    cmd: list[str], env: dict[str, str], timeout: float, input: str | None = None
) -> subprocess.CompletedProcess:
    """As ``subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
    input=input)``, forked where :func:`start` can."""
    with tempfile.TemporaryDirectory(prefix="cli-") as tmp:
        out, err, inp = Path(tmp) / "out", Path(tmp) / "err", Path(tmp) / "in"
        if input is not None:
            inp.write_text(input)
        proc = start(cmd, env, out, stdin=inp if input is not None else None, err=err)
        if proc is None:
            return subprocess.run(
                cmd, env=env, capture_output=True, text=True, timeout=timeout, input=input
            )
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
            raise subprocess.TimeoutExpired(cmd, timeout) from None
        return subprocess.CompletedProcess(cmd, code, out.read_text(), err.read_text())
