"""The fork server (akka_optimize/forkserver.py): a forked worker is the process a fresh
interpreter would be (its arguments, environment, log, session, exit code and command line);
the local executor forks single-device CPU job workers from it, and the serving code its
endpoint workers where they can use no GPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from akka_optimize import forkserver
from akka_optimize.forkserver import ForkServer

PROBE = """
import json, os, sys, time

def main():
    if sys.argv[1] == "sleep":
        print("sleeping", flush=True)
        time.sleep(600)
    print(json.dumps({"argv": sys.argv[1:], "probe": os.environ.get("PROBE"),
                      "service_only": os.environ.get("SERVICE_ONLY"),
                      "own_session": os.getsid(0) == os.getpid(),
                      "cmdline": open("/proc/self/cmdline", "rb").read().decode()}))
    sys.exit(int(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """A fork server that can import the probe module (its folder on PYTHONPATH)."""
    tmp = tmp_path_factory.mktemp("forkserver")
    (tmp / "probe_main.py").write_text(PROBE)
    path = os.pathsep.join([str(tmp), *sys.path])
    fs = ForkServer(dict(os.environ, PYTHONPATH=path, SERVICE_ONLY="1"))
    try:
        yield fs
    finally:
        fs.stop()


def test_a_forked_worker_has_its_arguments_environment_log_session_and_exit_code(
    server: ForkServer, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    env = {"PROBE": "attempt-env", "PATH": os.environ["PATH"]}
    pid = server.fork("probe_main", ["3"], env, str(log))
    assert server.exit_code(pid, timeout=60) == 3
    seen = json.loads(log.read_text().splitlines()[-1])
    assert seen["argv"] == ["3"]
    assert seen["probe"] == "attempt-env" and seen["service_only"] is None  # the attempt's env
    assert seen["own_session"] is True  # killpg(pid) stops it and nothing else
    assert seen["cmdline"].rstrip("\0").endswith("-m probe_main 3")  # what `ps` shows


def test_a_killed_worker_reports_the_signal_like_popen(server: ForkServer, tmp_path) -> None:
    log = tmp_path / "worker.log"
    pid = server.fork("probe_main", ["sleep"], {"PATH": os.environ["PATH"]}, str(log))
    assert server.exit_code(pid, timeout=0.5) is None  # still running
    os.killpg(pid, signal.SIGKILL)
    assert server.exit_code(pid, timeout=60) == -signal.SIGKILL


def test_two_workers_at_once_are_two_processes(server: ForkServer, tmp_path) -> None:
    env = {"PATH": os.environ["PATH"]}
    a = server.fork("probe_main", ["0"], env, str(tmp_path / "a.log"))
    b = server.fork("probe_main", ["1"], env, str(tmp_path / "b.log"))
    assert a != b
    assert (server.exit_code(a, 60), server.exit_code(b, 60)) == (0, 1)


RETURNS = """
import sys

def main():
    if sys.argv[1] == "sleep":
        import time
        print("sleeping", flush=True)
        time.sleep(600)
    return int(sys.argv[1])
"""


@pytest.fixture
def shared_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A runtime's fork server (:class:`forkserver.Forker`), able to import the probe
    modules, and the folder it logs to; ended after the test."""
    (tmp_path / "returns_main.py").write_text(RETURNS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    forker = forkserver.Forker()
    yield forker, tmp_path
    forker.stop()


def test_what_main_returns_is_the_exit_code_and_a_forked_process_acts_like_popen(
    shared_server: tuple[forkserver.Forker, Path],
) -> None:
    """``sys.exit(main())`` semantics (the serving worker returns 1 when it cannot start),
    and the Popen-like handle the serving code keeps: poll, wait with a timeout,
    terminate."""
    forker, logs = shared_server
    env = {"PATH": os.environ["PATH"]}
    done = forker.fork("returns_main", ["4"], env, logs / "a.log")
    assert done is not None and done.wait(timeout=60) == 4 and done.poll() == 4
    running = forker.fork("returns_main", ["sleep"], env, logs / "b.log")
    assert running is not None and running.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        running.wait(timeout=0.2)
    running.terminate()
    assert running.wait(timeout=60) == -signal.SIGTERM


def test_a_stopped_fork_server_leaves_its_workers_running_and_starts_again_on_the_next_fork(
    shared_server: tuple[forkserver.Forker, Path],
) -> None:
    """The runtime stops its fork server at shutdown (service/runtime.close): a worker it
    forked goes on (as a worker of an earlier service process), and a later fork starts a
    new server."""
    forker, logs = shared_server
    env = {"PATH": os.environ["PATH"]}
    running = forker.fork("returns_main", ["sleep"], env, logs / "c.log")
    assert running is not None
    first = running.server.proc.pid
    forker.stop()
    assert running.server.proc.poll() is not None  # the server is gone
    assert forkserver.pid_exists(running.pid)  # its worker goes on
    os.kill(running.pid, signal.SIGKILL)
    again = forker.fork("returns_main", ["5"], env, logs / "d.log")
    assert again is not None and again.server.proc.pid != first
    assert again.wait(timeout=60) == 5


def test_workers_that_could_use_a_gpu_start_fresh(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv(forkserver.FORK_WORKERS_ENV, raising=False)
    monkeypatch.setattr(forkserver, "_GPU_NODES", (str(tmp_path / "absent"),))
    assert forkserver.may_fork({})  # no GPU driver on this machine
    (tmp_path / "nvidiactl").touch()
    monkeypatch.setattr(forkserver, "_GPU_NODES", (str(tmp_path / "nvidiactl"),))
    assert not forkserver.may_fork({})  # a GPU the worker could use
    assert not forkserver.may_fork({"CUDA_VISIBLE_DEVICES": "0"})
    assert forkserver.may_fork({"CUDA_VISIBLE_DEVICES": ""})  # every device hidden
    monkeypatch.setenv(forkserver.FORK_WORKERS_ENV, "0")
    assert not forkserver.may_fork({"CUDA_VISIBLE_DEVICES": ""})
