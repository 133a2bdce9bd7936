"""``training runs compare`` (seeds/001 "Compare two runs", FEATURES F102)."""

from __future__ import annotations

import pytest
from jobs_helpers import run_json, setup_project, write_plan

from akka_optimize.errors import InvalidRequest
from akka_optimize.jobs.compare import compare_losses, differing_settings
from helpers import LiveService


def _metrics(losses: list[float], grads: list[float] | None = None) -> list[dict]:
    grads = grads or [1.0] * len(losses)
    return [
        {"step": i + 1, "loss": loss, "gradNorm": g}
        for i, (loss, g) in enumerate(zip(losses, grads, strict=True))
    ]


def test_identical_losses_flag_no_window():
    m = _metrics([2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4])
    got = compare_losses(m, m, window=3, margin=0.01)
    assert [(w["first"], w["last"], w["full"]) for w in got["windows"]] == [
        (1, 3, True),
        (4, 6, True),
        (7, 7, False),
    ]
    assert all(w["meanDifference"] == 0.0 for w in got["windows"])
    assert got["firstWindowPastMargin"] is None
    assert got["comparedSteps"] == 7


def test_the_first_full_window_past_the_margin_is_reported_in_either_direction():
    base = _metrics([1.0] * 9)
    run = _metrics([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.95, 0.95, 0.95])  # lower: still flagged
    got = compare_losses(run, base, window=3, margin=0.02)
    assert [round(w["meanDifference"], 6) for w in got["windows"]] == [0.0, 0.0, -0.05]
    assert got["firstWindowPastMargin"]["first"] == 7
    # Within the margin: not flagged. A partial last window is never flagged.
    assert compare_losses(run, base, window=3, margin=0.06)["firstWindowPastMargin"] is None
    short = compare_losses(_metrics([1.0] * 4 + [2.0]), _metrics([1.0] * 5), window=3, margin=0.1)
    assert short["windows"][-1]["full"] is False and short["firstWindowPastMargin"] is None


def test_only_steps_both_runs_have_are_compared():
    got = compare_losses(_metrics([1.0] * 5), _metrics([1.0] * 3), window=2, margin=0.1)
    assert got["comparedSteps"] == 3
    assert [(w["first"], w["last"], w["full"]) for w in got["windows"]] == [
        (1, 2, True),
        (3, 3, False),
    ]


def test_gradient_spikes_are_listed_for_each_run():
    grads = [1.0, 1.1, 0.9, 1.0, 9.0, 1.0]
    got = compare_losses(
        _metrics([1.0] * 6, grads), _metrics([1.0] * 6), window=3, margin=0.1, spike_factor=3.0
    )
    assert got["spikes"] == [
        {"run": "run", "step": 5, "gradNorm": 9.0, "median": 1.0, "factor": 9.0}
    ]


def test_bad_window_or_margin_is_refused_naming_the_field():
    m = _metrics([1.0] * 3)
    with pytest.raises(InvalidRequest) as e:
        compare_losses(m, m, window=0, margin=0.1)
    assert e.value.field == "window"
    with pytest.raises(InvalidRequest) as e:
        compare_losses(m, m, window=2, margin=-1)
    assert e.value.field == "margin"


def test_differing_settings_name_each_path():
    a = {"config": {"hyperparams": {"optimizer": {"learningRate": 0.001}}, "maxSeqLength": 512}}
    b = {"config": {"hyperparams": {"optimizer": {"learningRate": 0.002}}, "maxSeqLength": 512}}
    assert differing_settings(a, b) == [("config.hyperparams.optimizer.learningRate", 0.001, 0.002)]


def test_a_replay_compares_clean_and_another_configuration_is_refused(
    service: LiveService, tmp_path
) -> None:
    setup_project(service, tmp_path)
    plan = write_plan(tmp_path / "plan.json", epochs=2)
    a = run_json(service, "training", "runs", "start", "-f", str(plan), "--wait")
    b = run_json(service, "training", "runs", "start", "-f", str(plan), "--wait")
    got = run_json(service, "training", "runs", "compare", b["id"], a["id"], "--window", "3")
    assert got["comparedSteps"] == 8
    assert [w["meanDifference"] for w in got["windows"]] == [0.0, 0.0, 0.0]  # CPU: bitwise
    assert got["firstWindowPastMargin"] is None and got["spikes"] == []
    assert got["fullWindows"] == 2
    text = service.cli("training", "runs", "compare", b["id"], a["id"], "--window", "4").stdout
    assert "No full window differs by more than 0.02 (2 judged)." in text
    unjudged = service.cli("training", "runs", "compare", b["id"], a["id"], check=True).stdout
    assert "No full window of 10 updates in common, so none was judged" in unjudged
    itself = service.cli("training", "runs", "compare", a["id"], a["id"])
    assert itself.returncode == 1 and "is its own baseline" in itself.stderr

    other = write_plan(tmp_path / "other.json", epochs=2, seed=8)
    c = run_json(service, "training", "runs", "start", "-f", str(other), "--wait")
    bad = service.cli("training", "runs", "compare", c["id"], a["id"])
    assert bad.returncode == 1
    assert "config.hyperparams.training.seed 8 vs 7" in bad.stderr
