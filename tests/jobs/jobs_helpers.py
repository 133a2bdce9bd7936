"""Shared set-up for run-lifecycle tests: a project, the tiny model and GSM8K-shaped rows."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from helpers import REPO, LiveService, gsm8k_rows  # noqa: F401 (re-exported)

TINY = "akka-optimize/tiny-smollm2"


def setup_project(svc: LiveService, tmp: Path, rows: int = 8) -> None:
    """Project ``demo``, the tiny base model selected, ``demo/train`` registered."""
    svc.cli("training", "projects", "create", "demo", check=True)
    svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
    data = gsm8k_rows(tmp / "train.jsonl", rows, system="Answer with #### N.")
    svc.cli("registry", "datasets", "register", "demo/train", "-f", str(data), check=True)


def catalog_home(tmp: Path, entries: list[dict[str, Any]]) -> Path:
    """A service home (``tmp/home``) whose deployment catalog is the shipped one plus
    ``entries``."""
    from importlib import resources

    import yaml

    home = tmp / "home"
    home.mkdir()
    shipped = resources.files("akka_optimize").joinpath("deployment.yaml").read_text()
    assert "\ncatalog: null" in shipped
    override = yaml.safe_dump({"catalog": [{"include": "shipped"}, *entries]}, sort_keys=False)
    (home / "deployment.yaml").write_text(shipped.replace("\ncatalog: null\n", "\n" + override))
    return home


def tiny_catalog_home(tmp: Path, models: list[tuple[str, str, Path]]) -> Path:
    """:func:`catalog_home` adding, for each ``(name, repository, folder)``, the entry
    ``test/tiny-NAME``: the real ``repository`` entry's family, ``autoClass`` and
    ``loraTargetModules`` with ``folder`` as a ``local`` source."""
    from akka_optimize.catalog import load_catalog

    catalog = load_catalog(None)
    entries: list[dict] = []
    for name, repository, folder in models:
        real = catalog.get(repository).model_dump(by_alias=True, exclude_none=True)
        entries.append(
            {
                **{k: real[k] for k in ("family", "modelType", "loraTargetModules")},
                **({"autoClass": real["autoClass"]} if "autoClass" in real else {}),
                "repository": f"test/tiny-{name}",
                "parameters": 1_000_000,
                "maxContextTokens": 256,
                "chatTemplate": "chatml",
                "source": {"kind": "local", "path": str(folder)},
                "envelope": {"cpu": {"qualifiedTokens": 256, "memoryGiB": 1, "measured": False}},
            }
        )
    return catalog_home(tmp, entries)


def write_plan(path: Path, **training: object) -> Path:
    """A supervised plan on the tiny model; ``training`` overrides hyperparams.training."""
    path.write_text(json.dumps(sft_plan(**training)))
    return path


def sft_plan(**training: object) -> dict[str, Any]:
    """The plan :func:`write_plan` writes: ``demo/train`` on the tiny model, two epochs of
    micro batch 2, seed 7; ``training`` overrides hyperparams.training, ``execution`` the
    execution section."""
    execution = training.pop("execution", {})
    return {
        "kind": "run",
        "project": "demo",
        "baseModel": TINY,
        "config": {
            "dataset": "demo/train",
            "method": "sft",
            "maxSeqLength": 512,
            "hyperparams": {
                "training": {"epochs": 2, "microBatchPerGpu": 2, "seed": 7, **training},
                "optimizer": {"learningRate": 0.001},
            },
        },
        "execution": execution,
    }


DIGITS_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Share of the completion's characters that are digits (a number that varies)."""
    text = solution_str or " "
    return sum(c.isdigit() for c in text) / len(text)
'''
"""A reward bundle's ``reward.py``: a deterministic score in [0, 1] that varies per answer."""


def write_rl_plan(path: Path, model_name: str | None = None, **rl: object) -> Path:
    """A three-update reinforcement plan on ``demo/train`` rewarded by ``demo/scoring``
    (2 prompts × 4 samples of 6 tokens per update, a save every update); ``rl``
    overrides rlHyperparams."""
    plan: dict = {
        "kind": "run",
        "project": "demo",
        "baseModel": TINY,
        "config": {
            "dataset": "demo/train",
            "method": "rl",
            "maxSeqLength": 512,
            "rlHyperparams": {
                "steps": 3,
                "promptsPerStep": 2,
                "samplesPerPrompt": 4,
                "maxNewTokens": 6,
                "reward": "bundle:demo/scoring#reward",
                "optimizer": {"learningRate": 0.001},
                **rl,
            },
        },
        "execution": {"saveEverySteps": 1},
    }
    if model_name:
        plan["modelName"] = model_name
    path.write_text(json.dumps(plan))
    return path


def same_refusal(svc: LiveService, plan: dict[str, Any]) -> dict[str, Any]:
    """POST the plan as a dry run and as a start; assert they refuse alike, create nothing,
    and return the start's error."""
    dry = svc.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=plan)
    assert dry.status_code == 200, dry.text
    report = dry.json()
    assert report["accepted"] is False and report["configHash"]
    start = svc.api("POST", "/v1/training/runs", json=plan)
    assert start.status_code in (400, 409), start.text
    err = start.json()["error"]
    first = report["refusals"][0]
    assert (first["code"], first["field"], first["message"], first["status"]) == (
        err["code"],
        err["field"],
        err["message"],
        start.status_code,
    )
    assert svc.api("GET", "/v1/training/runs").json()["runs"] == []
    return err


def run_json(svc: LiveService, *args: str) -> dict:
    return json.loads(svc.cli(*args, "-o", "json", check=True).stdout)


def wait_state(
    svc: LiveService, run_id: str, states: tuple[str, ...], timeout: float = 300, predicate=None
) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = svc.api("GET", f"/v1/training/runs/{run_id}").json()
        if r["state"] in states and (predicate is None or predicate(r)):
            return r
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not reach {states}: {r}")


def worker_pid(run_id: str) -> int:
    out = subprocess.run(
        ["pgrep", "-f", f"akka_optimize.jobs.worker .*{run_id}"], capture_output=True, text=True
    )
    pids = [int(p) for p in out.stdout.split()]
    assert pids, f"no worker process for run {run_id}"
    return pids[0]


def two_cpu_deployment(home: Path, **sections: dict[str, Any]) -> Path:
    """Write ``home/deployment.yaml``: the shipped deployment with two devices in the cpu
    profile (two gloo ranks), each of ``sections`` merged into its top-level section."""
    from importlib import resources

    import yaml

    raw = yaml.safe_load(resources.files("akka_optimize").joinpath("deployment.yaml").read_text())
    for profile in raw["deviceProfiles"]:
        if profile["name"] == "cpu":
            profile["devicesPerNode"] = 2
    for name, values in sections.items():
        raw[name] = {**(raw.get(name) or {}), **values}
    path = home / "deployment.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
