"""Curations and pipelines through the live service and the real CLI (issue 19 checks):
a pipeline curate → train → evaluate completes on the tiny model and the registry holds
the curated dataset, its ``-judge`` dataset, the trained model and the evaluation score;
a train stage without ``baseModel`` and a curation without ``dataset`` are refused with
nothing created.

The judge is the tiny base model itself (random weights: ``guided_choice`` keeps its reply
a number from 0 to 10), so which rows it keeps is not known in advance; the test checks
the kept rows against the keep rule applied to the scores the judge's dataset records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from akka_optimize.evals.curation.kind import Keep, kept_rows
from helpers import LiveService, free_port, gsm8k_rows, hold_at, release, wait_held

TINY = "akka-optimize/tiny-smollm2"
SYSTEM = "Answer with #### N."

REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    truth = set(str(ground_truth).lower().split())
    return len(truth & set(solution_str.lower().split())) / max(1, len(truth))
"""


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("pipelines")
    s = LiveService(home=tmp / "home", config_dir=tmp / "config", port=free_port())
    s.start()
    try:
        s.cli("training", "projects", "create", "demo", check=True)
        s.cli("training", "base-models", "select", TINY, "--wait", check=True)
        raw = gsm8k_rows(tmp / "raw.jsonl", 6, system=SYSTEM)
        s.cli("registry", "datasets", "register", "demo/raw", "-f", str(raw), check=True)
        test = gsm8k_rows(tmp / "test.jsonl", 3, offset=6, system=SYSTEM)
        s.cli("registry", "datasets", "register", "demo/test", "-f", str(test), check=True)
        bundle = tmp / "scoring"
        bundle.mkdir()
        (bundle / "reward.py").write_text(REWARD)
        s.cli("registry", "bundles", "register", "demo/scoring", "-f", str(bundle), check=True)
        s.tmp = tmp
        yield s
    finally:
        s.stop()


def _descriptor(**train_changes: Any) -> dict[str, Any]:
    train = {
        "kind": "train",
        "baseModel": TINY,
        "modelName": "curated-sft",
        "config": {
            "method": "sft",
            "dataset": "stage:curate",
            "maxSeqLength": 512,
            "hyperparams": {
                "training": {"epochs": 1, "microBatchPerGpu": 2, "seed": 7},
                "optimizer": {"learningRate": 0.001},
            },
        },
        **train_changes,
    }
    return {
        "kind": "pipeline",
        "project": "demo",
        "submissionId": "nightly-1",
        "stages": [
            {
                "kind": "curate",
                "source": "demo/raw",
                "judge": f"model:{TINY}",
                "keep": {"topShare": 0.5},
                "dataset": "demo/curated",
            },
            {k: v for k, v in train.items() if v is not None},
            {
                "kind": "evaluate",
                "modelId": "stage:train",
                "dataset": "demo/test",
                "grader": "bundle:demo/scoring#reward",
                "sampling": {"maxTokens": 8},
            },
        ],
    }


def _nothing_created(svc: Any) -> None:
    assert svc.api("GET", "/v1/training/pipelines").json()["pipelines"] == []
    assert svc.api("GET", "/v1/training/curations").json()["curations"] == []
    assert svc.api("GET", "/v1/training/runs").json()["runs"] == []
    for name in ("demo/curated", "demo/curated-judge"):
        assert svc.api("GET", f"/v1/registry/datasets/{name}").status_code == 404


def test_a_train_stage_without_base_model_and_a_curation_without_dataset_create_nothing(
    svc,
) -> None:
    bad = _descriptor(baseModel=None)
    for params in ({"dryRun": "true"}, None):
        r = svc.api("POST", "/v1/training/pipelines", params=params, json=bad)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["field"] == "stages[1].baseModel", err
        assert err["message"].startswith("stages[1] (train): baseModel: required")
    path = svc.tmp / "bad.json"
    path.write_text(json.dumps(bad))
    out = svc.cli("training", "pipelines", "start", "-f", str(path))
    assert out.returncode == 1 and "stages[1] (train): baseModel" in out.stderr

    # a curation without dataset: the route and the CLI, and as a pipeline's curate stage
    body = {"project": "demo", "source": "demo/raw", "judge": f"model:{TINY}",
            "keep": {"minScore": 0.5}}  # fmt: skip
    r = svc.api("POST", "/v1/training/curations", json=body)
    assert r.status_code == 400 and r.json()["error"]["field"] == "dataset", r.text
    assert '"dataset": "oasst1/curated"' in r.json()["error"]["message"]
    out = svc.cli("training", "curations", "start", "--project", "demo", "--source", "demo/raw",
                  "--judge", f"model:{TINY}", "--min-score", "0.5")  # fmt: skip
    assert out.returncode == 1 and "dataset: required" in out.stderr
    staged = _descriptor()
    del staged["stages"][0]["dataset"]
    r = svc.api("POST", "/v1/training/pipelines", json=staged)
    assert r.json()["error"]["field"] == "stages[0].dataset", r.text

    # a reference to no earlier stage, a keep rule out of range, a stage kind that is not one
    later = _descriptor()
    later["stages"][1]["config"]["dataset"] = "stage:evaluate"
    r = svc.api("POST", "/v1/training/pipelines", json=later)
    assert r.json()["error"]["field"] == "stages[1].config.dataset", r.text
    share = _descriptor()
    share["stages"][0]["keep"] = {"topShare": 0}
    r = svc.api("POST", "/v1/training/pipelines", json=share)
    assert r.json()["error"]["field"] == "stages[0].keep.topShare", r.text
    _nothing_created(svc)


def _wait_pipeline(svc: Any, pid: str, timeout: float = 900) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = svc.api("GET", f"/v1/training/pipelines/{pid}").json()
        if p["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return p
        time.sleep(0.5)
    raise AssertionError(f"pipeline {pid} did not end: {p}")


def _rows(svc: Any, ref: str) -> list[dict[str, Any]]:
    r = svc.api("GET", f"/v1/registry/datasets/{ref}/object")
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines() if line.strip()]


def test_a_pipeline_curates_trains_and_evaluates(svc) -> None:
    path = svc.tmp / "pipeline.json"
    path.write_text(json.dumps(_descriptor()))
    dry = json.loads(
        svc.cli(
            "training", "pipelines", "start", "-f", str(path), "--dry-run", "-o", "json", check=True
        ).stdout  # fmt: skip
    )
    assert [s["kind"] for s in dry["stages"]] == ["curate", "train", "evaluate"]
    assert dry["stages"][0]["settings"]["judgeDataset"] == "demo/curated-judge"
    assert dry["stages"][1]["settings"]["baseModel"] == TINY
    # the train stage was checked against its stand-in, the curation's source
    assert dry["stages"][1]["settings"]["config"]["dataset"].startswith("demo/raw:v1@sha256:")
    _nothing_created(svc)

    out = svc.cli("training", "pipelines", "start", "-f", str(path), "--wait", "-o", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    p = json.loads(out.stdout[out.stdout.index("{") :])
    assert p["state"] == "SUCCEEDED", p
    assert p["configHash"] == dry["configHash"]
    assert [s["state"] for s in p["stages"]] == ["SUCCEEDED"] * 3
    curate, train, evaluate = p["stages"]

    # the curation: the judge's dataset holds every row's score; the kept rows are the
    # keep rule applied to those scores, in source order
    judged = _rows(svc, "demo/curated-judge")
    assert len(judged) == 6
    scores = [r["extra_info"]["curation"]["score"] for r in judged]
    assert all(s is not None and 0 <= s <= 1 for s in scores)
    want = kept_rows(scores, Keep(topShare=0.5))
    assert len(want) == 3
    kept = _rows(svc, "demo/curated")
    raw = _rows(svc, "demo/raw")
    assert kept == [raw[i] for i in want]
    assert [r["extra_info"]["curation"]["kept"] for r in judged] == [i in want for i in range(6)]
    version = svc.api("GET", "/v1/registry/datasets/demo/curated").json()
    assert curate["output"] == version["ref"] and version["source"] == "curation"
    lineage = version["metadata"]["curation"]
    assert lineage["source"].startswith("demo/raw:v1@sha256:")
    assert lineage["judge"].startswith(f"{TINY}:v1@") and lineage["curation"] == curate["job"]
    got = svc.api("GET", f"/v1/training/curations/{curate['job']}").json()
    assert got["outputs"]["dataset"] == version["ref"] and got["results"]["kept"] == 3

    # the run trained on the curated version; its model is the evaluation's
    run = svc.api("GET", f"/v1/training/runs/{train['job']}").json()
    assert run["state"] == "SUCCEEDED"
    assert train["output"] and train["output"].startswith("demo/curated-sft:v1")
    ev = svc.api("GET", f"/v1/training/evaluations/{evaluate['job']}").json()
    assert ev["modelId"] == train["output"] and ev["results"]["count"] == 3
    assert evaluate["output"]["mean"] == ev["results"]["mean"]

    # pipelines get shows every stage; the same submissionId returns this pipeline
    text = svc.cli("training", "pipelines", "get", p["id"][:8], check=True).stdout
    for name in ("curate", "train", "evaluate"):
        assert name in text
    again = svc.api("POST", "/v1/training/pipelines", json=_descriptor()).json()
    assert again["id"] == p["id"]
    listed = svc.cli("training", "pipelines", "list", check=True).stdout
    assert p["id"][:8] in listed and "curate -> train -> evaluate" in listed
    assert curate["job"][:8] in svc.cli("training", "curations", "list", check=True).stdout
    shown = svc.cli("training", "curations", "get", curate["job"][:8], check=True).stdout
    assert version["ref"] in shown and "demo/curated-judge:v1" in shown


def test_a_cancelled_pipeline_resumes_from_its_first_unfinished_stage(svc) -> None:
    stage = {"kind": "curate", "source": "demo/raw", "judge": f"model:{TINY}",
             "keep": {"minScore": 0.0}, "dataset": "demo/again", "limit": 2}  # fmt: skip
    descriptor = {"kind": "pipeline", "project": "demo", "stages": [stage]}
    hold_at(svc, "curating")
    try:
        p = svc.api("POST", "/v1/training/pipelines", json=descriptor).json()
        wait_held(svc)
        cancelled = svc.api("POST", f"/v1/training/pipelines/{p['id']}/cancel").json()
        assert cancelled["state"] == "CANCELLED" and cancelled["stages"][0]["state"] == "CANCELLED"
        first = cancelled["stages"][0]["job"]
        again = svc.api("POST", f"/v1/training/pipelines/{p['id']}/cancel")
        assert again.status_code == 409, again.text
    finally:
        release(svc)
    resumed = svc.api("POST", f"/v1/training/pipelines/{p['id']}/resume").json()
    assert resumed["state"] == "RUNNING" and resumed["stages"][0]["earlierJobs"] == [first]
    done = _wait_pipeline(svc, p["id"])
    assert done["state"] == "SUCCEEDED", done
    job = done["stages"][0]["job"]
    assert job != first
    assert svc.api("GET", f"/v1/training/curations/{first}").json()["state"] == "CANCELLED"
    cur = svc.api("GET", f"/v1/training/curations/{job}").json()
    assert cur["state"] == "SUCCEEDED" and cur["results"]["kept"] == 2  # minScore 0 keeps all
    assert len(_rows(svc, "demo/again")) == 2
    assert svc.api("POST", f"/v1/training/pipelines/{p['id']}/resume").status_code == 409
