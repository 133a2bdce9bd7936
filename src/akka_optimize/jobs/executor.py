"""Executors start a worker per attempt. ``local`` runs a subprocess on this machine;
a Ray executor would place the same worker on a cluster node (DESIGN.md)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any, Protocol

from .. import forkserver
from ..forkserver import FORK_WORKERS_ENV as FORK_WORKERS_ENV
from .spec import spec_ranks, worker_command


class Executor(Protocol):
    """Starts and watches workers."""

    name: str

    def launch(self, spec_path: Path, log_path: Path, device: str) -> int:
        """Start a worker for the spec; returns its process id."""
        ...

    def start(self, cmd: list[str], env: dict[str, str], log_path: Path, device: str) -> int:
        """Start ``cmd`` with exactly ``env`` (an endpoint's serving worker), its output
        appended to ``log_path``; returns the handle ``alive``/``exit_code``/``kill`` take."""
        ...

    def alive(self, pid: int) -> bool:
        """Whether the worker ``pid`` still runs."""
        ...

    def exit_code(self, pid: int) -> int | None:
        """The worker's exit code when known (negative: killed by that signal)."""
        ...

    def kill(self, pid: int) -> None:
        """Stop the worker now."""
        ...

    def collect(self) -> None:
        """Release workers that have exited (their exit codes stay known)."""
        ...


class LocalExecutor:
    """One subprocess per attempt, in its own process group (a run on N devices: the
    ``torch.distributed.run`` launcher and its N ranks, :func:`worker_command`); CUDA
    devices 0..N-1 when on a GPU, unless ``CUDA_VISIBLE_DEVICES`` names them.

    A single-device CPU attempt is forked from the runtime's fork server (``forker``,
    :class:`akka_optimize.forkserver.Forker`, started on the first such launch), which has
    torch, transformers and peft imported already; where it cannot fork, the attempt starts
    as a fresh interpreter. CUDA attempts always start fresh (a process must not fork after
    CUDA is initialised)."""

    name = "local"

    def __init__(self, forker: forkserver.Forker) -> None:
        self.forker = forker
        self._procs: dict[int, subprocess.Popen[bytes] | forkserver.ForkedProcess] = {}
        self._codes: dict[int, int] = {}

    def launch(self, spec_path: Path, log_path: Path, device: str) -> int:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        cmd = worker_command(spec_path)  # several devices: under torch.distributed.run
        if device == "cuda":
            ranks = range(spec_ranks(spec_path))
            env.setdefault("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in ranks))
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
            if cmd[1:3] == ["-m", "akka_optimize.jobs.worker"]:  # one rank
                pid = self._fork_worker(cmd[3:], env, log_path)
                if pid is not None:
                    return pid
        return self.start(cmd, env, log_path, device)

    def _fork_worker(self, args: list[str], env: dict[str, str], log_path: Path) -> int | None:
        """The worker forked from the fork server, or None where it cannot be."""
        if not forkserver.may_fork(env):
            return None
        proc = self.forker.fork("akka_optimize.jobs.worker", args, env, log_path)
        if proc is None:
            return None
        self._procs[proc.pid] = proc  # watched like a Popen (ForkedProcess.poll)
        return proc.pid

    def start(self, cmd: list[str], env: dict[str, str], log_path: Path, device: str) -> int:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self._procs[proc.pid] = proc
        return proc.pid

    def alive(self, pid: int) -> bool:
        proc = self._procs.get(pid)
        if proc is not None:
            return proc.poll() is None
        try:  # a worker started by an earlier service process
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists():
            fields = stat.read_text().rsplit(")", 1)[-1].split()
            return bool(fields) and fields[0] != "Z"
        return True

    def exit_code(self, pid: int) -> int | None:
        proc = self._procs.get(pid)
        if proc is not None:
            return proc.poll()
        return self._codes.get(pid)

    def collect(self) -> None:
        """Wait for every worker that has exited, so none stays a zombie of the service
        (a worker that ended its run by event is never polled again otherwise)."""
        for pid, proc in list(self._procs.items()):
            code = proc.poll()
            if code is not None:
                self._codes[pid] = code
                del self._procs[pid]

    def kill(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:  # a forked worker of ours not yet in its own group
            proc = self._procs.get(pid)
            if proc is not None and proc.poll() is None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        except PermissionError:
            pass


def make_executor(settings: Any, forker: forkserver.Forker) -> Executor:
    """The executor the deployment's ``executor`` section names (``local`` by default,
    forking its CPU workers with ``forker``; ``ray``:
    :class:`akka_optimize.jobs.ray_executor.RayExecutor`)."""
    if settings is not None and settings.kind == "ray":
        from .ray_executor import RayExecutor  # lazy: guarded

        return RayExecutor(settings)
    return LocalExecutor(forker)
