"""Start, watch and stop an endpoint worker process (:mod:`akka_optimize.serving.worker`)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx


@dataclass
class WorkerProcess:
    """A started worker: its folder (spec, status file, log), token and process.

    ``phase`` (from the status file) is ``loading``, ``ready`` or ``failed``;
    ``message`` says what the model is doing while it starts.
    """

    folder: Path
    token: str
    proc: subprocess.Popen
    port: int | None = None
    started_at: float = field(default_factory=time.monotonic)

    @property
    def url(self) -> str:
        """The worker's base address (``http://127.0.0.1:PORT``)."""
        return f"http://127.0.0.1:{self.port}"

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
            tail = self.log_tail()
            st = {
                "phase": "failed",
                "message": f"the worker exited ({self.proc.returncode}): {tail}",
            }
        if st.get("port"):
            self.port = int(st["port"])
        return st

    def log_tail(self, chars: int = 1500) -> str:
        """The end of the worker's log."""
        try:
            return (self.folder / "worker.log").read_text()[-chars:].strip()
        except OSError:
            return ""

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
        """Terminate the worker (SIGTERM, then SIGKILL after ``timeout`` s)."""
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


def start_worker(
    spec: dict[str, Any], folder: Path, env: dict[str, str] | None = None
) -> WorkerProcess:
    """Write ``spec`` to ``folder`` and start ``python -m akka_optimize.serving.worker``.

    The worker gets a fresh random token (``AKKA_SERVING_TOKEN``); its output goes
    to ``folder/worker.log``. Returns at once; use :meth:`WorkerProcess.wait_ready`.
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
    log = open(folder / "worker.log", "ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "akka_optimize.serving.worker",
            "--spec",
            str(folder / "spec.json"),
            "--status-file",
            str(status),
        ],
        env=penv,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    return WorkerProcess(folder=folder, token=token, proc=proc)
