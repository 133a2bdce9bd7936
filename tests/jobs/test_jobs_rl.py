"""Reinforcement runs through the service and the CLI (issue 18 items 2–5): a bundle reward
in the sandbox, metrics and samples per update, the registered model's method and reward;
refusals named at the dry run and the start alike."""

from __future__ import annotations

import json

from jobs_helpers import DIGITS_REWARD, TINY, run_json, setup_project, write_rl_plan

from akka_optimize.deployment import load_deployment
from helpers import REPO, LiveService


def test_a_reinforcement_run_trains_on_a_bundle_reward_and_registers_its_model(
    service: LiveService, tmp_path
) -> None:
    setup_project(service, tmp_path)
    bundle = tmp_path / "scoring"
    bundle.mkdir()
    (bundle / "reward.py").write_text(DIGITS_REWARD)
    service.cli("registry", "bundles", "register", "demo/scoring", "-f", str(bundle), check=True)

    # refused at the dry run and the start alike, naming the field
    for rl, words in (
        ({"reward": "bundle:demo/scoring#nope"}, "has no module nope"),
        ({"reward": "bundle:demo/missing#reward"}, "demo/missing"),
        ({"reward": "rouge"}, "is not a grader"),
    ):
        plan = write_rl_plan(tmp_path / "bad.json", **rl)
        body = json.loads(plan.read_text())
        dry = service.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=body)
        # refused by the plan's own rules (400) or by admission (a report)
        first = dry.json()["error"] if dry.status_code == 400 else dry.json()["refusals"][0]
        assert dry.status_code == 400 or dry.json()["accepted"] is False, dry.text
        assert first["field"] == "config.rlHyperparams.reward" and words in first["message"]
        start = service.api("POST", "/v1/training/runs", json=body)
        err = start.json()["error"]
        assert (err["field"], err["message"]) == (first["field"], first["message"]), err
        out = service.cli("training", "runs", "start", "-f", str(plan))
        assert out.returncode == 1 and words in out.stderr, out.stderr
    graphs = json.loads(write_rl_plan(tmp_path / "graphs.json").read_text())
    graphs["config"]["engineSettings"] = {"rollout.cuda_graphs": False}  # no graphs here
    dry = service.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=graphs).json()
    assert dry["refusals"][0]["field"] == "config.engineSettings.rollout.cuda_graphs", dry
    assert run_json(service, "training", "runs", "list")["runs"] == []

    # the rollout settings the sampler honours are accepted and reach the worker
    plan = write_rl_plan(tmp_path / "rl.json")
    body = json.loads(plan.read_text())
    body["config"]["engineSettings"] = {
        "rollout.max_num_seqs": 3,
        "rollout.enable_prefix_caching": False,
    }
    body["execution"]["rollout"] = {"memoryShare": 0.4}  # bounds the sampler's KV cache
    plan.write_text(json.dumps(body))
    run = run_json(service, "training", "runs", "start", "-f", str(plan), "--wait")
    assert run["state"] == "SUCCEEDED", run
    spec = json.loads((service.home / "runs" / run["id"] / "attempt-1" / "spec.json").read_text())
    host = load_deployment(REPO / "src/akka_optimize/deployment.yaml").profile("cpu")
    assert spec["extra"]["rollout"] == {
        "max_num_seqs": 3,
        "max_num_batched_tokens": 8192,
        "prefix_caching": False,
        "kv_cache_bytes": int(0.4 * host.hostMemoryGiB * 1024**3),
        "memory_share": 0.4,  # vLLM's gpu_memory_utilization on CUDA
    }
    assert run["method"] == "rl" and run["reward"].startswith("bundle:demo/scoring:v1#reward")
    m = run_json(service, "training", "runs", "metrics", run["id"])["metrics"]
    assert [x["step"] for x in m] == [1, 2, 3]
    for x in m:
        assert 0.0 <= x["rewardMin"] <= x["rewardMean"] <= x["rewardMax"] <= 1.0
        assert x["weightVersion"] == x["step"] - 1
        assert x["rewardErrors"] == 0 and "approxKl" in x and "gradNorm" in x
    got = run_json(service, "training", "runs", "samples", run["id"], "--step", "2")
    (update,) = got["updates"]
    assert update["step"] == 2 and len(update["samples"]) == 8
    for s in update["samples"]:  # the reward the bundle gives the shown completion
        text = s["completion"] or " "
        assert abs(s["reward"] - sum(c.isdigit() for c in text) / len(text)) < 1e-9
        assert s["prompt"] and "####" not in s["prompt"]  # the gold answer stays out
    assert run["results"]["data"]["examples"] == 8  # every prompt fits maxSeqLength 512
    assert run["results"]["rewardStart"] == m[0]["rewardMean"]
    assert run["results"]["rewardFinal"] == m[-1]["rewardMean"]
    model = run_json(service, "registry", "models", "get", run["results"]["model"])
    meta = model["metadata"]
    assert meta["method"] == "rl" and meta["reward"] == run["reward"], meta
    text = service.cli("training", "runs", "get", run["id"], check=True).stdout
    assert "Claims" in text and "training devices: 1 cpu device" in text
    assert "judge endpoint" not in text
    assert "Reward" in text and "bundle:demo/scoring:v1#reward" in text


def test_a_judged_reinforcement_run_scores_on_the_judges_endpoint(
    service: LiveService, tmp_path
) -> None:
    """``reward: model:REF``: the tiny base model judges every completion (0–10 over 10)
    through its own endpoint in the run's project; the run shows the judge, its
    instructions and their source, and the endpoint."""
    setup_project(service, tmp_path)
    plan = write_rl_plan(tmp_path / "judged.json", reward=f"model:{TINY}", steps=2)
    run = run_json(service, "training", "runs", "start", "-f", str(plan), "--wait")
    assert run["state"] == "SUCCEEDED", run
    assert run["judge"].startswith(f"{TINY}:v1@") and run["instructionsSource"] == "built-in"
    assert run["graderInstructions"].endswith("Answer with #### N.")  # the rows' system message
    endpoint = service.api("GET", f"/v1/training/endpoints/{run['judgeEndpoint']}").json()
    assert endpoint["projectName"] == "demo" and endpoint["models"][0]["pinned"] == run["judge"]
    assert run["claims"] == [  # two claims (issue 22): on the cpu pool an endpoint claims 0
        {"for": "training devices", "pool": "cpu", "devices": 1},
        {"for": "judge endpoint", "pool": "cpu", "devices": 0},
    ]
    for u in run_json(service, "training", "runs", "samples", run["id"])["updates"]:
        for s in u["samples"]:
            assert s["error"] is None and round(s["reward"] * 10) == s["reward"] * 10
    text = service.cli("training", "runs", "get", run["id"], check=True).stdout
    assert "training devices: 1 cpu device; judge endpoint: 0 cpu devices" in text
    assert "Judge instructions" in text and "built-in" in text


def test_updates_that_train_nothing_say_why_and_end_in_the_final_loss(
    service: LiveService, tmp_path
) -> None:
    """Issue 47 break 8: a reward that is the same for every completion leaves every
    group out, so no update trains; each metrics row logs loss 0 and says why, the run's
    finalLoss is the last row's loss (seeds/000 "the last loss the training loop logged")
    and `runs metrics` prints the reason."""
    setup_project(service, tmp_path)
    bundle = tmp_path / "flat"
    bundle.mkdir()
    (bundle / "reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return 0.5\n"
    )
    service.cli("registry", "bundles", "register", "demo/scoring", "-f", str(bundle), check=True)
    plan = write_rl_plan(tmp_path / "flat.json", steps=2, samplesPerPrompt=2, maxNewTokens=2)
    run = run_json(service, "training", "runs", "start", "-f", str(plan), "--wait")
    assert run["state"] == "SUCCEEDED", run
    m = run_json(service, "training", "runs", "metrics", run["id"])
    rows = m["metrics"]
    assert [(r["step"], r["skipped"], r["loss"], r["groupsLeftOut"]) for r in rows] == [
        (1, True, 0.0, 2),
        (2, True, 0.0, 2),
    ]
    assert all(r["skipReason"].startswith("all advantages are zero") for r in rows)
    assert m["finalLoss"] == rows[-1]["loss"] and m["meanLoss"] == 0.0
    text = service.cli("training", "runs", "metrics", run["id"], check=True).stdout
    assert "Update 2 trained nothing: all advantages are zero" in text, text
