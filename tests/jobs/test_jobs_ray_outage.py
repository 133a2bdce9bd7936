"""The Ray executor's outage clock (issue 25 item 2), without a cluster: a fake bridge
whose calls move a fake clock, so the test states times instead of waiting for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from akka_optimize.deployment import ExecutorSettings
from akka_optimize.jobs import ray_executor
from akka_optimize.jobs.ray_executor import CLUSTER_UNREACHABLE_EXIT, ClusterUnreachable


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def _executor(monkeypatch, outage: float, answers: list[Any]) -> tuple[Any, Clock, list]:
    """A RayExecutor whose bridge pops ``answers``: a dict is answered at once, a number is
    that many seconds without an answer (the call then times out)."""
    clock = Clock(100.0)
    seen: list[tuple[str, float]] = []

    class FakeBridge:
        def __init__(self, settings, connect_timeout: float) -> None:
            seen.append(("connect", connect_timeout))

        def call(self, request: dict, timeout: float) -> dict:
            seen.append((request["op"], timeout))
            answer = answers.pop(0)
            if isinstance(answer, dict):
                return answer
            clock.now += min(answer, timeout)
            raise ClusterUnreachable(f"no answer to {request['op']} in {timeout:g} s")

        def stop(self) -> None:
            pass

    monkeypatch.setattr(ray_executor, "_BridgeProcess", FakeBridge)
    monkeypatch.setattr(ray_executor.time, "monotonic", clock.monotonic)
    settings = ExecutorSettings(kind="ray", address="10.0.0.1:6379", outageSeconds=outage)
    return ray_executor.RayExecutor(settings), clock, seen


def test_the_outage_counts_from_the_first_unanswered_call_not_its_timeout(monkeypatch) -> None:
    ok = {"ok": True, "ended": False, "code": None}
    ex, clock, seen = _executor(monkeypatch, outage=5, answers=[{"ok": True}, ok, 60])
    assert ex.start(["true"], {}, Path("w.log"), "cpu") > 0
    assert ex.alive(7)  # answered: the worker runs
    clock.now = 200.0
    # sent at 200 and unanswered for the 5 s of the outage: the worker has ended
    assert ex.exit_code(7) == CLUSTER_UNREACHABLE_EXIT
    assert ex.unreachable_since == 200.0
    # a launch may take its 20 s; a poll is unanswered once the outage's 5 s have passed
    assert [t for op, t in seen if op != "connect"] == [20.0, 5.0, 5.0]
    sentence = ex.ended_sentence(CLUSTER_UNREACHABLE_EXIT)
    assert sentence is not None and "could not be reached for 5 s" in sentence


def test_a_short_silence_keeps_the_phase_and_an_answer_ends_the_outage(monkeypatch) -> None:
    ok = {"ok": True, "ended": False, "code": None}
    ex, clock, seen = _executor(monkeypatch, outage=900, answers=[60, ok])
    assert ex.alive(7)  # unanswered for 20 s of a 900 s outage: still running
    assert ex.unreachable_since == 100.0
    clock.now += ray_executor.RETRY_AFTER_S  # the bridge is started again, and answers
    assert ex.alive(7)
    assert ex.unreachable_since is None
    assert seen == [("connect", 90.0), ("poll", 20.0), ("connect", 90.0), ("poll", 20.0)]


@pytest.mark.parametrize(("outage", "expected"), [(30.0, 5.0), (60.0, 35.0), (900.0, 90.0)])
def test_a_reconnect_during_an_outage_waits_no_longer_than_the_outage_has_left(
    monkeypatch, outage: float, expected: float
) -> None:
    """The first call goes unanswered for 20 s, then the bridge is started again 5 s later:
    its connect may take what is left of the outage (at least 5 s), at most 90 s."""
    ex, clock, seen = _executor(monkeypatch, outage=outage, answers=[60, 60])
    assert ex.alive(7)
    clock.now += ray_executor.RETRY_AFTER_S
    ex.alive(7)
    assert seen[2] == ("connect", expected)
