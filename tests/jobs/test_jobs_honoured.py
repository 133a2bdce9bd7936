"""Accepted means honoured (issue 47, plan breaks 1-5): a plan the dry run and the start
accept trains, and one the worker could not train is refused by both with the same sentence
naming the field, before any run exists or any device is claimed (jobs/admission.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from jobs_helpers import TINY, gsm8k_rows, run_json, same_refusal, sft_plan

from helpers import LiveService

BASE = sft_plan(epochs=1)

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def _plan(config: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    plan = copy.deepcopy(BASE)
    plan["config"].update(config or {})
    plan.update(top)
    return plan


def _write(path, rows: list[dict[str, Any]]):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def demo(service: LiveService, tmp_path) -> LiveService:
    """Project ``demo``, the tiny model selected (its template renders neither tools nor
    images), and datasets: ``demo/train`` (GSM8K conversations), ``demo/tools`` (tool-call
    rows), ``demo/images`` (a user turn with an image) and ``demo/prompts`` (prompt rows:
    a user message last, nothing to supervise)."""
    service.cli("training", "projects", "create", "demo", check=True)
    service.cli("training", "base-models", "select", TINY, "--wait", check=True)
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    tools = [
        {
            "tools": TOOLS,
            "messages": [
                {"role": "user", "content": f"Where is order {i}?"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
                {"role": "assistant", "content": "It has shipped."},
            ],
        }
        for i in range(3)
    ]
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    images = [
        {
            "messages": [
                {"role": "user", "content": [image, {"type": "text", "text": f"Cat {i}?"}]},
                {"role": "assistant", "content": "A cat."},
            ]
        }
        for i in range(3)
    ]
    prompts = [
        {
            "messages": [{"role": "user", "content": f"What is {i} + {i}?"}],
            "ground_truth": str(2 * i),
        }
        for i in range(3)
    ]
    files = {
        "demo/train": gsm8k_rows(tmp_path / "train.jsonl", 4),
        "demo/tools": _write(tmp_path / "tools.jsonl", tools),
        "demo/images": _write(tmp_path / "images.jsonl", images),
        "demo/prompts": _write(tmp_path / "prompts.jsonl", prompts),
    }
    for name, path in files.items():
        service.cli("registry", "datasets", "register", name, "-f", str(path), check=True)
    return service


# (break, plan, code, field, words the message must hold)
REFUSALS = [
    (
        "2: two devices, no profile, no GPU",
        _plan(execution={"gpus": 2}),
        "no_schedulable_device",
        "execution.gpus",
        "resolved to H100, of which this machine observes 0, so the run could not start; no "
        "device profile this deployment can schedule holds 2 devices; lower execution.gpus. "
        "The device profiles: cpu (cpu): 1 per node, 1 observed; H100 (cuda): 8 per node, "
        "0 observed",
    ),
    (
        "3: flash_attention_2 on cpu",
        _plan({"model": {"attentionImplementation": "flash_attention_2"}}),
        "not_available",
        "config.model.attentionImplementation",
        "flash_attention_2 runs on CUDA only; this run trains on cpu. Use sdpa.",
    ),
    (
        "4: tool rows on a template without tools",
        _plan({"dataset": "demo/tools"}),
        "row_not_renderable",
        "config.dataset",
        "row 1: the base model's chat template drops tool calls",
    ),
    (
        "4: image rows on a text-only model",
        _plan({"dataset": "demo/images"}),
        "row_not_renderable",
        "config.dataset",
        "row 1: the row has images",
    ),
    (
        "5: a validation dataset of prompt rows",
        _plan({"data": {"validationDataset": "demo/prompts"}}),
        "dataset_not_trainable",
        "config.data.validationDataset",
        "no supervised token remains in the dataset (3 rows: 3 with no supervised token",
    ),
]


def test_plans_the_worker_cannot_train_are_refused_alike_naming_the_field(
    demo: LiveService,
) -> None:
    """Breaks 2-5: each plan was accepted by the dry run and the start, then failed in the
    worker (``_cuda_setDevice``, "runs on CUDA only", a row the template drops, "no
    supervised token remains" blamed on the training dataset). Now the dry run and the
    start refuse it with the same code, field and sentence, and no run exists."""
    for name, plan, code, field, words in REFUSALS:
        err = same_refusal(demo, plan)
        assert (err["code"], err["field"]) == (code, field), (name, err)
        assert words in err["message"], (name, err["message"])
        if field.startswith("config.") and "ataset" in field:  # the dataset is named
            ref = (
                plan["config"].get("data", {}).get("validationDataset") or plan["config"]["dataset"]
            )
            assert err["message"].startswith(f"{field} {ref}:v1@sha256:"), err["message"]
    capacity = demo.api("GET", "/v1/training/capacity").json()
    assert all(p["inUse"] == 0 for p in capacity["pools"]), capacity
    # the same plans with what they may state are accepted: the refusals are the plans'
    for ok in (
        _plan(execution={"gpus": 1}),
        _plan({"model": {"attentionImplementation": "sdpa"}}),
        _plan({"data": {"validationDataset": "demo/train"}}),
    ):
        dry = demo.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=ok).json()
        assert dry["accepted"] is True and dry.get("refusals", []) == [], dry


def test_a_bf16_adapter_trains_under_fp32_compute(demo: LiveService, tmp_path) -> None:
    """Break 1: ``weightPrecision: bf16`` with the CPU's fp32 compute was accepted and
    failed at step 0 ("expected m1 and m2 to have the same dtype"). It trains: the run
    succeeds, its resolved settings keep both precisions, and a model is registered."""
    plan = _plan({"model": {"weightPrecision": "bf16"}})
    dry = demo.api("POST", "/v1/training/runs", params={"dryRun": "true"}, json=plan).json()
    assert dry["accepted"] is True, dry
    values = {v["path"]: v["value"] for g in dry["settings"] for v in g["values"]}
    assert values["config.model.weightPrecision"] == "bf16", values
    assert values["config.model.precision"] == "fp32", values
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    run = run_json(demo, "training", "runs", "start", "-f", str(path), "--wait", "--yes")
    assert run["state"] == "SUCCEEDED", run
    assert run["results"]["step"] == 2 and run["results"]["model"], run["results"]
