"""A project's evaluation settings and its scores table through the live service and the
real CLI (issue 17 item 4; FEATURES F055, F056): settings are checked and pinned when set
(a refused one stores nothing), each registered model version gets its evaluation queued,
``evaluations start`` takes the settings when the dataset and grader are left out, and
``projects scores`` has one row per base-model version with its models best first.

One service for the module, with a second tiny base model (another seed) in its catalog.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from helpers import LiveService, free_port, gsm8k_rows, make_random_adapter

TINY = "akka-optimize/tiny-smollm2"
TINY_B = "akka-optimize/tiny-smollm2-b"

CATALOG = f"""catalog:
  - include: shipped
  - repository: {TINY_B}
    description: A second tiny test model (other random weights).
    family: llama
    modelType: llama
    parameters: 6423616
    maxContextTokens: 2048
    loraTargetModules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]
    chatTemplate: chatml
    source: {{kind: tiny, tokenizerFrom: HuggingFaceTB/SmolLM2-135M-Instruct, seed: 1}}
    envelope:
      cpu: {{qualifiedTokens: 8192, memoryGiB: 1, measured: false}}
"""

REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Share of the reference answer's words the answer uses (a deterministic number)."""
    truth = set(str(ground_truth).lower().split())
    return len(truth & set(solution_str.lower().split())) / max(1, len(truth))
'''


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("scores")
    home = tmp / "home"
    home.mkdir()
    shipped = resources.files("akka_optimize").joinpath("deployment.yaml").read_text()
    (home / "deployment.yaml").write_text(shipped.replace("\ncatalog: null\n", "\n" + CATALOG))
    s = LiveService(home=home, config_dir=tmp / "config", port=free_port())
    s.start()
    try:
        s.cli("training", "projects", "create", "proj", check=True)
        for repo in (TINY, TINY_B):
            s.cli("training", "base-models", "select", repo, "--wait", check=True)
        bundle = tmp / "scoring"
        bundle.mkdir()
        (bundle / "reward.py").write_text(REWARD)
        s.cli("registry", "bundles", "register", "proj/scoring", "-f", str(bundle), check=True)
        data = gsm8k_rows(tmp / "val.jsonl", 3)
        s.cli("registry", "datasets", "register", "proj/val", "-f", str(data), check=True)
        s.tmp = tmp
        s.tiny_dir = tiny_model_dir
        yield s
    finally:
        s.stop()


def _json(out: Any) -> Any:
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout[out.stdout.index("{") :])


def _project(svc: Any, name: str) -> dict[str, Any]:
    return _json(svc.cli("training", "projects", "get", name, "-o", "json"))


def _register(svc: Any, ref: str, base: str, seed: int) -> None:
    folder = make_random_adapter(svc.tiny_dir, svc.tmp / f"adapter-{seed}", seed=seed)
    svc.cli("registry", "models", "register", ref, "-f", str(folder), "--base-model", base,
            check=True)  # fmt: skip


def _finished(svc: Any, evaluation_id: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        ev = _json(svc.cli("training", "evaluations", "get", evaluation_id, "-o", "json"))
        if ev["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") or time.monotonic() > deadline:
            return ev
        time.sleep(0.5)


SETTINGS = ("--dataset", "proj/val", "--grader", "bundle:proj/scoring#reward", "--max-tokens", "8")


def test_refused_settings_name_the_field_and_create_no_project(svc) -> None:
    out = svc.cli("training", "projects", "create", "bad", "--dataset", "proj/val",
                  "--grader", "bundle:proj/scoring#nope")  # fmt: skip
    assert out.returncode != 0
    assert "has no module nope" in out.stdout + out.stderr
    body = {
        "name": "bad",
        "evaluation": {"dataset": "proj/val", "grader": "bundle:proj/scoring#nope"},
    }
    r = svc.api("POST", "/v1/training/projects", json=body)
    assert r.status_code == 400 and r.json()["error"]["field"] == "evaluation.grader", r.text
    assert svc.cli("training", "projects", "get", "bad").returncode != 0  # nothing stored
    # a grader's instructions beside a bundle grader are refused, naming the field
    out = svc.cli("training", "projects", "set-evaluation", "proj", *SETTINGS,
                  "--grader-instructions", "be strict")  # fmt: skip
    assert out.returncode != 0 and "graderInstructions" in out.stdout + out.stderr
    assert _project(svc, "proj")["evaluation"] is None  # the earlier (no) settings stay
    out = svc.cli("training", "projects", "scores", "proj")
    assert out.returncode != 0
    assert "set-evaluation proj" in out.stdout + out.stderr


def test_registered_versions_are_evaluated_and_ranked_per_base_model(svc) -> None:
    _json(svc.cli("training", "projects", "create", "scored", *SETTINGS, "-o", "json"))
    p = _project(svc, "scored")
    ev = p["evaluation"]
    assert ev["dataset"].startswith("proj/val:v1@sha256:")
    assert ev["grader"] == "bundle:proj/scoring:v1#reward:compute_score"
    assert ev["sampling"]["maxTokens"] == 8 and ev["autoEvaluate"] is True
    assert _json(svc.cli("training", "projects", "scores", "scored", "-o", "json"))["rows"] == []

    _register(svc, "scored/cand", TINY, seed=3)
    first = _project(svc, "scored")["evaluation"]["lastQueued"]
    assert first["model"] == "scored/cand:v1" and first["evaluationId"], first
    _register(svc, "scored/other", TINY_B, seed=4)
    second = _project(svc, "scored")["evaluation"]["lastQueued"]
    assert second["model"] == "scored/other:v1" and second["evaluationId"] != first["evaluationId"]
    # the base model, scored on the project's settings without repeating them
    base = _json(svc.cli("training", "evaluations", "start", "--model", TINY, "--project",
                         "scored", "--wait", "-o", "json"))  # fmt: skip
    assert base["dataset"] == ev["dataset"] and base["sampling"]["maxTokens"] == 8

    evs = {e["model"]: e for e in (_finished(svc, first["evaluationId"]),
                                   _finished(svc, second["evaluationId"]), base)}  # fmt: skip
    for e in evs.values():
        assert e["state"] == "SUCCEEDED", e
        assert e["dataset"] == ev["dataset"] and e["grader"] == ev["grader"]
    table = _json(svc.cli("training", "projects", "scores", "scored", "-o", "json"))
    rows = {r["baseModel"]: r for r in table["rows"]}
    assert [r["baseModel"] for r in table["rows"]] == sorted(rows)  # by base-model version
    assert set(rows) == {f"{TINY}:v1", f"{TINY_B}:v1"}
    assert {r["repository"] for r in table["rows"]} == {TINY, TINY_B}
    assert [m["model"] for m in rows[f"{TINY_B}:v1"]["models"]] == ["scored/other:v1"]
    tiny_row = rows[f"{TINY}:v1"]["models"]
    assert {m["model"] for m in tiny_row} == {"scored/cand:v1", f"{TINY}:v1"}
    means = [m["mean"] for m in tiny_row]
    assert means == sorted(means, reverse=True)  # best first
    for m in tiny_row + rows[f"{TINY_B}:v1"]["models"]:
        assert m["mean"] == evs[m["model"]]["results"]["mean"]
        assert m["evaluationId"] == evs[m["model"]]["id"]
    text = svc.cli("training", "projects", "scores", "scored", check=True).stdout
    assert f"{TINY_B}:v1  ({TINY_B})" in text and "scored/other:v1" in text

    # turned off: the next version registers and nothing is queued
    svc.cli("training", "projects", "set-evaluation", "scored", *SETTINGS, "--no-auto-evaluate",
            check=True)  # fmt: skip
    _register(svc, "scored/cand", TINY, seed=5)
    after = _project(svc, "scored")["evaluation"]
    assert after["autoEvaluate"] is False and after["lastQueued"] is None
    listed = _json(svc.cli("training", "evaluations", "list", "--project", "scored", "-o", "json"))
    assert len(listed["evaluations"]) == 3


def test_the_model_a_run_registers_is_evaluated_on_the_settings(svc) -> None:
    svc.cli("training", "projects", "create", "trained", check=True)
    data = gsm8k_rows(svc.tmp / "train.jsonl", 4, offset=10)
    svc.cli("registry", "datasets", "register", "trained/train", "-f", str(data), check=True)
    svc.cli("training", "projects", "set-evaluation", "trained", *SETTINGS, check=True)
    plan = {
        "kind": "run",
        "project": "trained",
        "baseModel": TINY,
        "modelName": "tiny-trained",
        "config": {
            "dataset": "trained/train",
            "method": "sft",
            "maxSeqLength": 384,
            "hyperparams": {
                "training": {"epochs": 1, "microBatchPerGpu": 2, "seed": 7},
                "optimizer": {"learningRate": 0.001},
            },
        },
    }
    path = svc.tmp / "trained-plan.json"
    path.write_text(json.dumps(plan))
    run = _json(svc.cli("training", "runs", "start", "-f", str(path), "--wait", "-o", "json"))
    assert run["state"] == "SUCCEEDED", run
    pinned = run["results"]["model"]
    last = _project(svc, "trained")["evaluation"]["lastQueued"]
    assert last["model"] == pinned.split("@")[0] == "trained/tiny-trained:v1", last
    ev = _finished(svc, last["evaluationId"])
    assert ev["state"] == "SUCCEEDED" and ev["modelId"] == pinned, ev
    (row,) = _json(svc.cli("training", "projects", "scores", "trained", "-o", "json"))["rows"]
    assert row["baseModel"] == f"{TINY}:v1"
    assert [(m["model"], m["mean"]) for m in row["models"]] == [
        ("trained/tiny-trained:v1", ev["results"]["mean"])
    ]


def test_a_judge_in_the_settings_is_pinned_with_its_instructions_source(svc) -> None:
    """Settings with a ``model:`` judge: pinned, the instructions given kept with their
    source; an evaluation started on the settings takes both (it is refused nothing)."""
    out = svc.cli("training", "projects", "create", "judged", "--dataset", "proj/val",
                  "--grader", f"model:{TINY}", "--grader-instructions", "Be strict.",
                  "--no-auto-evaluate", "-o", "json")  # fmt: skip
    cfg = _json(out)["evaluation"]
    assert cfg["grader"] == f"model:{TINY}:v1" and cfg["bundle"] is None
    assert (cfg["graderInstructions"], cfg["instructionsSource"]) == ("Be strict.", "given")
    r = svc.api("POST", "/v1/training/evaluations",
                json={"modelId": TINY, "project": "judged", "limit": 1})  # fmt: skip
    assert r.status_code == 201, r.text
    ev = r.json()
    assert ev["grader"] == f"model:{TINY}:v1" and ev["graderInstructions"] == "Be strict."
    assert ev["instructionsSource"] == "given"
    svc.api("POST", f"/v1/training/evaluations/{ev['id']}/cancel")
