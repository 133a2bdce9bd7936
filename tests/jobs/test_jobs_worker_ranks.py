"""A rank other than 0 that fails tells the service why (issue 23: its sentence used to
reach only its log, while the run said "the worker exited with code 1")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from akka_optimize.jobs import worker
from akka_optimize.jobs.spec import JobSpec


def _spec(tmp_path: Path) -> JobSpec:
    return JobSpec(
        run_id="r1", attempt=2, callback_url="http://service.invalid:9001", token="ak_w_x",
        blobs_url=f"file://{tmp_path / 'blobs'}", model_dir="", dataset={}, state_prefix="",
        extra={"work_dir": str(tmp_path / "work")},
    )  # fmt: skip


def _posts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    sent: list[tuple[str, dict[str, Any]]] = []

    def post(url: str, json: dict[str, Any], headers: dict[str, str], timeout: float) -> Any:
        assert headers == {"Authorization": "Bearer ak_w_x"}
        sent.append((url, json))
        return httpx.Response(200, json={"control": None})

    monkeypatch.setattr(httpx, "post", post)
    return sent


def _failing(message: str) -> Any:
    def train(spec: JobSpec, store: Any, events: Any, work: Path) -> dict[str, Any]:
        events.send({"type": "phase", "phase": "RUNNING"})  # dropped on ranks other than 0
        raise MemoryError(message)

    return lambda name: train


@pytest.mark.parametrize("rank", ["1", "3"])
def test_a_failing_rank_sends_its_sentence_naming_the_rank(monkeypatch, tmp_path, rank):
    sent = _posts(monkeypatch)
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setattr(worker, "entry_point", _failing("no room"))
    assert worker.run(_spec(tmp_path)) == 1
    ((url, event),) = sent  # only the failure; the rank's other events stay dropped
    assert url == "http://service.invalid:9001/v1/training/runs/r1/attempts/2/events"
    assert event["type"] == "failed"
    assert event["reason"] == (
        f"Rank {rank} of 4: The run ran out of host memory; a smaller "
        "config.hyperparams.training.microBatchPerGpu or config.maxSeqLength uses less."
    )
    assert "MemoryError: no room" in event["detail"]


def test_rank_0_sends_its_events_and_its_failure_unprefixed(monkeypatch, tmp_path):
    sent = _posts(monkeypatch)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(worker, "entry_point", _failing("no room"))
    assert worker.run(_spec(tmp_path)) == 1
    assert [e["type"] for _, e in sent] == ["phase", "failed"]
    assert sent[1][1]["reason"].startswith("The run ran out of host memory")
