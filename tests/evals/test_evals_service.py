"""Evaluations end to end through the live service and the real CLI (issue 17 items 1–2):
a bundle grader scores a base model and a trained adapter; bad requests are refused at
submit, naming what does not resolve; hostile grader code is an example error; a cancelled
evaluation ends CANCELLED without a failure.

One service for the module: the tiny base model is selected once.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import (
    REPO,
    LiveService,
    free_port,
    gsm8k_rows,
    hold_at,
    make_random_adapter,
    release,
    wait_held,
)

TINY = "akka-optimize/tiny-smollm2"
SYSTEM = "Answer with #### N."

REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Share of the reference answer's words the answer uses (a deterministic number)."""
    truth = set(str(ground_truth).lower().split())
    words = set(solution_str.lower().split())
    return {"score": len(truth & words) / max(1, len(truth)), "words": len(words),
            "source": data_source, "index": extra_info["index"]}


def exact(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str.strip() == str(ground_truth).split("####")[-1].strip())
'''


def _hostile(home: Path) -> str:
    return f"""
import os, time

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    i = extra_info["index"]
    if i == 0:  # the service's state store and its environment
        with open({str(home / "state.db")!r}, "rb") as f:
            return {{"score": 1.0, "leak": f.read(64).hex()}}
    if i == 1:
        block = bytearray(2 * 1024**3)
        return float(len(block))
    if i == 2:
        while True:
            time.sleep(1)
    return {{"score": 1.0, "env": sorted(k for k in os.environ if k.startswith("AKKA"))}}
"""


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("evals")
    home = tmp / "home"
    home.mkdir()
    dep = yaml.safe_load((REPO / "src/akka_optimize/deployment.yaml").read_text())
    dep["graders"] = {"cpuSeconds": 5, "wallSeconds": 3, "memoryMiB": 512, "workers": 2}
    (home / "deployment.yaml").write_text(yaml.safe_dump(dep))
    s = LiveService(home=home, config_dir=tmp / "config", port=free_port())
    s.start()
    try:
        s.cli("training", "projects", "create", "proj", check=True)
        s.cli("training", "base-models", "select", TINY, "--wait", check=True)
        bundle = tmp / "scoring"
        bundle.mkdir()
        (bundle / "reward.py").write_text(REWARD)
        s.cli("registry", "bundles", "register", "proj/scoring", "-f", str(bundle), check=True)
        hostile = tmp / "hostile"
        hostile.mkdir()
        (hostile / "evil.py").write_text(_hostile(home))
        s.cli("registry", "bundles", "register", "proj/hostile", "-f", str(hostile), check=True)
        data = gsm8k_rows(tmp / "val.jsonl", 5, system=SYSTEM)
        s.cli("registry", "datasets", "register", "proj/val", "-f", str(data), check=True)
        seven = gsm8k_rows(tmp / "seven.jsonl", 7, offset=5, system=SYSTEM)
        s.cli("registry", "datasets", "register", "proj/seven", "-f", str(seven), check=True)
        folder = make_random_adapter(tiny_model_dir, tmp / "cand", seed=5, rank=24)
        s.cli("registry", "models", "register", "proj/cand", "-f", str(folder),
              "--base-model", TINY, check=True)  # fmt: skip
        s.bundle_dir, s.tiny_dir, s.tmp = bundle, tiny_model_dir, tmp
        yield s
    finally:
        (home / "test-hold").unlink(missing_ok=True)
        s.stop()


def _start(svc: Any, *args: str, check: bool = True) -> Any:
    return svc.cli("training", "evaluations", "start", *args, check=check)


def _json_of(out: Any) -> dict[str, Any]:
    return json.loads(out.stdout[out.stdout.index("{") :])


def _local_scores(bundle: Path, examples: list[dict[str, Any]], dataset: str) -> list[float]:
    spec = importlib.util.spec_from_file_location("reward_local", bundle / "reward.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [
        mod.compute_score(dataset, ex["answer"], ex["groundTruth"], {"index": ex["index"]})["score"]
        for ex in examples
    ]


def test_a_base_model_and_an_adapter_are_scored_through_the_cli(svc) -> None:
    common = ("--dataset", "proj/val", "--grader", "bundle:proj/scoring#reward", "--max-tokens",
              "12", "--wait", "-o", "json")  # fmt: skip
    base = _json_of(_start(svc, "--model", TINY, "--project", "proj", *common))
    cand = _json_of(_start(svc, "--model", "proj/cand", *common))  # takes the adapter's project
    got = {}
    for ev in (base, cand):
        assert ev["state"] == "SUCCEEDED", ev
        assert ev["project"] == "proj"
        assert ev["dataset"].startswith("proj/val:v1@sha256:")
        assert ev["bundle"].startswith("proj/scoring:v1@sha256:")
        assert ev["grader"] == "bundle:proj/scoring:v1#reward:compute_score"
        assert ev["progress"] == {"completed": 5, "total": 5}
        full = json.loads(
            svc.cli(
                "training",
                "evaluations",
                "get",
                ev["id"][:8],
                "--examples",
                "-o",
                "json",
                check=True,
            ).stdout  # fmt: skip
        )
        examples = full["examples"]
        assert [e["index"] for e in examples] == [0, 1, 2, 3, 4]
        assert all(e["error"] is None and e["answer"] for e in examples)
        assert examples[0]["groundTruth"].rstrip().endswith("#### 72")  # the reference answer
        # the score a user recomputes from the shown answers with the bundle's own code
        local = _local_scores(svc.bundle_dir, examples, "proj/val")
        assert [e["score"] for e in examples] == pytest.approx(local)
        assert ev["results"]["mean"] == pytest.approx(sum(local) / 5)
        assert ev["results"]["count"] == 5 and ev["results"]["errors"] == 0
        assert examples[0]["details"] == {"words": len(set(examples[0]["answer"].lower().split())),
                                          "source": "proj/val", "index": 0}  # fmt: skip
        got[ev["modelId"]] = [e["answer"] for e in examples]
    assert base["modelId"].startswith(f"{TINY}:v1@sha256:")
    assert cand["modelId"].startswith("proj/cand:v1@sha256:")  # rank 24 runs (F122)
    assert got[base["modelId"]] != got[cand["modelId"]]  # the adapter was applied

    listed = svc.cli("training", "evaluations", "list", check=True).stdout
    assert base["id"][:8] in listed and cand["id"][:8] in listed
    shown = svc.cli("training", "evaluations", "get", cand["id"][:8], check=True).stdout
    assert f"{cand['results']['mean']:.4f}" in shown and "proj/cand:v1" in shown
    runs = svc.api("GET", "/v1/training/runs").json()["runs"]
    assert all(r["id"] not in (base["id"], cand["id"]) for r in runs)


@pytest.mark.parametrize(
    "body, field, words",
    [
        ({"grader": "bundle:proj/scoring#nomodule"}, "grader", "has no module nomodule"),
        ({"grader": "bundle:proj/scoring#reward:absent"}, "grader", "absent"),
        ({"grader": "bundle:scoring/reward:compute_score"}, "grader",
         "bundle:scoring#reward:compute_score"),  # the 0.7 spelling
        ({"grader": "bundle:proj/nothere#reward"}, "grader", "proj/nothere"),
        ({"grader": "model:nojudge"}, "grader", "proj/nojudge"),  # a judge not registered
        ({"graderInstructions": "Be strict."}, "graderInstructions", "bundle grader"),
        ({"modelId": TINY, "project": None}, "project", "base model"),
        ({"dataset": "proj/missing"}, "dataset", "proj/missing"),
        ({"shuffle": True}, "shuffle", "shuffle"),
    ],
)  # fmt: skip
def test_bad_requests_are_refused_naming_the_field(svc, body, field, words) -> None:
    before = svc.api("GET", "/v1/training/evaluations").json()["evaluations"]
    req = {"modelId": "proj/cand", "dataset": "proj/val", "grader": "bundle:proj/scoring#reward"}
    req.update(body)
    req = {k: v for k, v in req.items() if v is not None}
    r = svc.api("POST", "/v1/training/evaluations", json=req)
    assert r.status_code in (400, 404, 422), r.text
    err = r.json()["error"]
    assert field in (err.get("field") or "") + err["message"], err
    assert words in err["message"], err
    assert svc.api("GET", "/v1/training/evaluations").json()["evaluations"] == before


def test_hostile_grader_calls_are_example_errors_and_the_evaluation_finishes(svc) -> None:
    out = _start(svc, "--model", "proj/cand", "--dataset", "proj/seven", "--grader",
                 "bundle:proj/hostile#evil", "--max-tokens", "4", "--wait", "-o", "json")  # fmt: skip
    ev = _json_of(out)
    assert ev["state"] == "SUCCEEDED", ev  # 3 errors of 7 is under the failing share
    assert ev["results"]["errors"] == 3 and ev["results"]["scored"] == 4
    full = svc.api("GET", f"/v1/training/evaluations/{ev['id']}?examples=true").json()
    by = {e["index"]: e for e in full["examples"]}
    assert by[0]["score"] is None and "leak" not in json.dumps(by[0])
    assert "memory" in by[1]["error"]
    assert "wall-clock" in by[2]["error"]
    assert by[3]["score"] == 1.0 and by[3]["details"]["env"] == []  # no AKKA_* variable
    assert "SQLite format" not in json.dumps(full)
    # the service is still up and serving
    assert svc.api("GET", "/v1/training/info").json()["startedCompletely"]


def test_a_cancelled_evaluation_ends_cancelled_without_a_failure(svc) -> None:
    hold_at(svc, "answering")
    try:
        out = _start(svc, "--model", "proj/cand", "--dataset", "proj/val", "--grader",
                     "bundle:proj/scoring#reward", "-o", "json")  # fmt: skip
        ev = _json_of(out)
        wait_held(svc)
        cancelled = svc.cli("training", "evaluations", "cancel", ev["id"][:8], check=True)
        assert ev["id"][:8] in cancelled.stdout
    finally:
        release(svc)
    for _ in range(600):
        got = svc.api("GET", f"/v1/training/evaluations/{ev['id']}").json()
        if got["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.2)
    assert got["state"] == "CANCELLED", got
    assert got["failureReason"] is None and got["results"] is None
    assert got["progress"]["completed"] == 0


def test_a_comparison_counts_wins_and_the_paired_difference(svc) -> None:
    args = ("--model", "proj/cand", "--baseline", TINY, "--dataset", "proj/val", "--grader",
            "bundle:proj/scoring#reward", "--max-tokens", "12")  # fmt: skip
    out = svc.cli("training", "comparisons", "create", *args, "--wait", "-o", "json", check=True)
    cmp = _json_of(out)
    assert cmp["state"] == "SUCCEEDED", cmp
    assert cmp["modelId"].startswith("proj/cand:v1@sha256:")
    assert cmp["baselineModelId"].startswith(f"{TINY}:v1@sha256:")
    assert cmp["progress"] == {"completed": 10, "total": 10}
    full = svc.api("GET", f"/v1/training/comparisons/{cmp['id'][:8]}?examples=true").json()
    ex = full["examples"]
    assert [e["index"] for e in ex] == [0, 1, 2, 3, 4]
    a = _local_scores(svc.bundle_dir, [{**e, "answer": e["answerA"]} for e in ex], "proj/val")
    b = _local_scores(svc.bundle_dir, [{**e, "answer": e["answerB"]} for e in ex], "proj/val")
    assert [e["scoreA"] for e in ex] == pytest.approx(a)
    assert [e["scoreB"] for e in ex] == pytest.approx(b)
    r = cmp["results"]
    d = [x - y for x, y in zip(a, b, strict=True)]
    assert (r["wins"], r["losses"], r["ties"]) == (
        sum(x > 1e-9 for x in d),
        sum(x < -1e-9 for x in d),
        sum(abs(x) <= 1e-9 for x in d),
    )
    mean = sum(d) / 5
    sd = (sum((x - mean) ** 2 for x in d) / 4) ** 0.5
    assert r["meanDifference"] == pytest.approx(mean)
    assert r["ci95"] == pytest.approx([mean - 2.776 * sd / 5**0.5, mean + 2.776 * sd / 5**0.5])
    assert r["candidate"]["mean"] == pytest.approx(sum(a) / 5)
    differ = [e for e in ex if e["scoreA"] != e["scoreB"]]
    assert len(full["mostDifferent"]) == min(5, len(differ))
    listed = svc.cli("training", "comparisons", "list", check=True).stdout
    assert cmp["id"][:8] in listed  # recovers the ID without repeating the submission
    shown = svc.cli("training", "comparisons", "get", cmp["id"][:8], check=True).stdout
    assert "Wins/losses/ties" in shown and "proj/cand" in shown
    same = svc.api("POST", "/v1/training/comparisons", json={
        "modelId": "proj/cand", "baselineModelId": "proj/cand:v1", "dataset": "proj/val",
        "grader": "bundle:proj/scoring#reward"})  # fmt: skip
    assert same.status_code == 400 and same.json()["error"]["field"] == "baselineModelId"
    assert svc.api("GET", "/v1/training/evaluations").json()["evaluations"]  # kept apart
    assert all(
        e["id"] != cmp["id"]
        for e in svc.api("GET", "/v1/training/evaluations").json()["evaluations"]
    )


def _judged(svc: Any, *args: str) -> dict[str, Any]:
    out = _start(svc, "--model", "proj/cand", "--dataset", "proj/val", "--max-tokens", "8",
                 *args, "--wait", "-o", "json")  # fmt: skip
    ev = _json_of(out)
    assert ev["state"] == "SUCCEEDED", ev
    return ev


def test_a_model_judge_scores_on_its_own_endpoint_with_each_instruction_source(svc) -> None:
    """The tiny base model judges (a random model: ``guided_choice`` keeps its reply a
    score); each of the three instruction sources is recorded and shown; the judge is
    served by one endpoint of the project, reused by the next evaluation."""
    built = _judged(svc, "--grader", f"model:{TINY}")
    assert built["grader"] == f"model:{TINY}:v1" and built["judge"].startswith(f"{TINY}:v1@")
    assert built["instructionsSource"] == "built-in"
    assert built["graderInstructions"].endswith(SYSTEM)  # the dataset's first system message
    full = svc.api("GET", f"/v1/training/evaluations/{built['id']}?examples=true").json()
    for ex in full["examples"]:
        reply = ex["details"]["judgeReply"]
        assert ex["error"] is None and ex["score"] == pytest.approx(int(reply) / 10), ex
    assert built["results"]["count"] == 5 and built["results"]["errors"] == 0
    endpoint = svc.api("GET", f"/v1/training/endpoints/{built['judgeEndpoint']}").json()
    assert endpoint["projectName"] == "proj" and endpoint["models"][0]["pinned"] == built["judge"]
    assert built["projectName"] == "proj" and built["projectId"] == endpoint["projectId"]
    assert [(c["for"], c["devices"]) for c in built["claims"]] == [
        ("evaluation devices", 1),
        ("judge endpoint", 0),  # an endpoint on the cpu pool shares the host (issue 22)
    ]
    shown = svc.cli("training", "evaluations", "get", built["id"][:8], check=True).stdout
    assert "Instructions source" in shown and "built-in" in shown and "Judge endpoint" in shown

    given = _judged(svc, "--grader", f"model:{TINY}", "--grader-instructions", "Be kind.",
                    "--limit", "2")  # fmt: skip
    assert (given["graderInstructions"], given["instructionsSource"]) == ("Be kind.", "given")
    assert given["judgeEndpoint"] == built["judgeEndpoint"]  # one endpoint per judge version

    folder = make_random_adapter(svc.tiny_dir, svc.tmp / "judge", seed=9, rank=4)
    svc.cli("registry", "models", "register", "proj/judge", "-f", str(folder),
            "--base-model", TINY, check=True)  # fmt: skip
    r = svc.api("PUT", "/v1/registry/models/proj/judge/annotations",
                json={"annotations": {"instructions": "Grade like a teacher."}})  # fmt: skip
    assert r.status_code == 200, r.text
    trained = _judged(svc, "--grader", "model:judge", "--limit", "2")
    assert trained["instructionsSource"] == "judge-training"
    assert trained["graderInstructions"] == "Grade like a teacher."
    assert trained["judge"].startswith("proj/judge:v1@")


def test_a_model_judge_picks_the_better_answer_of_each_pair(svc) -> None:
    args = ("--model", "proj/cand", "--baseline", TINY, "--dataset", "proj/val", "--grader",
            f"model:{TINY}", "--max-tokens", "8", "--limit", "4")  # fmt: skip
    out = svc.cli("training", "comparisons", "create", *args, "--wait", "-o", "json", check=True)
    cmp = _json_of(out)
    assert cmp["state"] == "SUCCEEDED", cmp
    r = cmp["results"]
    assert r["wins"] + r["losses"] + r["ties"] + r["errors"] == 4 and r["errors"] == 0
    full = svc.api("GET", f"/v1/training/comparisons/{cmp['id'][:8]}?examples=true").json()
    for ex in full["examples"]:
        d = ex["detailsA"]
        assert d["candidateWas"] == "AB"[ex["index"] % 2]  # the candidate takes turns
        want = 0.5 if d["judgeReply"] == "tie" else float(d["judgeReply"] == d["candidateWas"])
        assert (ex["scoreA"], ex["scoreB"]) == (want, 1 - want), ex


def test_a_judge_whose_endpoint_cannot_start_fails_the_evaluation_with_its_reason(svc) -> None:
    """The judge's adapter files are gone from the blob store after registration: its
    endpoint fails to start, and the evaluation fails with the endpoint's reason."""
    folder = make_random_adapter(svc.tiny_dir, svc.tmp / "lost", seed=11, rank=4)
    svc.cli("registry", "models", "register", "proj/lostjudge", "-f", str(folder),
            "--base-model", TINY, check=True)  # fmt: skip
    files = svc.api("GET", "/v1/registry/models/proj/lostjudge").json()["files"]
    for name, info in files.items():  # its weights only: other files are shared by digest
        if not name.endswith(".safetensors"):
            continue
        hexd = info["digest"].removeprefix("sha256:")
        (svc.home / "blobs" / "sha256" / hexd[:2] / hexd).unlink()
    out = _start(svc, "--model", "proj/cand", "--dataset", "proj/val", "--grader",
                 "model:lostjudge", "--limit", "1", "--max-tokens", "4", "--wait", "-o",
                 "json", check=False)  # fmt: skip
    ev = _json_of(out)
    assert out.returncode != 0 and ev["state"] == "FAILED", ev
    assert ev["failureReason"].startswith("The judge proj/lostjudge:v1 could not serve:"), ev
    endpoint = svc.api("GET", f"/v1/training/endpoints/{ev['judgeEndpoint']}").json()
    assert endpoint["state"] == "FAILED" and endpoint["error"] in ev["failureReason"]
