"""Catalog families train through the run lifecycle and register (issue 15 item 1).

The engine tests (tests/engine/test_engine_families.py) train every family's tiny model
directly. Here every family but Llama (which every other lifecycle test trains) goes the
user's way, multimodal ones with regular-expression targets (Gemma 3, Gemma 4, Ministral 3)
and text ones with list targets (Gemma 3 text, Ministral, Qwen3): a deployment catalog entry
carries the real entry's family, ``autoClass`` and ``loraTargetModules`` with the tiny
model's folder as a ``local`` source, `base-models select`, `runs start --wait` (two
updates) and the registered model. The run's ``adaptedModules`` are the language model's
layers only (no vision or audio tower). A byte-level tokenizer of 100 tokens (ChatML
template) fits the tiny vocabulary of 256 below the image and audio token ids.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from jobs_helpers import run_json, tiny_catalog_home

from helpers import LiveService, byte_tokenizer, free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from families import FAMILIES, build  # noqa: E402

CHOSEN = ["gemma3", "gemma3-text", "gemma4", "ministral", "ministral3", "qwen3"]
ROWS = [
    {
        "messages": [
            {"role": "user", "content": f"What is {a} plus {b}?"},
            {"role": "assistant", "content": f"{a} + {b} = {a + b}. #### {a + b}"},
        ]
    }
    for a, b in [(2, 3), (4, 5), (6, 7), (8, 9)]
]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """One service whose catalog adds a tiny entry per chosen family (``test/tiny-NAME``)."""
    tmp = tmp_path_factory.mktemp("families")
    models = []
    for family in (f for f in FAMILIES if f.name in CHOSEN):
        folder = build(family, tmp / family.name)
        byte_tokenizer(folder)
        models.append((family.name, family.repository, folder))
    home = tiny_catalog_home(tmp, models)
    svc = LiveService(home=home, config_dir=tmp / "config", port=free_port()).start()
    data = tmp / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    svc.cli("training", "projects", "create", "demo", check=True)
    svc.cli("registry", "datasets", "register", "demo/sums", "-f", str(data), check=True)
    try:
        yield svc, tmp
    finally:
        svc.stop()


@pytest.mark.parametrize("name", CHOSEN)
def test_a_catalog_family_trains_two_updates_and_registers(service, name) -> None:
    svc, tmp = service
    family = next(f for f in FAMILIES if f.name == name)
    repo = f"test/tiny-{name}"
    svc.cli("training", "base-models", "select", repo, "--wait", check=True)
    plan = {
        "kind": "run",
        "project": "demo",
        "baseModel": repo,
        "modelName": f"sums-{name}",
        "config": {
            "dataset": "demo/sums",
            "method": "sft",
            "maxSeqLength": 128,
            "hyperparams": {
                "training": {"epochs": 1, "microBatchPerGpu": 2, "maxSteps": 2, "seed": 1},
                "optimizer": {"learningRate": 0.001},
            },
        },
    }
    path = tmp / f"plan-{name}.json"
    path.write_text(json.dumps(plan))
    started = svc.cli("training", "runs", "start", "-f", str(path), "--yes", "--wait")
    assert started.returncode == 0, started.stdout + started.stderr
    run = run_json(svc, "training", "runs", "list")["runs"][0]
    run = svc.api("GET", f"/v1/training/runs/{run['id']}").json()
    assert run["state"] == "SUCCEEDED" and run["baseModel"].startswith(repo)
    results = run["results"]
    assert results["step"] == 2
    prefix = "model.language_model.layers." if family.multimodal else "model.layers."
    modules = results["adaptedModules"]
    assert len(modules) == 14 and all(m.startswith(prefix) for m in modules), modules
    model = results["model"]
    assert model.startswith(f"demo/sums-{name}:v1"), model
    versions = svc.api("GET", f"/v1/registry/models/demo/sums-{name}/versions").json()
    assert [v["version"] for v in versions["items"]] == ["v1"]
