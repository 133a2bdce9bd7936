"""Start, watch and stop an endpoint worker process (:mod:`akka_optimize.serving.worker`)."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from .. import forkserver


class Placer(Protocol):
    """What places a serving worker elsewhere than this machine: a job executor's ``start``,
    ``exit_code`` and ``kill`` (:class:`akka_optimize.jobs.ray_executor.RayExecutor`)."""

    def start(self, cmd: list[str], env: dict[str, str], log_path: Path, device: str) -> int:
        """Start ``cmd``; returns a handle."""
        ...

    def alive(self, pid: int) -> bool:
        """Whether the command still runs."""
        ...

    def exit_code(self, pid: int) -> int | None:
        """The command's exit code once it has ended, when known."""
        ...

    def kill(self, pid: int) -> None:
        """Stop the command now."""
        ...


class PlacedProcess:
    """A serving worker started by a :class:`Placer`, answering as much of
    :class:`subprocess.Popen` as :class:`WorkerProcess` uses (``pid``, ``poll``,
    ``returncode``, ``wait``). An ended command with no exit code (its node or actor gone)
    reads as killed (``-SIGKILL``). While the cluster does not answer, the placer says the
    worker is alive (:class:`~akka_optimize.jobs.ray_executor.RayExecutor`)."""

    def __init__(self, placer: Placer, handle: int) -> None:
        self.placer, self.pid = placer, handle
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once the worker has ended, else None."""
        if self.returncode is None and not self.placer.alive(self.pid):
            code = self.placer.exit_code(self.pid)
            self.returncode = -signal.SIGKILL if code is None else code
        return self.returncode

    def kill(self) -> None:
        """Stop the worker and its actor."""
        self.placer.kill(self.pid)
        if self.returncode is None:
            self.returncode = -signal.SIGKILL

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code (the worker is stopped first: a placed worker is only waited for
        when it is being stopped)."""
        if self.poll() is None:
            self.kill()
        return self.returncode


@dataclass
class WorkerProcess:
    """A started worker: its folder (spec, status file, log), token and process.

    ``phase`` (from the status file) is ``loading``, ``ready`` or ``failed``;
    ``message`` says what the model is doing while it starts. ``host`` is the address the
    worker listens on (``127.0.0.1``, or its node's on a cluster).
    """

    folder: Path
    token: str
    proc: subprocess.Popen | PlacedProcess | forkserver.ForkedProcess
    port: int | None = None
    started_at: float = field(default_factory=time.monotonic)
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        """The worker's base address (``http://HOST:PORT``)."""
        return f"http://{self.host}:{self.port}"

    def headers(self) -> dict[str, str]:
        """The worker's bearer token header."""
        return {"Authorization": f"Bearer {self.token}"}

    def status(self) -> dict[str, Any]:
        """``{"phase", "message", "port"}``; ``failed`` with the log tail when it exited."""
        path = self.folder / "status.json"
        try:
            st = json.loads(path.read_text())
        except (OSError, ValueError):
            st = {"phase": "loading", "message": "starting the worker process"}
        if self.proc.poll() is not None and st.get("phase") != "failed":
            st = {
                "phase": "failed",
                "message": exit_sentence(self.proc.returncode, self.log_tail()),
            }
        if st.get("port"):
            self.port = int(st["port"])
        if st.get("host"):
            self.host = str(st["host"])
        return st

    def log_tail(self, lines: int = 3) -> str:
        """The last ``lines`` lines of the worker's log that say something: progress bars
        and Python warnings are left out (the whole log stays in ``worker.log``)."""
        try:
            text = (self.folder / "worker.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(meaningful_lines(text)[-lines:])

    def wait_ready(self, timeout: float = 300.0) -> dict[str, Any]:
        """Block until the worker answers ``/health`` or fails.

        Raises:
            RuntimeError: the worker failed, or did not get ready within ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status()
            if st["phase"] == "failed":
                raise RuntimeError(st["message"])
            if st["phase"] == "ready":
                try:
                    r = httpx.get(self.url + "/health", headers=self.headers(), timeout=5)
                    if r.status_code == 200:
                        return r.json()
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"the worker did not get ready within {timeout:.0f}s")

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the worker (SIGTERM, then SIGKILL after ``timeout`` s; a placed worker
        is killed with its actor)."""
        if isinstance(self.proc, PlacedProcess):
            self.proc.kill()
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


_NOISE = re.compile(r"it/s\]|s/it\]|^\s*warnings\.warn\(|Warning: |^\s*$")


def meaningful_lines(log: str) -> list[str]:
    """The lines of a worker log minus progress bars (``\\r``-updated) and warnings."""
    out = []
    for raw in log.splitlines():
        line = raw.rsplit("\r", 1)[-1].rstrip()
        if not _NOISE.search(line):
            out.append(line)
    return out


def exit_sentence(returncode: int, tail: str) -> str:
    """Why a worker process ended, for the endpoint's ``error``."""
    if returncode == -signal.SIGKILL:
        why = "the worker was killed (SIGKILL; the machine may have run out of memory)"
    elif returncode < 0:
        why = f"the worker was stopped by {signal.Signals(-returncode).name}"
    else:
        why = f"the worker exited with status {returncode}"
    return f"{why}: {tail}" if tail else why


def start_worker(
    spec: dict[str, Any],
    folder: Path,
    forker: forkserver.Forker,
    env: dict[str, str] | None = None,
    placer: Placer | None = None,
    device: str = "cpu",
) -> WorkerProcess:
    """Write ``spec`` to ``folder`` and start ``python -m akka_optimize.serving.worker``
    (forked from the runtime's fork server ``forker``, :class:`akka_optimize.forkserver.Forker`,
    where it can use no GPU).

    The worker gets a fresh random token (``AKKA_SERVING_TOKEN``); its output goes
    to ``folder/worker.log``. With ``placer`` (a cluster executor) the worker runs where
    the placer puts it, reserving one ``device`` (``cpu`` | ``cuda``); ``folder`` must then
    be on storage the node shares. Returns at once; use :meth:`WorkerProcess.wait_ready`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.json").write_text(json.dumps(spec, indent=2))
    status = folder / "status.json"
    status.unlink(missing_ok=True)
    token = secrets.token_urlsafe(24)
    penv = dict(os.environ if env is None else env)
    penv["AKKA_SERVING_TOKEN"] = token
    penv.setdefault("TOKENIZERS_PARALLELISM", "false")
    penv.setdefault("HF_HUB_OFFLINE", "1")
    cmd = [
        sys.executable,
        "-m",
        "akka_optimize.serving.worker",
        "--spec",
        str(folder / "spec.json"),
        "--status-file",
        str(status),
    ]
    if placer is not None:
        handle = placer.start(cmd, penv, folder / "worker.log", device)
        return WorkerProcess(folder=folder, token=token, proc=PlacedProcess(placer, handle))
    if forkserver.may_fork(penv):  # no GPU it could use: fork it, its imports already done
        forked = forker.fork(cmd[2], cmd[3:], penv, folder / "worker.log")
        if forked is not None:
            return WorkerProcess(folder=folder, token=token, proc=forked)
    with open(folder / "worker.log", "ab") as log:
        proc = subprocess.Popen(
            cmd, env=penv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    return WorkerProcess(folder=folder, token=token, proc=proc)


def run_check(spec: Path, forker: forkserver.Forker, timeout: float = 900.0) -> dict[str, Any]:
    """The post-deploy check's trainer side (``python -m akka_optimize.serving.check
    --spec SPEC``) in its own process, on the CPU: forked from ``forker`` where it may
    fork (its torch, transformers and PEFT imports already done: about 5 s less per
    check), else a fresh interpreter. Returns the JSON it prints.

    Raises:
        RuntimeError: the check failed (the end of its stderr) or ran past ``timeout``
            seconds (it is killed).
    """
    out, err = spec.with_suffix(".out"), spec.with_suffix(".err")
    for f in (out, err):
        f.unlink(missing_ok=True)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    args = ["--spec", str(spec)]
    forked = None
    if forkserver.may_fork(env):
        forked = forker.fork("akka_optimize.serving.check", args, env, out, err=str(err))
    if forked is not None:
        try:
            code = forked.wait(timeout)
        except subprocess.TimeoutExpired:
            forked.kill()
            raise RuntimeError(f"the post-deploy check ran past {timeout:.0f} s") from None
        stdout = out.read_text() if out.exists() else ""
        stderr = err.read_text() if err.exists() else ""
    else:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "akka_optimize.serving.check", *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the post-deploy check ran past {timeout:.0f} s") from None
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    if code != 0 or not stdout.strip():
        raise RuntimeError(stderr.strip()[-500:] or f"the post-deploy check exited {code}")
    return json.loads(stdout.strip().splitlines()[-1])
