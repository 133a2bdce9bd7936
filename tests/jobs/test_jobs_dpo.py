"""Preference runs through the service and the CLI (issue 50): GSM8K-derived pairs (the
reference answer preferred over a wrong one) registered in both shapes, the dry run's
findings and settings, refusals named alike at the dry run and the start, a DPO run
warm-started from an SFT model, its metrics, its model version (method dpo) and an
endpoint answering with the trained adapter."""

from __future__ import annotations

import json
from pathlib import Path

from jobs_helpers import REPO, TINY, run_json, setup_project, write_plan

from akka_optimize.engine.check_prompts import CHECK_MAX_TOKENS, CHECK_PROMPTS
from helpers import LiveService


def write_pairs(path: Path, n: int) -> Path:
    """``n`` GSM8K pairs, alternately in TRL's and OpenAI's shape: the reference answer is
    preferred, the same answer with a final number one too high is not."""
    items = [json.loads(x) for x in (REPO / "data/gsm8k/train.jsonl").open()][:n]
    with path.open("w") as f:
        for i, it in enumerate(items):
            good, final = it["answer"].rsplit("#### ", 1)
            wrong = f"{good}#### {int(final.replace(',', '')) + 1}"
            prompt = [{"role": "user", "content": it["question"]}]
            chosen = [{"role": "assistant", "content": it["answer"]}]
            rejected = [{"role": "assistant", "content": wrong}]
            row = (
                {"prompt": prompt, "chosen": chosen, "rejected": rejected}
                if i % 2 == 0
                else {
                    "input": {"messages": prompt},
                    "preferred_output": chosen,
                    "non_preferred_output": rejected,
                }
            )
            f.write(json.dumps(row) + "\n")
    return path


def dpo_plan(path: Path, **extra: object) -> Path:
    plan = {
        "kind": "run",
        "project": "demo",
        "baseModel": TINY,
        "modelName": "gsm8k-dpo",
        "config": {
            "dataset": "demo/pairs",
            "method": "dpo",
            "maxSeqLength": 512,
            "dpoHyperparams": {
                "beta": 0.1,
                "lossTypes": ["sigmoid"],
                "microBatchPerGpu": 2,
                "epochs": 2,
                "optimizer": {"learningRate": 0.002},
            },
        },
        **extra,
    }
    path.write_text(json.dumps(plan))
    return path


def test_a_preference_run_from_an_sft_model_to_an_endpoint(
    service: LiveService, tmp_path: Path
) -> None:
    setup_project(service, tmp_path, rows=4)
    pairs = write_pairs(tmp_path / "pairs.jsonl", 6)
    service.cli("registry", "datasets", "register", "demo/pairs", "-f", str(pairs), check=True)

    # the dry run counts trainable pairs and shows the preference loop
    plan = dpo_plan(tmp_path / "dpo.json")
    dry = service.cli(
        "training", "runs", "start", "-f", str(plan), "--dry-run", "--show-resolved", check=True
    ).stdout
    assert "rows: 6, trainable pairs: 6" in dry, dry
    assert "loop: beta=0.1* lossTypes=sigmoid* lossWeights=1 labelSmoothing=0" in dry, dry

    # conversations under a preference run, pairs under a supervised run: refused alike
    body = json.loads(plan.read_text())
    body["config"]["dataset"] = "demo/train"
    for raw, words in (
        (body, "line 1: is not a preference pair"),
        ({**json.loads(write_plan(tmp_path / "s.json").read_text())}, "is a preference pair"),
    ):
        if words.startswith("is a"):
            raw["config"]["dataset"] = "demo/pairs"
        dry_r = service.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=raw)
        first = dry_r.json()["error"] if dry_r.status_code == 400 else dry_r.json()["refusals"][0]
        assert first["field"] == "config.dataset" and words in first["message"], first
        err = service.api("POST", "/v1/training/runs", json=raw).json()["error"]
        assert (err["field"], err["message"]) == (first["field"], first["message"])
    labelled = json.loads(plan.read_text())
    labelled["config"]["dpoHyperparams"].update(lossTypes=["ipo"], labelSmoothing=0.1)
    bad = service.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=labelled)
    assert bad.status_code == 400 and "config.dpoHyperparams.lossTypes" in bad.text

    # an SFT model, then a DPO run warm-started from it
    sft = run_json(
        service, "training", "runs", "start", "-f", str(write_plan(tmp_path / "sft.json", epochs=1)), "--wait"
    )  # fmt: skip
    assert sft["state"] == "SUCCEEDED", sft
    plan = dpo_plan(tmp_path / "warm.json", warmStartModelId=sft["results"]["model"])
    run = run_json(service, "training", "runs", "start", "-f", str(plan), "--wait")
    assert run["state"] == "SUCCEEDED", run
    assert run["method"] == "dpo" and run["results"]["data"]["pairs"] == 6
    m = run_json(service, "training", "runs", "metrics", run["id"])["metrics"]
    assert [x["step"] for x in m] == [1, 2, 3, 4, 5, 6]
    for x in m:
        assert 0.0 <= x["rewards/accuracy"] <= 1.0 and x["pairs"] == 2
        assert (
            x["rewards/margin"] == x["rewards/chosen"] - x["rewards/rejected"]
            or abs(x["rewards/margin"] - (x["rewards/chosen"] - x["rewards/rejected"])) < 1e-9
        )
        assert x["gradNorm"] > 0 and "updateRatio" in x
    assert m[0]["loss"] != m[-1]["loss"]
    text = service.cli("training", "runs", "metrics", run["id"], check=True).stdout
    assert "ACCURACY" in text and "MARGIN" in text, text
    settings = service.cli("training", "runs", "get", run["id"], "--settings", check=True).stdout
    assert "loop: beta=0.1*" in settings, settings

    # a replay of the plan: runs compare shows each window's loss and reward accuracy
    replay = run_json(service, "training", "runs", "start", "-f", str(plan), "--wait")
    assert replay["state"] == "SUCCEEDED", replay
    got = run_json(service, "training", "runs", "compare", replay["id"], run["id"], "--window", "3")  # fmt: skip
    assert [w["meanDifference"] for w in got["windows"]] == [0.0, 0.0]  # bitwise on CPU
    assert got["windows"][0]["runAccuracy"] == got["windows"][0]["baselineAccuracy"]
    text = service.cli("training", "runs", "compare", replay["id"], run["id"], "--window", "3")
    assert "RUN ACCURACY" in text.stdout, text.stdout + text.stderr

    model = run_json(service, "registry", "models", "get", run["results"]["model"])
    assert model["metadata"]["method"] == "dpo", model["metadata"]
    assert (model.get("parentModel") or "").startswith(sft["results"]["model"].split("@")[0]), model
    out = service.cli(
        "training", "endpoints", "create", "--model", run["results"]["model"], "--wait",
        "-o", "json", check=True,
    ).stdout  # fmt: skip
    endpoint = json.loads(out[out.index("{") :])
    assert endpoint["state"] == "READY", endpoint
    trained = run["results"]["trainedAnswers"]
    served = []
    for p in CHECK_PROMPTS:  # the endpoint answers as the trained adapter did in the worker
        r = service.api(
            "POST",
            f"/v1/training/endpoints/{endpoint['id']}/openai/v1/chat/completions",
            json={"model": "demo/gsm8k-dpo:v1", "temperature": 0,
                  "max_tokens": CHECK_MAX_TOKENS, "messages": [{"role": "user", "content": p}]},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        served.append(r.json()["choices"][0]["message"]["content"])
    assert trained["prompts"] == list(CHECK_PROMPTS) and served == trained["answers"]
    service.cli("training", "endpoints", "delete", endpoint["id"])
