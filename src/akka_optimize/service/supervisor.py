"""``server start --workers N`` (N > 1): one supervisor, N API workers, one controller.

The supervisor (the ``server start`` process) prepares the home once
(:func:`akka_optimize.service.app.prepare_home`: migrations, leftovers removed), binds the
public socket and a loopback socket for the controller, and starts:

- N API workers (``role="api"``), each accepting on the shared public socket: they answer
  every route from the state store and start nothing; the routes whose state lives in one
  process go to the controller (:mod:`.controller_proxy`);
- one controller (``role="controller"``) on the loopback socket: the scheduler, the
  executors, the endpoint and base-model managers, the Tinker broker.

A process that exits while the service runs is started again (the controller with the
same socket, so the workers' forwarded requests wait in its backlog meanwhile); one that
exits within :data:`CRASH_WINDOW_S` of its start :data:`MAX_FAST_CRASHES` times in a row
stops the service with a sentence (a broken deployment file, a bad store URL). SIGTERM or
SIGINT stops the children (SIGTERM, then SIGKILL after 20 s) and then the supervisor.
The process IDs are in ``$AKKA_OPTIMIZE_HOME/server.json`` (``controller``, ``workers``,
``controllerStarts``). Each child ends itself when the supervisor is gone.

``GET /metrics`` answers for the whole service whichever API worker answers: every child
writes its counted series to ``$AKKA_OPTIMIZE_HOME/metrics-multiproc`` (emptied before the
children start; prometheus-client's multiprocess mode, :mod:`.metrics`), and the
supervisor tells prometheus-client of each child it reaps.

On SQLite every process writes through ``BEGIN IMMEDIATE`` with a busy timeout
(:mod:`akka_optimize.db.base`), so writers of several processes take turns: no write is
lost or doubled (tests/test_service_workers.py registers versions from several processes).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..settings import Settings
from .metrics import MULTIPROC_ENV, fresh_shared_dir, process_gone

CRASH_WINDOW_S = 10.0
"""A child that exits sooner than this after its start counts as a fast crash."""
MAX_FAST_CRASHES = 5
"""Fast crashes in a row of one child after which the service stops."""
STOP_GRACE_S = 20.0
"""How long a child has to stop after SIGTERM before SIGKILL."""


def _child_env(metrics_dir: Path | None = None) -> dict[str, str]:
    """This environment, with the folder this package was imported from first on
    ``PYTHONPATH`` (a child runs the same code as its supervisor) and, given
    ``metrics_dir``, prometheus-client's multiprocess folder set to it."""
    root = str(Path(__file__).resolve().parents[2])
    paths = [root, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
    if metrics_dir is not None:
        env[MULTIPROC_ENV] = str(metrics_dir)
    return env


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port`` 0: a free one), inheritable by
    the children. Raises OSError when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


@dataclass
class Child:
    """One child process: its role, its command line and its latest incarnation."""

    role: str
    cmd: list[str]
    fd: int
    proc: subprocess.Popen | None = None
    started_at: float = 0.0
    starts: int = 0
    fast_crashes: int = 0
    metrics_dir: Path | None = None

    def start(self) -> None:
        """Start (or start again) the child, passing it its listening socket."""
        env = _child_env(self.metrics_dir)
        self.proc = subprocess.Popen(self.cmd, pass_fds=(self.fd,), env=env)
        self.started_at = time.monotonic()
        self.starts += 1


@dataclass
class Supervisor:
    """Starts and watches the children (module docstring); :meth:`run` blocks."""

    home: Path
    children: list[Child] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def write_pids(self) -> None:
        """Record the children's process IDs in ``home/server.json``."""
        ctl = next(c for c in self.children if c.role == "controller")
        doc = {
            "supervisor": os.getpid(),
            "controller": ctl.proc.pid if ctl.proc else None,
            "controllerStarts": ctl.starts,
            "workers": [c.proc.pid for c in self.children if c.role == "api" and c.proc],
        }
        tmp = self.home / "server.json.tmp"
        tmp.write_text(json.dumps(doc))
        tmp.replace(self.home / "server.json")

    def run(self) -> int:
        """Start every child and restart those that exit until SIGTERM/SIGINT; returns the
        exit code (1 when a child kept crashing)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())
        for c in self.children:
            c.start()
        self.write_pids()
        code = 0
        try:
            while not self.stopping.wait(0.2):
                if not self._restart_exited():
                    code = 1
                    break
        finally:
            self.stop()
            (self.home / "server.json").unlink(missing_ok=True)
        return code

    def _restart_exited(self) -> bool:
        for c in self.children:
            if c.proc is None or c.proc.poll() is None:
                continue
            self._reaped(c)
            fast = time.monotonic() - c.started_at < CRASH_WINDOW_S
            c.fast_crashes = c.fast_crashes + 1 if fast else 0
            if c.fast_crashes >= MAX_FAST_CRASHES:
                print(f"The {c.role} process exited {c.fast_crashes} times within "
                      f"{CRASH_WINDOW_S:g} s of its start (exit code {c.proc.returncode}); "
                      "the service stops. Its log is above.", file=sys.stderr, flush=True)  # fmt: skip
                return False
            print(f"The {c.role} process {c.proc.pid} exited ({c.proc.returncode}); "
                  "starting it again.", file=sys.stderr, flush=True)  # fmt: skip
            if fast:
                time.sleep(min(0.5 * c.fast_crashes, 2.0))
            c.start()
            self.write_pids()
        return True

    def stop(self) -> None:
        """SIGTERM to every child, SIGKILL to those still running after the grace."""
        live = [c.proc for c in self.children if c.proc and c.proc.poll() is None]
        for p in live:
            p.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for p in live:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for c in self.children:
            self._reaped(c)

    @staticmethod
    def _reaped(c: Child) -> None:
        """``c``'s process has exited: its live gauges leave ``/metrics``'s sums."""
        if c.metrics_dir is not None and c.proc is not None:
            process_gone(c.proc.pid, c.metrics_dir)


def serve(host: str, port: int, workers: int, log_level: str) -> int:
    """Run the service as ``workers`` API processes and one controller (module docstring);
    blocks until stopped and returns the exit code. Raises OSError when ``host:port`` is
    taken."""
    from .app import prepare_home  # lazy: torch
    from .runtime import build_context, close  # lazy: torch

    settings = Settings.from_env()
    ctx = build_context(settings)
    try:
        prepare_home(ctx)
    finally:
        close(ctx)
    public, control = bind(host, port), bind("127.0.0.1", 0)
    metrics_dir = fresh_shared_dir(settings.home)
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    public_url = f"http://{shown}:{port}" if ":" not in shown else f"http://[{shown}]:{port}"
    control_url = f"http://127.0.0.1:{control.getsockname()[1]}"
    base = [sys.executable, "-m", "akka_optimize.service.supervisor", "--parent",
            str(os.getpid()), "--public-url", public_url, "--log-level", log_level]  # fmt: skip
    sup = Supervisor(home=settings.home)
    sup.children.append(
        Child(
            "controller",
            [*base, "--role", "controller", "--fd", str(control.fileno())],
            control.fileno(),
            metrics_dir=metrics_dir,
        )  # fmt: skip
    )
    for _ in range(workers):
        cmd = [*base, "--role", "api", "--fd", str(public.fileno()), "--controller-url",
               control_url]  # fmt: skip
        sup.children.append(Child("api", cmd, public.fileno(), metrics_dir=metrics_dir))
    return sup.run()


def _watch_parent(parent: int, server: object) -> None:
    """End this child (uvicorn's graceful exit) when the supervisor is gone."""
    while os.getppid() == parent:
        time.sleep(1.0)
    server.should_exit = True  # type: ignore[attr-defined]


def child_main(argv: list[str] | None = None) -> None:
    """One child process: ``--role api|controller --fd N`` serves the app of that role on
    the inherited listening socket ``N``."""
    import uvicorn

    from .app import create_app  # lazy: torch
    from .connections import protocol_class  # lazy: uvicorn

    ap = argparse.ArgumentParser(prog="akka_optimize.service.supervisor")
    ap.add_argument("--role", choices=("api", "controller"), required=True)
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--public-url", required=True)
    ap.add_argument("--controller-url")
    ap.add_argument("--log-level", default="info")
    args = ap.parse_args(argv)
    os.umask(0o077)
    sock = socket.socket(fileno=args.fd)
    app = create_app(Settings.from_env(), role=args.role, controller_url=args.controller_url)
    app.state.ctx.base_url = args.public_url
    config = uvicorn.Config(
        app, log_level=args.log_level, http=protocol_class(), timeout_keep_alive=5
    )
    server = uvicorn.Server(config)
    threading.Thread(target=_watch_parent, args=(args.parent, server), daemon=True).start()
    server.run(sockets=[sock])


if __name__ == "__main__":
    child_main()
