"""The local executor leaves no exited worker behind as a zombie."""

from __future__ import annotations

import time
from pathlib import Path

from akka_optimize.jobs.executor import LocalExecutor


def _state(pid: int) -> str | None:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def test_collect_waits_for_exited_workers_and_keeps_their_exit_code(tmp_path) -> None:
    ex = LocalExecutor()
    pid = ex.launch(tmp_path / "missing-spec.json", tmp_path / "worker.log", "cpu")
    deadline = time.monotonic() + 60
    while _state(pid) not in ("Z", None) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _state(pid) == "Z"  # exited, not yet waited for
    ex.collect()
    assert _state(pid) is None
    assert ex.exit_code(pid) not in (None, 0) and not ex.alive(pid)
