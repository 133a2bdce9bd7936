"""Preference (DPO) training speed and memory against TRL's ``DPOTrainer`` (issue 50).

Both sides train the same GSM8K pairs (the reference answer preferred over it with a final
number one too high, :mod:`examples.gsm8k.make_pairs`'s pairs) on the same model from a
fresh LoRA adapter (rank 16, alpha 32, no dropout, the attention and MLP projections),
fp32 on CPU (bf16 on CUDA), ``PAIRS_PER_UPDATE`` pairs per update, sigmoid loss, β 0.1,
each side in a fresh process: tokens/s (both answers' conversations, every token) over
the timed updates after one warm-up update, and the peak resident-set growth from loading
the model to the last update (TRL's tokenization of the pairs included, as ours). TRL's reference is its own: the same model with the adapter disabled, as ours.
The ratios are ours over TRL's, measured in the same run (goal: ≥ 2× tokens/s, ≤ 0.6×
memory). Without TRL (``pip install '.[bench]'``) the rows say so.

    python -m benchmarks.dpo --side ours '{"model_dir": ..., "pairs": 32, "updates": 4}'
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.engine import CACHE, REPO, _PeakRss, _smollm2_dir, _tokenizer_dir

PAIRS_PER_UPDATE = 4
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _conversational(n: int) -> list[dict]:
    sys.path.insert(0, str(REPO / "examples" / "gsm8k"))
    from make_pairs import pair

    lines = (REPO / "data/gsm8k/train.jsonl").read_text().splitlines()[:n]
    return [pair(json.loads(x)["question"], json.loads(x)["answer"], False) for x in lines]


def _ours(spec: dict) -> dict:
    from transformers import AutoTokenizer

    from akka_optimize.data.preference import prepare_pairs
    from akka_optimize.data.rows import parse_row
    from akka_optimize.engine.config import EngineConfig
    from akka_optimize.engine.dpo.loss import DpoSettings
    from akka_optimize.engine.dpo.update import train_update
    from akka_optimize.engine.session.training import TrainingSession

    model_dir = Path(spec["model_dir"])
    tok = AutoTokenizer.from_pretrained(model_dir)
    rows = [parse_row(r, i + 1) for i, r in enumerate(_conversational(spec["pairs"]))]
    pairs = prepare_pairs(tok, rows, 2048).pairs
    cfg = EngineConfig(
        device=spec["device"], lora_rank=16, lora_alpha=32.0, lora_dropout=0.0,
        learning_rate=5e-5, micro_batch=PAIRS_PER_UPDATE, target_modules=tuple(TARGETS),
    )  # fmt: skip
    with _PeakRss() as rss:
        session = TrainingSession(model_dir, cfg)
        updates = [pairs[i : i + PAIRS_PER_UPDATE] for i in range(0, len(pairs), PAIRS_PER_UPDATE)]
        train_update(session, [updates[0]], DpoSettings(0.1))  # warm-up
        t0, tokens = time.perf_counter(), 0
        for u in updates[1 : spec["updates"] + 1]:
            train_update(session, [u], DpoSettings(0.1))
            tokens += sum(p.tokens for p in u)
        seconds = time.perf_counter() - t0
    return {"tokens": tokens, "seconds": seconds, "peak_bytes": rss.growth}


def _trl(spec: dict) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    model_dir = Path(spec["model_dir"])
    tok = AutoTokenizer.from_pretrained(model_dir)
    n = PAIRS_PER_UPDATE * (spec["updates"] + 1)
    data = Dataset.from_list(_conversational(spec["pairs"])[:n])
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001, ANN003, ANN201
            times.append(time.perf_counter())

    with _PeakRss() as rss:
        dtype = torch.bfloat16 if spec["device"] == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        args = DPOConfig(
            output_dir=tempfile.mkdtemp(), beta=0.1, loss_type=["sigmoid"],
            per_device_train_batch_size=PAIRS_PER_UPDATE, max_steps=spec["updates"] + 1,
            learning_rate=5e-5, report_to="none", use_cpu=spec["device"] == "cpu",
            bf16=spec["device"] == "cuda", max_length=None, save_strategy="no",
            logging_strategy="no", dataloader_num_workers=0,
        )  # fmt: skip
        lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS)
        trainer = DPOTrainer(
            model=model, args=args, train_dataset=data, processing_class=tok, peft_config=lora,
            callbacks=[Clock()],
        )  # fmt: skip
        tokens = [int(b["attention_mask"].sum()) for b in trainer.get_train_dataloader()]
        trainer.train()
    return {"tokens": sum(tokens[1:]), "seconds": times[-1] - times[0], "peak_bytes": rss.growth}


def _side(name: str, spec: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.dpo", "--side", name, json.dumps(spec)],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"dpo bench side {name} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _model(quick: bool) -> Path:
    if not quick and (big := _smollm2_dir()) is not None:
        return big
    from akka_optimize.catalog.tiny import build_tiny_model

    dest = CACHE / "tiny-smollm2"
    if not (dest / "config.json").exists():
        build_tiny_model(_tokenizer_dir(), dest)
    return dest


def run(quick: bool) -> list[dict]:
    """``make bench``'s rows: DPO tokens/s and peak memory, ours against TRL's."""
    try:
        import trl  # noqa: F401
    except ImportError:
        why = "TRL is not installed (pip install '.[bench]')"
        return [{"name": "dpo tokens/s vs TRL DPOTrainer", "value": None, "unit": "", "detail": why}]  # fmt: skip
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = _model(quick)
    updates = 2 if quick else 6
    spec = {"model_dir": str(model), "pairs": PAIRS_PER_UPDATE * (updates + 1), "updates": updates, "device": device}  # fmt: skip
    trl_r, ours = _side("trl", spec), _side("ours", spec)
    speed = {k: r["tokens"] / r["seconds"] for k, r in (("trl", trl_r), ("ours", ours))}
    detail = f"{model.name}, {device}, {updates} timed updates of {PAIRS_PER_UPDATE} pairs"
    return [
        {
            "name": "dpo tokens/s vs TRL DPOTrainer",
            "value": speed["ours"],
            "unit": "tokens/s",
            "baseline": speed["trl"],
            "ratio": speed["ours"] / speed["trl"],
            "detail": detail + " (goal ≥ 2×)",
        },
        {
            "name": "dpo peak memory vs TRL DPOTrainer",
            "value": ours["peak_bytes"] / 2**20,
            "unit": "MiB",
            "baseline": trl_r["peak_bytes"] / 2**20,
            "ratio": ours["peak_bytes"] / max(trl_r["peak_bytes"], 1),
            "detail": detail + " (goal ≤ 0.6×)",
        },
    ]


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--side":
        fn = _ours if sys.argv[2] == "ours" else _trl
        print(json.dumps(fn(json.loads(sys.argv[3]))))
    else:
        for r in run(quick="--quick" in sys.argv):
            print(r)
