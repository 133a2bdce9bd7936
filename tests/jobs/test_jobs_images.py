"""Image rows train end to end on a multimodal family (F031; seeds/001 "Datasets live in
the registry"): a JSONL naming a local image is registered (the CLI packs the image, the
registry stores it), the dry run counts the image rows as trainable on the tiny Gemma 3
(its processor in its folder, tests/engine/vision_families.py), a text-only model
(the tiny Qwen3) refuses them alike at dry run and start naming the row and the model,
and `runs start --wait` trains three updates, the loss going down, and registers an
adapter on the language model only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from jobs_helpers import run_json, same_refusal, sft_plan, tiny_catalog_home

from helpers import LiveService, byte_tokenizer, free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from families import FAMILIES, build  # noqa: E402
from vision_families import gemma3_processor, png  # noqa: E402

ROWS = [
    {"messages": [
        {"role": "user", "content": [{"type": "image", "image": "./cat.png"}, {"type": "text", "text": "What is it?"}]},
        {"role": "assistant", "content": "A cat."},
    ]},
    {"messages": [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi."}]},
    {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "And this?"}, {"type": "image_url", "image_url": {"url": "dog.png"}}]},
        {"role": "assistant", "content": "A dog."},
    ]},
]  # fmt: skip


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """A service whose catalog adds the tiny Gemma 3 (with its processor) and the tiny
    Qwen3 (text-only), a project and the dataset ``demo/pics`` with two image rows."""
    tmp = tmp_path_factory.mktemp("images")
    models = []
    for name in ("gemma3", "qwen3"):
        family = next(f for f in FAMILIES if f.name == name)
        folder = build(family, tmp / name)
        gemma3_processor(folder) if name == "gemma3" else byte_tokenizer(folder)
        models.append((name, family.repository, folder))
    home = tiny_catalog_home(tmp, models)
    svc = LiveService(home=home, config_dir=tmp / "config", port=free_port()).start()
    data = tmp / "data"
    data.mkdir()
    (data / "cat.png").write_bytes(png(1))
    (data / "dog.png").write_bytes(png(2))
    (data / "pics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    svc.cli("training", "projects", "create", "demo", check=True)
    svc.cli(
        "registry", "datasets", "register", "demo/pics", "-f", str(data / "pics.jsonl"), check=True
    )
    for name in ("gemma3", "qwen3"):
        svc.cli("training", "base-models", "select", f"test/tiny-{name}", "--wait", check=True)
    try:
        yield svc, tmp
    finally:
        svc.stop()


def _plan(model: str) -> dict:
    """``demo/pics`` on ``test/tiny-MODEL``: three epochs of one update (micro batch 3)."""
    plan = sft_plan(epochs=3, microBatchPerGpu=3, seed=1)
    plan.update(baseModel=f"test/tiny-{model}", modelName=f"pics-{model}")
    plan["config"].update(dataset="demo/pics", maxSeqLength=128)
    plan["config"]["hyperparams"]["optimizer"]["learningRate"] = 0.05
    return plan


def test_image_rows_register_dry_run_refuse_on_text_and_train_on_gemma3(service) -> None:
    svc, tmp = service
    version = svc.api("GET", "/v1/registry/datasets/demo/pics/versions").json()["items"][0]
    assert len(version["metadata"]["images"]) == 2  # both images stored

    # a text-only model refuses the image rows alike at dry run and start, naming both
    err = same_refusal(svc, _plan("qwen3"))
    assert err["field"] == "config.dataset", err
    assert "row 1: the row has images (messages[0].content)" in err["message"]
    assert "test/tiny-qwen3 is text-only" in err["message"]

    # the multimodal model: every row trains, the dry run says so
    dry = svc.api(
        "POST", "/v1/training/runs", params={"dryRun": "true"}, json=_plan("gemma3")
    ).json()
    assert dry["accepted"] is True and dry["refusals"] == [], dry
    findings = dry["findings"]
    assert (findings["rows"], findings["trainable_rows"], findings["refused_rows"]) == (3, 3, [])

    path = tmp / "plan.json"
    path.write_text(json.dumps(_plan("gemma3")))
    started = svc.cli("training", "runs", "start", "-f", str(path), "--yes", "--wait")
    assert started.returncode == 0, started.stdout + started.stderr
    run = run_json(svc, "training", "runs", "list")["runs"][0]
    run = svc.api("GET", f"/v1/training/runs/{run['id']}").json()
    assert run["state"] == "SUCCEEDED", run
    results = run["results"]
    assert results["step"] == 3
    modules = results["adaptedModules"]
    assert len(modules) == 14 and all(m.startswith("model.language_model.layers.") for m in modules)
    assert results["model"].startswith("demo/pics-gemma3:v1")
    metrics = run_json(svc, "training", "runs", "metrics", run["id"])
    losses = [m["loss"] for m in metrics["metrics"]]
    assert len(losses) == 3 and losses[-1] < losses[0], losses
