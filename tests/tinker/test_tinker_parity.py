"""An SDK loop reaches the adapter a plan-driven run reaches (issue 21), on the tiny model
against a live service, with the official ``tinker==0.38.0`` SDK unmodified.

A supervised plan (one conversation per pass, two per update, a warm-up-free linear
schedule, a gradient clip, weight decay) trains four updates. The SDK loop then trains
the same conversations in the same order, read from the run's own job spec: each datum's
weights are the conversation's loss mask divided by its update's supervised tokens, and
each ``optim_step`` passes the plan's rate for that update, betas, epsilon, weight decay
and clip explicitly. The two registered adapters agree within 1e-5 in every tensor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tinker_kit import TINY, tinker_key

from helpers import LiveService, free_port, gsm8k_rows

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402


def _plan(path: Path) -> Path:
    hyper = {
        "lora": {"rank": 4, "alpha": 32, "dropout": 0},
        "optimizer": {"learningRate": 0.002, "weightDecay": 0.01, "maxGradNorm": 0.5},
        "scheduler": {"kind": "linear", "warmupRatio": 0},
        "training": {"epochs": 2, "microBatchPerGpu": 1, "gradientAccumulation": 2, "seed": 7},
    }
    config = {"dataset": "demo/train", "method": "sft", "maxSeqLength": 512}
    config |= {"data": {"use_dynamic_bsz": False}, "hyperparams": hyper}
    plan = {"kind": "run", "project": "demo", "baseModel": TINY, "config": config}
    path.write_text(json.dumps(plan))
    return path


def _adapter(svc: LiveService, ref: str, dest: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    svc.cli("registry", "models", "object", ref, "-o", str(dest), check=True)
    return load_file(dest / "adapter_model.safetensors")


def _examples(svc: LiveService, run_id: str, rows: Path) -> tuple[Any, list]:
    """The run's engine settings and conversations, prepared as its worker prepared them."""
    from transformers import AutoTokenizer

    from akka_optimize.data.masks import prepare_examples
    from akka_optimize.data.policy import LossPolicy
    from akka_optimize.engine.config import EngineConfig
    from akka_optimize.jobs.spec import JobSpec

    spec = JobSpec.read(svc.home / "runs" / run_id / "attempt-1" / "spec.json")
    tok = AutoTokenizer.from_pretrained(spec.model_dir)
    data = [json.loads(line) for line in rows.read_text().splitlines() if line.strip()]
    policy = LossPolicy.from_config(spec.loss)
    prepared = prepare_examples(tok, data, policy, spec.max_seq_length, spec.on_too_long)
    return EngineConfig(**spec.engine), prepared.examples


def test_an_sdk_loop_reaches_the_plan_driven_adapter(tmp_path: Path) -> None:
    from akka_optimize.engine.schedule import lr_factor
    from akka_optimize.engine.sft_order import total_updates, update_rows

    svc = LiveService(home=tmp_path / "home", config_dir=tmp_path / "c", port=free_port()).start()
    try:
        svc.cli("training", "projects", "create", "demo", check=True)
        svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
        rows = gsm8k_rows(tmp_path / "train.jsonl", 4, system="Answer with #### N.")
        svc.cli("registry", "datasets", "register", "demo/train", "-f", str(rows), check=True)
        plan = str(_plan(tmp_path / "p.json"))
        out = svc.cli("training", "runs", "start", "-f", plan, "--wait", "-o", "json", check=True)
        run = json.loads(out.stdout)
        assert run["state"] == "SUCCEEDED", run
        cfg, examples = _examples(svc, run["id"], rows)
        total = total_updates(cfg, len(examples))
        assert total == 4 and not cfg.dynamic_batches and cfg.lora_dropout == 0

        client = tinker.ServiceClient(base_url=svc.url, api_key=tinker_key(svc, "demo"))
        trainer = client.create_lora_training_client(TINY, rank=4, seed=7, train_unembed=False)
        trainer = trainer.result() if hasattr(trainer, "result") else trainer
        for update in range(1, total + 1):
            convs = update_rows(examples, cfg, update)
            n = sum(1 for ex in convs for w in ex.weights[1:] if w > 0)  # supervised tokens
            batch = [
                types.Datum(
                    model_input=types.ModelInput.from_ints(ex.input_ids[:-1]),
                    loss_fn_inputs={
                        "target_tokens": ex.input_ids[1:],
                        "weights": [float(w) / n for w in ex.weights[1:]],
                    },
                )
                for ex in convs
            ]
            factor = lr_factor(cfg.scheduler, update, total, cfg.warmup_ratio,
                               cfg.min_learning_rate_ratio)  # fmt: skip
            adam = types.AdamParams(
                learning_rate=cfg.learning_rate * factor,
                beta1=cfg.adam_beta1,
                beta2=cfg.adam_beta2,
                eps=cfg.adam_epsilon,
                weight_decay=cfg.weight_decay,
                grad_clip_norm=cfg.max_grad_norm,
            )
            trainer.forward_backward(batch, "cross_entropy").result()
            trainer.optim_step(adam).result()
        saved = trainer.save_weights_for_sampler("parity").result()
        assert saved.path.endswith("/sampler_weights/parity")
        runs = svc.api("GET", "/v1/training/runs", params={"project": "demo"}).json()["runs"]
        tinker_run = next(r for r in runs if r["method"] == "tinker")
        sdk_ref = svc.api("GET", f"/v1/training/runs/{tinker_run['id']}").json()["results"]
        plan_w = _adapter(svc, run["results"]["model"], tmp_path / "plan")
        sdk_w = _adapter(svc, sdk_ref["model"], tmp_path / "sdk")
        client.close("success").result()
    finally:
        svc.stop()
    assert sorted(plan_w) == sorted(sdk_w) and plan_w
    worst = max(float((plan_w[k] - sdk_w[k]).abs().max()) for k in plan_w)
    moved = max(float(plan_w[k].abs().max()) for k in plan_w if "lora_B" in k)
    assert moved > 1e-3  # the updates moved the adapter (B starts at zero)
    assert worst < 1e-5, worst
