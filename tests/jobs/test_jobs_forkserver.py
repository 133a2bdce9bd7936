"""The fork server (jobs/forkserver.py): a forked worker is the process a fresh
interpreter would be (its arguments, environment, log, session, exit code and command line),
and the local executor forks single-device CPU workers from it."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from akka_optimize.jobs.forkserver import ForkServer

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
