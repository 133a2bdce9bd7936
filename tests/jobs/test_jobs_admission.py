"""The dry run is the start (issue 16): every refusal a start makes, a dry run reports with
the same code, field and message, and neither creates a run."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from jobs_helpers import TINY, gsm8k_rows, run_json, wait_state
from jobs_helpers import same_refusal as _same_refusal

from helpers import LiveService, hold_at, release, wait_held

BASE: dict[str, Any] = {
    "kind": "run",
    "project": "demo",
    "baseModel": TINY,
    "config": {"dataset": "demo/train", "method": "sft", "maxSeqLength": 512},
}


def _plan(**changes: Any) -> dict[str, Any]:
    plan = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, last = path.split("__")
        cur = plan
        for p in parents:
            cur = cur.setdefault(p, {})
        cur[last] = value
    return plan


# (name, plan, code, field, words the message must hold)
REFUSALS = [
    (
        "two-gpus-smoke",  # issue 23: a smoke check trains on one device
        _plan(smoke=True, execution={"gpus": 2, "deviceProfile": "H100"}),
        "not_available",
        "smoke",
        "set execution.gpus to 1",
    ),
    (
        "unselected-base-model",
        _plan(baseModel="HuggingFaceTB/SmolLM2-135M-Instruct"),
        "base_model_not_selected",
        "baseModel",
        "training base-models select HuggingFaceTB/SmolLM2-135M-Instruct --wait",
    ),
    (
        "model-name-holds-base-versions",  # F049: akka-optimize/tiny-smollm2 is the base model
        _plan(project="akka-optimize", config__dataset="demo/train"),
        "model_name_taken",
        "modelName",
        "holds base-model versions",
    ),
]


@pytest.fixture
def demo(service: LiveService, tmp_path) -> LiveService:
    """Projects ``demo`` and ``akka-optimize``, the tiny model selected, ``demo/train``."""
    for name in ("demo", "akka-optimize"):
        service.cli("training", "projects", "create", name, check=True)
    service.cli("training", "base-models", "select", TINY, "--wait", check=True)
    data = gsm8k_rows(tmp_path / "train.jsonl", 4)
    service.cli("registry", "datasets", "register", "demo/train", "-f", str(data), check=True)
    return service


def test_every_start_refusal_is_the_dry_runs(demo: LiveService, tmp_path) -> None:
    for name, plan, code, field, words in REFUSALS:
        err = _same_refusal(demo, plan)
        assert (err["code"], err["field"]) == (code, field), name
        assert words in err["message"], (name, err["message"])
    # The CLI's dry run prints the report, then the start's refusal, and exits 1.
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(REFUSALS[0][1]))
    out = demo.cli("training", "runs", "start", "-f", str(path), "--dry-run")
    assert out.returncode == 1
    assert "Configuration hash:" in out.stdout and "a start would be refused" in out.stdout
    assert "The start would be refused (1 reason):" in out.stderr
    assert "set execution.gpus to 1" in out.stderr
    # Every refusal at once in the dry run: a smoke run on two devices under a taken name.
    both = _plan(
        project="akka-optimize", smoke=True, execution={"gpus": 2, "deviceProfile": "H100"}
    )
    fields = [
        r["field"]
        for r in demo.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=both).json()[
            "refusals"
        ]
    ]
    assert fields == ["smoke", "modelName"]
    # A plan the start accepts is accepted by the dry run, with no refusals.
    ok = demo.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=BASE).json()
    assert ok["accepted"] is True and ok["refusals"] == []


def test_a_branch_of_a_run_in_another_project_is_refused_alike(demo: LiveService, tmp_path) -> None:
    src_plan = _plan(
        config__hyperparams={"training": {"epochs": 1, "microBatchPerGpu": 2}},
        execution={"saveEverySteps": 1, "keepRecoverable": 2},
    )
    path = tmp_path / "src.json"
    path.write_text(json.dumps(src_plan))
    src = run_json(demo, "training", "runs", "start", "-f", str(path), "--wait")
    assert src["state"] == "SUCCEEDED", src
    demo.cli("training", "projects", "create", "other", check=True)
    branch = copy.deepcopy(src_plan)
    branch["project"] = "other"
    branch["config"]["hyperparams"]["training"]["epochs"] = 2  # a branch trains on
    branch["branchFrom"] = {"run": src["id"], "snapshot": "step-2"}
    # access.check_branch decides for the dry run and the start alike (core/plans.py)
    dry = demo.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=branch)
    start = demo.api("POST", "/v1/training/runs", json=branch)
    assert start.status_code == dry.status_code == 403, (start.text, dry.text)
    err = start.json()["error"]
    assert (
        err["field"] == "branchFrom.run" and "belongs to training project 'demo'" in err["message"]
    )
    assert err["details"]["action"] == "optimize.training.projects.runs.branch"
    assert dry.json()["error"] == err
    runs = demo.api("GET", "/v1/training/runs").json()["runs"]
    assert [r["id"] for r in runs] == [src["id"]]


def _prepared_folder(rows_file, tokenizer_dir, out, extra_token: bool = False):
    """Prepared token rows written by the shipped script (``python -m
    akka_optimize.data.prepared.rows``), from the tiny model's tokenizer or, with
    ``extra_token``, from one that has an added token (another tokenizer)."""
    from akka_optimize.data.prepared.rows import main

    tok = tokenizer_dir
    if extra_token:
        from transformers import AutoTokenizer

        t = AutoTokenizer.from_pretrained(tokenizer_dir)
        t.add_tokens(["<extra_token>"])
        tok = out.parent / "other-tokenizer"
        t.save_pretrained(tok)
    assert main([str(rows_file), "--tokenizer", str(tok), "--out", str(out)]) == 0
    return out


def test_prepared_rows_train_as_given_and_their_refusals_are_the_dry_runs(
    demo: LiveService, tmp_path, tiny_model_dir, capsys
) -> None:
    import pyarrow.parquet as pq

    rows = gsm8k_rows(tmp_path / "rows.jsonl", 4)
    good = _prepared_folder(rows, tiny_model_dir, tmp_path / "good")
    other = _prepared_folder(rows, tiny_model_dir, tmp_path / "other", extra_token=True)
    capsys.readouterr()
    for name, folder in (("demo/tok", good), ("demo/other-tok", other)):
        demo.cli("registry", "datasets", "register", name, "-f", str(folder), check=True)
    got = run_json(demo, "registry", "datasets", "get", "demo/tok")
    desc = json.loads((good / "prepared.json").read_text())
    assert got["metadata"]["format"] == "prepared"
    assert got["metadata"]["prepared"]["supervisedTokens"] == desc["supervisedTokens"]
    masks = [m for f in desc["files"] for m in pq.read_table(good / f)["loss_mask"].to_pylist()]
    mask_sum = sum(map(sum, masks))
    assert mask_sum == desc["supervisedTokens"] > 0

    # F030: refused at submit, the dry run alike, before any run (or device claim) exists
    tok = {"config__dataset": "demo/tok"}
    cases = [
        (_plan(config__dataset="demo/other-tok"), "prepared_tokenizer", "config.dataset",
         "the base model has another tokenizer"),
        (_plan(**tok, config__maxSeqLength=desc["longestRow"] - 1), "prepared_too_long",
         "config.maxSeqLength", f"longest prepared row ({desc['longestRow']} tokens)"),
        (_plan(**tok, config__loss={"assistantTurns": "last"}), "prepared_rows",
         "config.loss.assistantTurns", "would be ignored"),
        (_plan(**tok, config__data={"onTooLong": "drop"}), "prepared_rows",
         "config.data.onTooLong", "would be ignored"),
    ]  # fmt: skip
    for plan, code, field, words in cases:
        err = _same_refusal(demo, plan)
        assert (err["code"], err["field"]) == (code, field), err
        assert words in err["message"], err["message"]
    # the plan that may start: accepted, its findings are the registered counts
    dry = demo.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=_plan(**tok))
    assert dry.json()["accepted"] is True, dry.text
    assert dry.json()["findings"]["prepared"]["rows"] == 4

    # F029: a run trains the tokens and masks as given
    plan = _plan(**tok, config__hyperparams={"training": {"epochs": 1, "microBatchPerGpu": 2}})
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    run = run_json(demo, "training", "runs", "start", "-f", str(path), "--wait", "--yes")
    assert run["state"] == "SUCCEEDED", run
    data = run["results"]["data"]
    assert data["rows"] == data["examples"] == 4 and data["dropped_too_long"] == []
    assert data["supervised_tokens"]["total"] == mask_sum
    metrics = demo.api("GET", f"/v1/training/runs/{run['id']}/metrics").json()
    steps = [m for m in metrics["metrics"] if "supervisedTokens" in m]
    assert steps and sum(m["supervisedTokens"] for m in steps) == mask_sum


def test_a_smoke_run_reports_its_reading_and_an_early_stop_is_unstable(
    demo: LiveService, tmp_path
) -> None:
    """F076: the slice trains until it is reproduced (REPRODUCED, SUCCEEDED, no model
    registered); a check that stops at maxSteps below its threshold reports
    UNSTABLE_READING and fails with the reading."""
    hp = {"training": {"microBatchPerGpu": 2, "seed": 7}, "optimizer": {"learningRate": 0.01}}
    runs = {}
    for name, check in (
        ("ok", {"rows": 2, "threshold": 0.5, "maxSteps": 80, "measureEverySteps": 4}),
        ("early", {"rows": 2, "threshold": 1.0, "maxSteps": 2, "measureEverySteps": 4}),
    ):
        plan = _plan(smoke=True, smokeCheck=check, config__hyperparams=hp)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(plan))
        out = demo.cli("training", "runs", "start", "-f", str(path), "--wait", "-o", "json")
        runs[name] = json.loads(out.stdout)
        assert out.returncode == (0 if name == "ok" else 1), (out.stdout, out.stderr)
    ok, early = runs["ok"], runs["early"]
    assert ok["state"] == "SUCCEEDED", ok
    reading = ok["results"]["smoke"]
    assert reading["reading"] == "REPRODUCED" and reading["reproduction"] >= 0.5
    assert reading["rows"] == 2 and reading["step"] % 4 == 0 and reading["step"] < 80
    assert ok["results"]["model"] is None  # a smoke run registers no model
    readings = demo.api("GET", f"/v1/training/runs/{ok['id']}/metrics").json()["smoke"]
    assert readings[-1]["reproduction"] == reading["reproduction"]
    assert all(r["reproduction"] < 0.5 for r in readings[:-1])
    assert [r["step"] for r in readings] == list(range(4, reading["step"] + 1, 4))

    assert early["state"] == "FAILED", early
    assert early["results"]["smoke"]["reading"] == "UNSTABLE_READING"
    assert early["results"]["smoke"]["step"] == 2
    assert early["failure"].startswith("UNSTABLE_READING: the smoke check stopped at step 2")
    # refused alike at dry run and start: the fields a smoke run would ignore
    for extra, field in (
        ({"modelName": "m"}, "modelName"),
        ({"config__hyperparams": {"training": {"epochs": 3}}},
         "config.hyperparams.training.epochs"),
    ):  # fmt: skip
        plan = _plan(smoke=True, **extra)
        dry = demo.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=plan)
        start = demo.api("POST", "/v1/training/runs", json=plan)
        assert dry.status_code == start.status_code == 400, (dry.text, start.text)
        assert dry.json()["error"] == start.json()["error"]
        assert start.json()["error"]["field"] == field, start.text
    plan = _plan(smokeCheck={"rows": 2})
    r = demo.api("POST", "/v1/training/runs", json=plan)
    assert r.status_code == 400 and r.json()["error"]["field"] == "smokeCheck", r.text


def test_preparing_shows_row_counts_and_a_cancel_stops_tokenizing(
    demo: LiveService, tmp_path
) -> None:
    """F071: while it tokenizes, the run is PREPARING with completed and total rows (text
    and JSON); a cancel then stops tokenizing at the next batch and no update is trained.
    A PREPARING run cannot be paused."""
    data = gsm8k_rows(tmp_path / "big.jsonl", 600)
    demo.cli("registry", "datasets", "register", "demo/big", "-f", str(data), check=True)
    hold_at(demo, "tokenized-256")  # after the 256-row report, before the next batch
    # maxSeqLength 1024: row 311 has 570 tokens, which the default onTooLong: refuse
    # refuses (at the start since issue 47; the worker refused it after tokenizing)
    big = _plan(config__dataset="demo/big", config__maxSeqLength=1024)
    r = demo.api("POST", "/v1/training/runs", json=big)
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    wait_held(demo)
    run = run_json(demo, "training", "runs", "get", run_id)
    assert run["state"] == "PREPARING", run
    assert run["results"]["preparing"] == {"rowsDone": 256, "rowsTotal": 600}
    assert run["phase"] == "tokenizing rows: 256 of 600 done"
    text = demo.cli("training", "runs", "get", run_id, check=True).stdout
    assert "256/600" in text, text
    paused = demo.api("POST", f"/v1/training/runs/{run_id}/pause")
    assert paused.status_code == 409 and "tokenizing" in paused.json()["error"]["message"]
    assert demo.api("POST", f"/v1/training/runs/{run_id}/cancel").status_code == 200
    release(demo)
    run = wait_state(demo, run_id, ("CANCELLED",))
    assert run["results"]["preparing"] == {"rowsDone": 512, "rowsTotal": 600}
    assert run["results"]["step"] in (0, None) and run["results"]["lastSavedStep"] is None
    metrics = demo.api("GET", f"/v1/training/runs/{run_id}/metrics").json()
    assert metrics["metrics"] == []
