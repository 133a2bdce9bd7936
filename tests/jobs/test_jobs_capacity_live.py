"""Capacity through the scheduler, the endpoint manager and the CLI (issue 22 checks), on a
cpu pool of two devices with quotas of one device for projects a and b and endpoints
claiming one device each."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import yaml
from jobs_helpers import TINY, run_json, wait_state, write_plan

from helpers import LiveService, free_port, gsm8k_rows, hold_at, release, wait_held


def _service(tmp_path: Path) -> LiveService:
    home = tmp_path / "home"
    home.mkdir()
    raw = yaml.safe_load(resources.files("akka_optimize").joinpath("deployment.yaml").read_text())
    raw["pools"] = [{"name": "cpu", "deviceProfile": "cpu", "devicesPerNode": 2}]
    raw["quotas"] = {"projects": {"a": {"cpu": 1}, "b": {"cpu": 1}}}
    raw["serving"]["claimDevices"] = 1
    (home / "deployment.yaml").write_text(yaml.safe_dump(raw))
    return LiveService(home=home, config_dir=tmp_path / "config", port=free_port()).start()


def _plan(tmp_path: Path, project: str, name: str) -> Path:
    path = write_plan(tmp_path / f"{name}.json", epochs=1)
    plan = json.loads(path.read_text())
    plan["project"], plan["config"]["dataset"] = project, f"{project}/train"
    path.write_text(json.dumps(plan))
    return path


def _start(svc: LiveService, plan: Path) -> str:
    return run_json(svc, "training", "runs", "start", "-f", str(plan))["id"]


def test_quotas_positions_endpoints_and_the_capacity_report(tmp_path) -> None:
    svc = _service(tmp_path)
    try:
        svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
        data = gsm8k_rows(tmp_path / "train.jsonl", 4, system="Answer with #### N.")
        for p in ("a", "b"):
            svc.cli("training", "projects", "create", p, check=True)
            svc.cli("registry", "datasets", "register", f"{p}/train", "-f", str(data), check=True)

        # a judged reinforcement run needs two claims; a's quota holds one: refused at the
        # dry run and the start alike, naming the quota
        rl = json.loads(_plan(tmp_path, "a", "rl").read_text())
        rl["config"].pop("hyperparams")
        rl["config"].update(
            method="rl", rlHyperparams={"steps": 1, "reward": f"model:{TINY}", "maxNewTokens": 4}
        )
        dry = svc.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=rl).json()
        assert dry["accepted"] is False, dry
        first = dry["refusals"][0]
        assert (first["code"], first["field"]) == ("quota_exceeded", "config.rlHyperparams.reward")
        assert (
            "needs 2 cpu devices (its training devices and its judge endpoint), but "
            "project a's quota in pool cpu is 1 device" in first["message"]
        )
        err = svc.api("POST", "/v1/training/runs", json=rl).json()["error"]
        assert (err["code"], err["message"]) == ("quota_exceeded", first["message"])

        # three runs: a1 and b1 hold the pool; a2 waits for a's quota
        hold_at(svc, "step-1")
        a1 = _start(svc, _plan(tmp_path, "a", "a1"))
        wait_held(svc)
        b1 = _start(svc, _plan(tmp_path, "b", "b1"))
        wait_state(svc, b1, ("RUNNING",))
        a2 = _start(svc, _plan(tmp_path, "a", "a2"))
        queued = wait_state(
            svc, a2, ("QUEUED",), predicate=lambda r: "quota" in (r["queueReason"] or "")
        )
        assert queued["queueReason"] == (
            "position 1 of 1 in pool cpu: project a's quota in pool cpu is 1 device, 1 in use "
            f"(by run {a1}); it needs 1"
        )
        listed = svc.cli("training", "runs", "list", check=True).stdout
        assert "project a's quota" in listed

        report = run_json(svc, "training", "capacity")
        (pool,) = report["pools"]
        assert (pool["declared"], pool["observed"], pool["inUse"], pool["waiting"]) == (2, 1, 2, 1)
        by = {p["projectName"]: p for p in report["projects"]}
        assert [h["id"] for h in by["a"]["holding"]] == [a1]
        assert [(w["id"], w["position"]) for w in by["a"]["waiting"]] == [(a2, 1)]
        assert [h["id"] for h in by["b"]["holding"]] == [b1]
        assert by["a"]["projectId"] and by["a"]["usage"] == {"cpu": 1}
        # every run view names its project as the report does (F057)
        assert (queued["projectId"], queued["projectName"]) == (by["a"]["projectId"], "a")
        only_b = run_json(svc, "training", "capacity", "--project", "b")
        assert [p["projectName"] for p in only_b["projects"]] == ["b"]
        text = svc.cli("training", "capacity", "--project", "a", check=True).stdout
        assert "Training projects" in text and f"holding  run {a1}" in text
        assert f"waiting  run {a2}" in text and "position 1 of 1 in pool cpu" in text
        assert b1 not in text  # another project's claims are left out

        # a cancelled queued run frees its place: a2 moves up to position 1 of 1 again
        a4 = _start(svc, _plan(tmp_path, "a", "a4"))
        wait_state(svc, a4, ("QUEUED",), predicate=lambda r: "position 2 of 2" in r["queueReason"])
        svc.cli("training", "runs", "cancel", a2, check=True)
        wait_state(svc, a4, ("QUEUED",), predicate=lambda r: "position 1 of 1" in r["queueReason"])
        # a4 starts when a1 ends
        release(svc)
        first = wait_state(svc, a1, ("SUCCEEDED",))
        started = wait_state(svc, a4, ("SUCCEEDED",))
        assert started["startedAt"] >= first["finishedAt"]
        wait_state(svc, b1, ("SUCCEEDED",))

        # an endpoint of project a holds a's one device: a's next run waits, naming it;
        # deleting the endpoint starts the run
        ep = run_json(
            svc, "training", "endpoints", "create", "--model", TINY, "--project", "a", "--wait"
        )
        assert ep["state"] == "READY", ep
        a3 = _start(svc, _plan(tmp_path, "a", "a3"))
        waiting = wait_state(
            svc, a3, ("QUEUED",), predicate=lambda r: "quota" in (r["queueReason"] or "")
        )
        assert f"(by endpoint {ep['id']})" in waiting["queueReason"]
        holding = run_json(svc, "training", "capacity", "--project", "a")["projects"][0]
        assert [(h["kind"], h["id"]) for h in holding["holding"]] == [("endpoint", ep["id"])]
        svc.cli("training", "endpoints", "delete", ep["id"], check=True)
        assert wait_state(svc, a3, ("SUCCEEDED",))["state"] == "SUCCEEDED"
    finally:
        release(svc)
        svc.stop()
