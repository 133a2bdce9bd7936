"""Served = trained, end to end (issue 28 item 3; behaviours.md 7): a run trained through
``runs start --wait`` registers an adapter; ``endpoints create`` serves that version.

The reference is the adapter as it stood at the end of training, in the worker's process
before the save (the run's ``trainedAnswers``; issue 56 item 1: a reference read back
from the registry is the file the endpoint loads, and cannot see a save that changes the
adapter). The endpoint's greedy answers equal the worker's and the trainer's sampling
with the registered adapter (plain transformers + PEFT, in this test's process), and
differ from the base model's; the registered adapter gives the worker's answer tokens the
log-probabilities the worker measured (an adapter saved at another scaling answers the
same words, the taught answer being far ahead, but not with the same numbers); and its
config's scaling is the plan's ``lora.alpha`` / ``lora.rank``."""

from __future__ import annotations

import json
from pathlib import Path

from akka_optimize.serving.check import CHECK_MAX_TOKENS, CHECK_PROMPTS, trainer_greedy

TINY = "akka-optimize/tiny-smollm2"
TAUGHT = "Blue whales sing at dawn."
LORA = {"rank": 8, "alpha": 16}  # the plan's: scaling alpha / rank = 2


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
                "lora": LORA,
                "training": {"epochs": 12, "microBatchPerGpu": 3, "seed": 3},
                "optimizer": {"learningRate": 0.01},
            },
        },
    }
    path.write_text(json.dumps(plan))
    return path


LOGPROB_TOL = 1e-3
"""nats: the worker and this test each score the answer in one fp32 pass on the CPU, the
worker through its training attention (measured: equal); the adapter saved at half its
scaling (lora_alpha = r) is 0.27 nats off."""


def _worst_logprob_gap(base_dir: Path, adapter_dir: Path, trained: dict) -> float:
    """The largest gap between the worker's log-probabilities of its answer tokens and the
    registered adapter's, fed the same prompt and tokens."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from akka_optimize.engine.check_prompts import check_prompt_ids
    from akka_optimize.engine.sampling import answer_logprobs

    tok = AutoTokenizer.from_pretrained(base_dir)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype="float32")
    model = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    gaps = [0.0]
    for p, ids, want in zip(
        trained["prompts"], trained["tokens"], trained["logprobs"], strict=True
    ):
        got = answer_logprobs(model, check_prompt_ids(tok, p, trained["instructions"]), ids)
        gaps += [abs(a - b) for a, b in zip(got, want, strict=True)]
    return max(gaps)


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

    # the worker's answers with the adapter in memory, before it was saved
    trained = run["results"]["trainedAnswers"]
    assert trained["prompts"] == list(CHECK_PROMPTS) and trained["instructions"] is None
    assert len(trained["answers"]) == len(trained["tokens"]) == len(CHECK_PROMPTS)

    # the trainer's own greedy answers with the adapter the registry holds
    folder = tmp_path / "registered"
    svc.cli("registry", "models", "object", model, "-o", str(folder), check=True)
    assert _worst_logprob_gap(tiny_model_dir, folder, trained) < LOGPROB_TOL
    conf = json.loads((folder / "adapter_config.json").read_text())
    assert (conf["r"], conf["lora_alpha"]) == (LORA["rank"], LORA["alpha"])
    assert not conf.get("use_rslora")  # scaling alpha / r, as trained
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
    assert served == trained["answers"]  # serves what the run trained
    assert served == trainer["adapter"]
    assert served != trainer["base"]  # the trained adapter changes the answers
    assert any(TAUGHT.split()[0] in s for s in served)  # and it learned what it was taught
