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
    assert event["type"] == "failed" and event["rank"] == int(rank)
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


def _running() -> tuple[Any, Any]:
    from akka_optimize.db.models.jobs import Run, RunAttempt

    run = Run(id="r1", state="RUNNING", results={})
    return run, RunAttempt(run_id="r1", number=2, state="RUNNING")


RANK_1 = "Rank 1 of 2: The run ran out of host memory; a smaller microBatchPerGpu uses less."


def test_a_rank_s_failure_waits_for_rank_0_and_names_the_cause() -> None:
    from akka_optimize.jobs.events import apply_event

    run, att = _running()
    apply_event(None, None, run, att, {"type": "failed", "rank": 1, "reason": RANK_1})
    assert (run.state, att.state) == ("RUNNING", "RUNNING")  # rank 0 may still report
    broken = "The worker failed: DistBackendError: Connection closed by peer"
    apply_event(None, None, run, att, {"type": "failed", "reason": broken, "detail": "tb0"})
    assert (run.state, run.failure_reason) == ("FAILED", RANK_1)  # the cause, not the echo


def test_rank_0_s_own_sentence_wins_over_a_rank_s() -> None:
    from akka_optimize.jobs.events import apply_event

    run, att = _running()
    apply_event(None, None, run, att, {"type": "failed", "rank": 1, "reason": RANK_1})
    own = "The reference check before the first update measured 0.002, past its bound 0."
    apply_event(None, None, run, att, {"type": "failed", "reason": own, "detail": "tb0"})
    assert (run.state, run.failure_reason, run.failure_detail) == ("FAILED", own, "tb0")


def test_a_rank_s_failure_of_an_earlier_attempt_is_not_reused() -> None:
    from akka_optimize.jobs.events import apply_event, rank_reason

    run, att = _running()
    run.results = {"rankFailure": {"attempt": 1, "reason": RANK_1}}
    assert rank_reason(run, att) is None
    broken = "The worker failed: DistBackendError: Connection closed by peer"
    apply_event(None, None, run, att, {"type": "failed", "reason": broken})
    assert run.failure_reason == broken


def test_the_reaper_uses_a_rank_s_sentence_when_no_final_event_came() -> None:
    from akka_optimize.jobs.recovery import reap_dead_workers

    run, att = _running()
    att.pid = 4242
    run.results = {"rankFailure": {"attempt": 2, "reason": RANK_1}}

    class Gone:
        def alive(self, pid: int) -> bool:
            return False

        def exit_code(self, pid: int) -> int:
            return 1

    class OneAttempt:
        def scalars(self, _query: Any) -> list[Any]:
            return [att]

        def get(self, _model: Any, _id: str) -> Any:
            return run

    reap_dead_workers(OneAttempt(), Gone())
    assert (run.state, att.state, run.failure_reason) == ("FAILED", "FAILED", RANK_1)
