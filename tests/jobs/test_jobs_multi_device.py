"""A supervised run on two gloo ranks through the service (issue 23 item 1): a deployment
whose cpu profile holds two devices lets a plan state ``execution.gpus: 2``; the worker
runs under ``torch.distributed.run`` with two ranks, rank 0 reports, the run succeeds and
its adapter is registered. Settings such a run cannot honour are refused at the dry run and
the start alike, naming the setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jobs_helpers import (
    TINY,
    run_json,
    two_cpu_deployment,
    wait_state,
    write_plan,
    write_rl_plan,
)

from helpers import LiveService, free_port, gsm8k_rows, hold_at, release, wait_held


@pytest.fixture
def two_cpu(tmp_path: Path):
    """A service whose cpu device profile has two devices (two gloo ranks), with the
    sharding memory setting and the checks switch allowed; project demo, 5 rows."""
    home = tmp_path / "home"
    home.mkdir()
    two_cpu_deployment(
        home,
        memorySettings={"allowed": {"execution.memory.sharding": ["full", "none"]}},
        engineSettings={"allowed": ["checks.*", "compile.*", "head.*"]},
    )
    svc = LiveService(home=home, config_dir=tmp_path / "config", port=free_port()).start()
    try:
        svc.cli("training", "projects", "create", "demo", check=True)
        svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
        data = gsm8k_rows(tmp_path / "train.jsonl", 5, system="Answer with #### N.")
        svc.cli("registry", "datasets", "register", "demo/train", "-f", str(data), check=True)
        yield svc
    finally:
        svc.stop()


def _two_rank_plan(tmp_path: Path, sharding: str, **engine: object) -> dict:
    path = write_plan(
        tmp_path / f"plan-{sharding}.json",
        epochs=1,
        microBatchPerGpu=1,
        execution={"gpus": 2, "deviceProfile": "cpu", "memory": {"sharding": sharding}},
    )
    plan = json.loads(path.read_text())
    plan["config"]["engineSettings"] = engine
    return plan


def test_two_gloo_ranks_train_and_register(two_cpu: LiveService, tmp_path: Path) -> None:
    plan = _two_rank_plan(tmp_path, "none")
    path = tmp_path / "two.json"
    path.write_text(json.dumps(plan))
    run = run_json(two_cpu, "training", "runs", "start", "-f", str(path), "--wait")
    assert run["state"] == "SUCCEEDED", run
    # 5 rows, one per pass on each of two ranks: updates of 2, 2 and 1 rows (the remainder)
    assert run["results"]["totalSteps"] == 3 and run["results"]["step"] == 3, run["results"]
    assert run["claims"][0]["devices"] == 2, run["claims"]
    # the checks before the first update ran (on by default) and passed
    assert run["results"]["checksPassed"] is True, run["results"]
    names = [c["name"] for c in run["results"]["checks"]]
    assert names == ["head", "isolation", "packing", "reference"]
    shown = two_cpu.cli("training", "runs", "get", run["id"], "--checks", check=True).stdout
    assert "Checks" in shown and "passed" in shown and "isolation" in shown, shown
    model = run["results"]["model"]
    got = run_json(two_cpu, "registry", "models", "get", model)
    assert got["runId"] == run["id"] and "adapter_model.safetensors" in got["files"], got


def test_settings_two_ranks_cannot_honour_are_refused_alike(
    two_cpu: LiveService, tmp_path: Path
) -> None:
    smoke = dict(_two_rank_plan(tmp_path, "full"), smoke=True)
    del smoke["config"]["hyperparams"]["training"]["epochs"]  # a smoke run sets its own
    for plan, field in (
        (_two_rank_plan(tmp_path, "full", **{"compile.fail_on_recompile_limit": True}), "compile"),
        (smoke, "smoke"),
    ):
        dry = two_cpu.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=plan)
        assert dry.status_code == 200 and dry.json()["accepted"] is False, dry.text
        refusal = dry.json()["refusals"][0]
        start = two_cpu.api("POST", "/v1/training/runs", json=plan)
        assert start.status_code == 400, start.text
        err = start.json()["error"]
        assert (err["field"], err["message"]) == (refusal["field"], refusal["message"])
        assert field in err["field"], err
    assert two_cpu.api("GET", "/v1/training/runs").json()["runs"] == []


def test_a_check_past_its_bound_fails_the_run_before_it_trains(
    two_cpu: LiveService, tmp_path: Path
) -> None:
    plan = _two_rank_plan(tmp_path, "full", **{"checks.reference.max_logprob_error": 0.0})
    plan["config"]["engineSettings"]["head.chunk_tokens"] = 3  # a positive rounding
    path = tmp_path / "bound.json"
    path.write_text(json.dumps(plan))
    done = two_cpu.cli("training", "runs", "start", "-f", str(path), "--wait", "-o", "json")
    run = json.loads(done.stdout)
    assert done.returncode == 1 and run["state"] == "FAILED", run
    out = two_cpu.cli("training", "runs", "failure", run["id"], check=True).stdout
    assert "The reference check before the first update measured" in out, out
    assert "past its bound 0" in out and "checks.reference.max_logprob_error" in out, out
    assert not run["results"].get("step"), run["results"]
    # the values that were measured stay on the run
    checks = run["results"]["checks"]
    assert [c["name"] for c in checks] == ["head", "isolation", "packing", "reference"]
    assert run["results"]["checksPassed"] is False
    assert checks[-1]["passed"] is False
    assert checks[-1]["bound"] == 0.0 and checks[-1]["value"] > 0.0
    shown = two_cpu.cli("training", "runs", "get", run["id"], "--checks", check=True).stdout
    assert "reference" in shown and "checks.reference.max_logprob_error" in shown, shown


def test_two_ranks_pause_and_resume_from_a_kept_step_bitwise(
    two_cpu: LiveService, tmp_path: Path
) -> None:
    """Rank 0 hears the pause and both ranks stop after update 3 with its save; resumed from
    the kept save at step 2, updates 3-6 are the uninterrupted run's, bit for bit (seeds/001
    "Resume from one of several saves"; issue 23 item 6); a branch of the uninterrupted run
    from its save at step 5 trains update 6 as it did."""
    plan = _two_rank_plan(tmp_path, "full")
    plan["config"]["hyperparams"]["training"]["epochs"] = 2  # 3 updates an epoch
    plan["execution"].update(saveEverySteps=1, keepRecoverable=2)
    path = tmp_path / "pause.json"
    path.write_text(json.dumps(plan))
    whole = run_json(two_cpu, "training", "runs", "start", "-f", str(path), "--wait")
    expected = run_json(two_cpu, "training", "runs", "metrics", whole["id"])["metrics"]
    assert [m["step"] for m in expected] == list(range(1, 7))

    hold_at(two_cpu, "step-3")
    run = run_json(two_cpu, "training", "runs", "start", "-f", str(path))
    wait_held(two_cpu)
    two_cpu.cli("training", "runs", "pause", run["id"], check=True)
    release(two_cpu)
    paused = wait_state(two_cpu, run["id"], ("PAUSED",), timeout=120)
    assert paused["results"]["lastSavedStep"] == paused["results"]["step"] == 3
    snaps = run_json(two_cpu, "training", "runs", "snapshots", run["id"])["snapshots"]
    assert [s["step"] for s in snaps if s["recoverable"]] == [2, 3]  # keepRecoverable 2
    two_cpu.cli("training", "runs", "resume", run["id"], "--step", "step-2", "--wait", check=True)
    got = run_json(two_cpu, "training", "runs", "metrics", run["id"])["metrics"]
    assert [m["step"] for m in got] == list(range(1, 7))
    for a, b in zip(expected, got, strict=True):
        # attempt 1 tokenized the rows before the claim (F071); 2 trained; 3 resumed
        assert b["attempt"] == (3 if a["step"] > 2 else 2), b
        for k in ("loss", "gradNorm", "adapterNorm", "supervisedTokens"):
            assert a[k] == b[k], (a["step"], k, a[k], b[k])

    # A branch of the two-rank run from its kept save at step 5, under the same settings,
    # trains update 6 exactly as the source did (the sharded state loads into both ranks).
    branch = dict(plan, branchFrom={"run": whole["id"], "snapshot": "step-5"})
    branch_path = tmp_path / "branch.json"
    branch_path.write_text(json.dumps(branch))
    b = run_json(two_cpu, "training", "runs", "start", "-f", str(branch_path), "--wait")
    assert b["state"] == "SUCCEEDED" and b["branchFrom"]["snapshot"] == "step-5", b
    (only,) = run_json(two_cpu, "training", "runs", "metrics", b["id"])["metrics"]
    assert only["step"] == 6
    for k in ("loss", "gradNorm", "adapterNorm", "supervisedTokens"):
        assert only[k] == expected[5][k], (k, only[k], expected[5][k])


def test_a_reinforcement_run_on_two_gloo_ranks_trains_and_registers(
    two_cpu: LiveService, tmp_path: Path
) -> None:
    """Issue 52 item 1: ``method: rl`` with ``execution.gpus: 2``: every rank samples and
    scores its own groups, rank 0 reports every update (over both ranks' samples) and the
    one adapter is registered; samples drawn ahead are refused on two devices."""
    path = write_rl_plan(
        tmp_path / "rl-two.json", steps=2, samplesPerPrompt=2, maxNewTokens=4,
        reward="builtin:math",
    )  # fmt: skip
    plan = json.loads(path.read_text())
    plan["execution"] = {"gpus": 2, "deviceProfile": "cpu"}
    stale = dict(plan, config=dict(plan["config"]))
    stale["config"]["rlHyperparams"] = dict(plan["config"]["rlHyperparams"], maxStaleness=1)
    dry = two_cpu.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=stale)
    assert dry.json()["refusals"][0]["field"] == "config.rlHyperparams.maxStaleness", dry.text
    path.write_text(json.dumps(plan))
    run = run_json(two_cpu, "training", "runs", "start", "-f", str(path), "--wait")
    assert run["state"] == "SUCCEEDED", run
    rows = run_json(two_cpu, "training", "runs", "metrics", run["id"])["metrics"]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:  # 2 prompts x 2 samples: both ranks' samples in every update's metrics
        assert 0.0 <= r["rewardMean"] <= 1.0 and r["staleness"] == 0
    assert run["results"]["model"], run
