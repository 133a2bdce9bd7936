"""Branches: a run from another run's snapshot (seeds/000 "Parameter sweeps", F107)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import yaml
from jobs_helpers import run_json, setup_project, write_plan

from helpers import LiveService


def _branch_plan(path, source_id: str, snapshot: str, **training) -> str:
    lr = training.pop("learningRate", 0.001)
    p = json.loads(write_plan(path, **training).read_text())
    p["branchFrom"] = {"run": source_id, "snapshot": snapshot}
    p["config"]["hyperparams"]["optimizer"]["learningRate"] = lr
    path.write_text(json.dumps(p))
    return str(path)


def _source_run(service: LiveService, tmp_path, keep: int) -> dict:
    """Project ``demo`` on 8 rows (micro batch 2: 4 updates per epoch) and a finished
    one-epoch source run that saves every update and keeps the newest ``keep`` states."""
    setup_project(service, tmp_path)
    plan = write_plan(
        tmp_path / "src.json", epochs=1, execution={"saveEverySteps": 1, "keepRecoverable": keep}
    )
    src = run_json(service, "training", "runs", "start", "-f", str(plan), "--wait")
    assert src["state"] == "SUCCEEDED", src
    return src


def test_a_branch_trains_only_the_updates_after_its_snapshot(
    service: LiveService, tmp_path
) -> None:
    src = _source_run(service, tmp_path, keep=4)
    src_metrics = run_json(service, "training", "runs", "metrics", src["id"])["metrics"]

    plan = _branch_plan(
        tmp_path / "b.json",
        src["id"][:8],  # a prefix: the dry run and the run name the source in full
        "step-2",
        epochs=2,
        learningRate=0.002,
        execution={"saveEverySteps": 1, "keepRecoverable": 10},
    )
    dry = run_json(service, "training", "runs", "start", "-f", plan, "--dry-run")
    b = run_json(service, "training", "runs", "start", "-f", plan, "--wait")
    assert b["state"] == "SUCCEEDED", b
    assert dry["configHash"] == b["configHash"]
    assert dry["pinned"]["branchFrom"] == f"run {src['id']} at step-2"
    assert b["branchFrom"] == {"run": src["id"], "snapshot": "step-2"}
    assert b["results"]["model"].startswith("demo/tiny-smollm2:v2@")
    got = run_json(service, "training", "runs", "metrics", b["id"])["metrics"]
    assert [m["step"] for m in got] == [3, 4, 5, 6, 7, 8]
    # Update 3 starts from the source's state at 2 and scores the same rows: same loss,
    # then the branch's own learning rate takes over.
    assert got[0]["loss"] == src_metrics[2]["loss"]
    assert got[0]["learningRate"] != src_metrics[2]["learningRate"]
    assert got[1]["loss"] != src_metrics[3]["loss"]
    snaps = run_json(service, "training", "runs", "snapshots", b["id"])["snapshots"]
    assert snaps[0]["step"] == 2 and snaps[0]["bytes"]["state"] > 0
    settings = run_json(service, "training", "runs", "get", b["id"], "--settings")["settings"]
    assert settings["branchFrom"] == {"run": src["id"], "snapshot": "step-2"}
    text = service.cli("training", "runs", "get", b["id"], check=True).stdout
    line = next(x for x in text.splitlines() if x.startswith("Branch from"))
    assert line.split() == ["Branch", "from", src["id"], "at", "step-2"]

    # A branch of the branch: two generations below the source, the source is the root.
    plan2 = _branch_plan(tmp_path / "c.json", b["id"], "step-5", epochs=2, learningRate=0.0005)
    c = run_json(service, "training", "runs", "start", "-f", plan2, "--wait")
    assert c["state"] == "SUCCEEDED"
    assert [
        m["step"] for m in run_json(service, "training", "runs", "metrics", c["id"])["metrics"]
    ] == [
        6,
        7,
        8,
    ]
    t = run_json(service, "training", "runs", "tree", src["id"])
    assert t["run"] == src["id"] and [x["run"] for x in t["branches"]] == [b["id"]]
    assert [(x["run"], x["snapshot"]) for x in t["branches"][0]["branches"]] == [
        (c["id"], "step-5")
    ]
    a = run_json(service, "training", "runs", "ancestry", c["id"])
    assert [x["run"] for x in a["ancestry"]] == [c["id"], b["id"], src["id"]]
    assert a["root"] == src["id"]
    drawn = service.cli("training", "runs", "tree", src["id"], check=True).stdout.splitlines()
    assert drawn[1].startswith(f"  {b['id']} from step-2  SUCCEEDED")
    assert drawn[2].startswith(f"    {c['id']} from step-5  SUCCEEDED")


def test_a_branch_that_changes_the_row_order_or_names_a_pruned_snapshot_is_refused(
    service: LiveService, tmp_path
) -> None:
    src = _source_run(service, tmp_path, keep=2)
    before = len(run_json(service, "training", "runs", "list")["runs"])

    bad = service.cli(
        "training",
        "runs",
        "start",
        "-f",
        _branch_plan(tmp_path / "mb.json", src["id"], "step-4", epochs=2, microBatchPerGpu=1),
    )
    assert bad.returncode == 1
    assert "config.hyperparams.training.microBatchPerGpu 1 differs from the source run's 2" in (
        bad.stderr
    )
    pruned_plan = _branch_plan(tmp_path / "p.json", src["id"], "step-1")
    dry = service.cli("training", "runs", "start", "-f", pruned_plan, "--dry-run")
    assert dry.returncode == 1 and "no resumable snapshot step-1" in dry.stderr
    pruned = service.cli("training", "runs", "start", "-f", pruned_plan)
    assert pruned.returncode == 1
    assert f"Run {src['id']} has no resumable snapshot step-1" in pruned.stderr
    assert "resumable: step-3, step-4" in pruned.stderr
    missing = service.cli(
        "training", "runs", "start", "-f", _branch_plan(tmp_path / "m.json", "ffff0000", "step-1")
    )
    assert missing.returncode == 1 and "branchFrom.run" in missing.stderr
    short = service.cli(
        "training",
        "runs",
        "start",
        "-f",
        _branch_plan(tmp_path / "s.json", src["id"], "step-4", epochs=2, maxSteps=3),
    )
    assert short.returncode == 1
    assert "trains no update after step-4: its plan ends at update 3" in short.stderr
    warm = json.loads(
        Path(_branch_plan(tmp_path / "w.json", src["id"], "step-4", epochs=2)).read_text()
    )
    warm["warmStartModelId"] = "tiny-smollm2:v1"
    (tmp_path / "w.json").write_text(json.dumps(warm))
    both = service.cli("training", "runs", "start", "-f", str(tmp_path / "w.json"))
    assert both.returncode == 1 and "remove one of branchFrom and warmStartModelId" in both.stderr
    _every_fixed_setting_is_refused(service, tmp_path, src["id"])
    assert len(run_json(service, "training", "runs", "list")["runs"]) == before


# README "Branches": each setting a branch must share with its source, the value the
# branch states (the source has the write_plan defaults) and what the refusal names.
FIXED_CHANGES = [
    ("baseModel", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    ("config.dataset", "demo/other"),
    ("config.maxSeqLength", 256),
    ("config.hyperparams.lora.rank", 8),
    ("config.hyperparams.lora.alpha", 16.0),
    ("config.hyperparams.training.seed", 8),
    ("config.hyperparams.training.microBatchPerGpu", 1),
    ("config.hyperparams.training.gradientAccumulation", 2),
]


def _every_fixed_setting_is_refused(service: LiveService, tmp_path: Path, src_id: str) -> None:
    """Every setting of ``jobs.branches.FIXED`` changed alone is refused at start and by
    the dry run, naming the field. (Another baseModel is refused first as not selected,
    naming baseModel: the tests select one base model.)"""
    from akka_optimize.jobs.branches import FIXED

    # config.method is left out: a plan of the other method needs the other loop's groups,
    # which the plan's own rules check before any branch check.
    assert sorted(f for f, _ in FIXED_CHANGES) == sorted(set(FIXED) - {"config.method"})
    rows = tmp_path / "other.jsonl"
    rows.write_text((tmp_path / "train.jsonl").read_text())
    service.cli("registry", "datasets", "register", "demo/other", "-f", str(rows), check=True)
    plan = json.loads(
        Path(_branch_plan(tmp_path / "f.json", src_id, "step-4", epochs=2)).read_text()
    )
    for field, value in FIXED_CHANGES:
        changed = json.loads(json.dumps(plan))
        node = changed
        *parents, last = field.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
        for params in ({"dryRun": "true"}, {}):
            r = service.api("POST", "/v1/training/runs", params=params, json=changed)
            assert r.status_code == 400, (field, params, r.text)
            err = r.json()["error"]
            named = [err.get("field")] + [d.get("field") for d in err.get("details") or []]
            assert field in named, (field, params, err)


def test_a_warm_start_trains_on_from_a_registered_adapter(service: LiveService, tmp_path) -> None:
    """``warmStartModelId`` (resolved in the plan's project): the new adapter starts from
    v1's weights, registers v2 with v1 as its parent; another rank is refused at start."""
    import torch
    from safetensors.torch import load_file

    setup_project(service, tmp_path)
    first = run_json(
        service,
        "training",
        "runs",
        "start",
        "-f",
        str(write_plan(tmp_path / "a.json", epochs=1)),
        "--wait",
    )
    v1 = first["results"]["model"]
    plan = json.loads(write_plan(tmp_path / "b.json", epochs=1, seed=9).read_text())
    plan["warmStartModelId"] = "tiny-smollm2:v1"
    (tmp_path / "b.json").write_text(json.dumps(plan))
    second = run_json(
        service, "training", "runs", "start", "-f", str(tmp_path / "b.json"), "--wait"
    )
    assert second["state"] == "SUCCEEDED", second
    settings = run_json(service, "training", "runs", "get", second["id"], "--settings")["settings"]
    assert settings["warmStartModelId"] == v1 == second["warmStartModelId"]
    shown = service.cli("training", "runs", "get", second["id"], check=True).stdout
    assert next(x for x in shown.splitlines() if x.startswith("Warm start")).split()[-1] == v1

    versions = service.api("GET", "/v1/registry/models/demo/tiny-smollm2/versions").json()["items"]
    by_version = {v["version"]: v for v in versions}
    assert by_version["v2"]["parentModel"] == v1 and by_version["v1"]["parentModel"] is None
    digest = by_version["v1"]["files"]["adapter_model.safetensors"]["digest"].split(":")[1]
    weights = load_file(service.home / "blobs" / "sha256" / digest[:2] / digest)
    v1_norm = float(
        torch.linalg.vector_norm(torch.stack([t.float().norm() for t in weights.values()]))
    )
    got = run_json(service, "training", "runs", "metrics", second["id"])["metrics"]
    assert abs(got[0]["adapterNorm"] - v1_norm) <= 1e-5 * v1_norm  # the step starts from v1

    plan["config"]["hyperparams"]["lora"] = {"rank": 8}
    (tmp_path / "c.json").write_text(json.dumps(plan))
    bad = service.cli("training", "runs", "start", "-f", str(tmp_path / "c.json"))
    assert bad.returncode == 1
    assert "config.hyperparams.lora.rank 8 differs from warmStartModelId" in bad.stderr
    # README "Warm starts": the plan's rank and alpha; each refusal names its field.
    plan["config"]["hyperparams"]["lora"] = {"alpha": 16.0}
    r = service.api("POST", "/v1/training/runs", json=plan)
    assert r.status_code == 400 and r.json()["error"]["field"] == "config.hyperparams.lora.alpha"
    assert "alpha 16.0 differs from warmStartModelId" in r.json()["error"]["message"]


REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    truth = set(str(ground_truth).split())
    return len(truth & set(solution_str.split())) / max(1, len(truth))
"""


def test_a_sweep_branches_every_grid_point_from_one_snapshot(
    service: LiveService, tmp_path
) -> None:
    """F108: one branch per point, each training the same extra updates from the same
    state under its own value; a bad point or a --compare without what it scores with
    creates nothing; with --compare the source snapshot and every branch are scored as one
    comparison and the table ranks the fan by score."""
    src = _source_run(service, tmp_path, keep=4)
    src_metrics = run_json(service, "training", "runs", "metrics", src["id"])["metrics"]
    lr = "config.hyperparams.optimizer.learningRate"
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({lr: [0.0005, 0.002]}))
    args = ("training", "runs", "sweep", src["id"][:8], "--snapshot", "step-2", "--steps", "2")
    bundle = tmp_path / "scoring"
    bundle.mkdir()
    (bundle / "reward.py").write_text(REWARD)
    service.cli("registry", "bundles", "register", "demo/scoring", "-f", str(bundle), check=True)

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{lr: 0.001}, {"config.hyperparams.training.microBatchPerGpu": 1}]))
    refused = service.cli(*args, "--grid", str(bad))
    assert refused.returncode == 1
    assert "grid point 2" in refused.stderr and "microBatchPerGpu 1 differs" in refused.stderr
    compared = service.cli(*args, "--grid", str(grid), "--compare")
    assert compared.returncode == 1 and "needs dataset" in compared.stderr
    ungraded = service.cli(*args, "--grid", str(grid), "--compare", "--dataset", "demo/train")
    assert ungraded.returncode == 1 and "needs a grader" in ungraded.stderr
    wrong = service.cli(*args, "--grid", str(grid), "--compare", "--dataset", "demo/train",
                        "--grader", "bundle:demo/scoring#nope")  # fmt: skip
    assert wrong.returncode == 1 and "has no module nope" in wrong.stderr
    assert len(run_json(service, "training", "runs", "list")["runs"]) == 1
    assert service.api("GET", "/v1/training/comparisons").json()["comparisons"] == []

    shown = service.cli(*args, "--grid", str(grid), "--dataset", "demo/train", "--compare",
                        "--grader", "bundle:demo/scoring#reward", "--max-tokens", "6",
                        "--wait", check=True).stdout  # fmt: skip
    (cmp,) = service.api("GET", "/v1/training/comparisons").json()["comparisons"]
    cmp = service.api("GET", f"/v1/training/comparisons/{cmp['id']}?examples=true").json()
    assert cmp["state"] == "SUCCEEDED", cmp
    assert cmp["sweep"]["source"] == src["id"] and cmp["sweep"]["snapshot"] == "step-2"
    assert cmp["progress"] == {"completed": 24, "total": 24}  # 8 rows, source + 2 branches
    fan, ex = cmp["fan"], cmp["examples"]
    assert {f["run"] for f in fan} == set(cmp["sweep"]["branches"]) and cmp["leftOut"] == []
    assert [f["mean"] for f in fan] == sorted((f["mean"] for f in fan), reverse=True)
    for f in fan:  # each branch's mean and its pairs against the source are its examples'
        side = 1 + cmp["sweep"]["branches"].index(f["run"])
        mine, source = [e[f"score{side}"] for e in ex], [e["score0"] for e in ex]
        assert abs(f["mean"] - sum(mine) / 8) < 1e-9
        assert f["vsSource"]["wins"] == sum(a > b + 1e-9 for a, b in zip(mine, source, strict=True))
    assert abs(cmp["source"]["mean"] - sum(e["score0"] for e in ex) / 8) < 1e-9
    assert "Ranked by score on demo/train" in shown
    table = [line.split()[0] for line in shown.splitlines() if line[:8] in {
        f["run"][:8] for f in fan}]  # fmt: skip
    assert table == [f["run"][:8] for f in fan]  # the table's order is the fan's

    rates = []
    for branch in cmp["sweep"]["branches"]:
        run = run_json(service, "training", "runs", "get", branch)
        assert run["state"] == "SUCCEEDED" and run["results"]["validationLoss"] is not None
        m = run_json(service, "training", "runs", "metrics", run["id"])["metrics"]
        assert [x["step"] for x in m] == [3, 4]
        assert m[0]["loss"] == src_metrics[2]["loss"]  # same state, same rows
        rates.append(m[0]["learningRate"])
    assert abs(rates[1] / rates[0] - 4.0) < 1e-9  # the same schedule at each point's rate
    tree = run_json(service, "training", "runs", "tree", src["id"])
    assert {b["run"] for b in tree["branches"]} == set(cmp["sweep"]["branches"])
    text = service.cli(*args, "--grid", str(grid), check=True).stdout
    assert "2 branches of 2 updates" in text and "learningRate=0.002" in text


def _leaves(node: object, prefix: str = "") -> dict[str, object]:
    if not isinstance(node, dict):
        return {prefix: node}
    out: dict[str, object] = {}
    for k, v in node.items():
        out.update(_leaves(v, f"{prefix}.{k}" if prefix else k))
    return out


def test_a_branch_keeps_its_sources_settings_after_a_deployment_change(
    service: LiveService, tmp_path
) -> None:
    """F021 "A later change to the deployment does not change a run, its branches or its
    retries" (issue 47 break 6): the deployment's default weight precision turns bf16 after
    an fp32 run; its branch still resolves to the source's settings, but for the fields the
    branch states, and trains."""
    src = _source_run(service, tmp_path, keep=4)
    shipped = resources.files("akka_optimize").joinpath("deployment.yaml").read_text()
    raw = yaml.safe_load(shipped)
    raw["memorySettings"]["defaults"]["config.model.weightPrecision"] = "bf16"
    (service.home / "deployment.yaml").write_text(yaml.safe_dump(raw))
    # The change is in force: the source's own plan resolves otherwise now (bf16 weights,
    # or a refusal naming them).
    again = json.loads((tmp_path / "src.json").read_text())
    fresh = service.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=again)
    assert "config.model.weightPrecision" in fresh.text and '"bf16"' in fresh.text, fresh.text

    plan = _branch_plan(tmp_path / "b.json", src["id"], "step-2", epochs=2, learningRate=0.002)
    dry = run_json(service, "training", "runs", "start", "-f", plan, "--dry-run")
    b = run_json(service, "training", "runs", "start", "-f", plan, "--wait")
    assert b["state"] == "SUCCEEDED", b
    assert dry["configHash"] == b["configHash"]

    def settings(run_id: str) -> dict[str, object]:
        got = run_json(service, "training", "runs", "get", run_id, "--settings")["settings"]
        return _leaves({k: got[k] for k in ("config", "execution")})

    theirs, mine = settings(src["id"]), settings(b["id"])
    assert mine["config.model.weightPrecision"] == "fp32"
    differ = {k for k in theirs.keys() | mine.keys() if theirs.get(k) != mine.get(k)}
    assert differ == {
        "config.hyperparams.optimizer.learningRate",
        "config.hyperparams.training.epochs",
    }, {k: (theirs.get(k), mine.get(k)) for k in differ}
