"""The local executor leaves no exited worker behind as a zombie, whether it started the
worker itself or forked it from the fork server, and keeps its exit code."""

from __future__ import annotations

import time
from pathlib import Path

from akka_optimize import forkserver
from akka_optimize.jobs.executor import FORK_WORKERS_ENV, LocalExecutor


def _state(pid: int) -> str | None:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def test_collect_waits_for_exited_workers_and_keeps_their_exit_code(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(FORK_WORKERS_ENV, "0")  # a fresh interpreter, the service's child
    ex = LocalExecutor(forkserver.Forker())
    pid = ex.launch(tmp_path / "missing-spec.json", tmp_path / "worker.log", "cpu")
    deadline = time.monotonic() + 60
    while _state(pid) not in ("Z", None) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _state(pid) == "Z"  # exited, not yet waited for
    ex.collect()
    assert _state(pid) is None
    assert ex.exit_code(pid) not in (None, 0) and not ex.alive(pid)


def test_a_forked_worker_is_reaped_by_the_fork_server_and_keeps_its_exit_code(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv(FORK_WORKERS_ENV, raising=False)
    ex = LocalExecutor(forkserver.Forker())  # this test's own fork server
    try:
        pid = ex.launch(tmp_path / "missing-spec.json", tmp_path / "worker.log", "cpu")
        assert isinstance(ex._procs[pid], forkserver.ForkedProcess)  # noqa: SLF001 (forked)
        deadline = time.monotonic() + 60
        while _state(pid) is not None:
            assert time.monotonic() < deadline, f"worker {pid} not reaped: {_state(pid)}"
            time.sleep(0.1)
        assert not ex.alive(pid)
        assert ex.exit_code(pid) == 1  # the worker's own refusal of a missing spec
        assert "missing-spec.json" in (tmp_path / "worker.log").read_text()
    finally:
        ex.forker.stop()
