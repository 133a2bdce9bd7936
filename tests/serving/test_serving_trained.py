"""Served = trained, end to end (issue 28 item 3; behaviours.md 7): a run trained through
``runs start --wait`` registers an adapter; ``endpoints create`` serves that version; the
endpoint's greedy answers equal the trainer's own sampling with the registered adapter
(plain transformers + PEFT, in this test's process) and differ from the base model's."""

from __future__ import annotations

import json
from pathlib import Path

from akka_optimize.serving.check import CHECK_MAX_TOKENS, CHECK_PROMPTS, trainer_greedy

TINY = "akka-optimize/tiny-smollm2"
TAUGHT = "Blue whales sing at dawn."


def _plan(path: Path) -> Path:
    plan = {
        "kind": "run",
        "project": "demo",
        "baseModel": TINY,
        "modelName": "taught",
        "config": {
            "dataset": "demo/taught",
            "method": "sft",
            "maxSeqLength": 128,
            "hyperparams": {
                "lora": {"rank": 8, "alpha": 16},
                "training": {"epochs": 12, "microBatchPerGpu": 3, "seed": 3},
                "optimizer": {"learningRate": 0.01},
            },
        },
    }
    path.write_text(json.dumps(plan))
    return path


def test_the_endpoint_serves_what_the_run_trained(service, tiny_model_dir, tmp_path) -> None:
    svc = service
    svc.cli("training", "projects", "create", "demo", check=True)
    svc.cli("training", "base-models", "select", TINY, "--wait", check=True)
    rows = tmp_path / "taught.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": p},
                                     {"role": "assistant", "content": TAUGHT}]}) + "\n"
            for p in CHECK_PROMPTS
        )
    )  # fmt: skip
    svc.cli("registry", "datasets", "register", "demo/taught", "-f", str(rows), check=True)
    out = svc.cli("training", "runs", "start", "-f", str(_plan(tmp_path / "plan.json")),
                  "--wait", "-o", "json", check=True)  # fmt: skip
    run = json.loads(out.stdout[out.stdout.index("{") :])
    assert run["state"] == "SUCCEEDED", run
    model = run["results"]["model"]
    assert model.startswith("demo/taught:v1@sha256:")

    # the trainer's own greedy answers with the adapter the registry holds
    folder = tmp_path / "registered"
    svc.cli("registry", "models", "object", model, "-o", str(folder), check=True)
    trainer = trainer_greedy(tiny_model_dir, folder)

    out = svc.cli("training", "endpoints", "create", "--model", "demo/taught:v1", "--wait",
                  "-o", "json", check=True)  # fmt: skip
    ep = json.loads(out.stdout[out.stdout.index("{") :])
    assert ep["state"] == "READY", ep
    served = []
    for p in CHECK_PROMPTS:
        r = svc.api(
            "POST",
            f"/v1/training/endpoints/{ep['id']}/openai/v1/chat/completions",
            json={"model": "demo/taught:v1", "temperature": 0, "max_tokens": CHECK_MAX_TOKENS,
                  "messages": [{"role": "user", "content": p}]},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        served.append(r.json()["choices"][0]["message"]["content"])
    assert served == trainer["adapter"]
    assert served != trainer["base"]  # the trained adapter changes the answers
    assert any(TAUGHT.split()[0] in s for s in served)  # and it learned what it was taught
