"""minifield-worker benchmark: packed SFT 12.0.0 tokens/s vs a plain padded full-weight loop.

Same model, rows, updates (the same dataset rows per update, in the plan's order),
AdamW settings and FP32 compute for both, measured one after the other in this process:

- baseline: each update's rows right-padded to its longest row with an attention mask,
  labels −100 outside the action target, the model's own mean loss over
  full-vocabulary logits at every position, AdamW over every parameter;
- ours: :class:`akka_optimize.minifield.train.Worker` running the 12.0.0 recipe — whole
  rows packed into rows of ``sequence_length`` tokens, per-conversation attention, the
  LM head only at supervised positions in chunks.

Rows: GSM8K questions as prompts (``data/gsm8k/train.jsonl``), the action
``{"name": "answer", "arguments": {"value": <final number>}}``. tokens/s counts real
(unpadded) tokens of the timed updates (the first update of each side is a warm-up).
Quick: the tiny model; full: SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _rows(path: Path, n: int) -> None:
    lines = (REPO / "data" / "gsm8k" / "train.jsonl").read_text().splitlines()[:n]
    with path.open("w") as f:
        for raw in lines:
            item = json.loads(raw)
            answer = item["answer"].rsplit("####", 1)[-1].strip()
            row = {
                "messages": [{"role": "user", "content": item["question"]}],
                "action": {"name": "answer", "arguments": {"value": answer}},
            }
            f.write(json.dumps(row) + "\n")


def _baseline(worker: Any, lr: float) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(worker.model_dir, dtype=torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), eps=1e-8)
    by_row = {e.row: e for e in worker.examples}
    tokens, elapsed = 0, 0.0
    for k, update in enumerate(worker.plan.updates):
        rows = [by_row[r] for mb in update for i in mb for r in worker.plan.rows[i].dataset_rows]
        longest = max(len(e.input_ids) for e in rows)
        ids = torch.zeros(len(rows), longest, dtype=torch.long)
        mask = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        for j, e in enumerate(rows):
            n = len(e.input_ids)
            ids[j, :n] = torch.tensor(e.input_ids)
            mask[j, :n] = 1
            labels[j, :n] = torch.where(torch.tensor(e.stage) != 0, ids[j, :n], -100)
        started = time.perf_counter()
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if k:  # the first update is a warm-up
            elapsed += time.perf_counter() - started
            tokens += sum(len(e.input_ids) for e in rows)
    return tokens / elapsed


def run(quick: bool) -> list[dict[str, Any]]:
    """Packed SFT vs the padded loop on the same rows and updates (see module docstring)."""
    from akka_optimize.minifield.train import Worker

    from .serving import _model_dir

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = _model_dir(root, quick)
        _rows(root / "data.jsonl", 32 if quick else 64)
        recipe = {
            "schema_version": "12.0.0",
            "model": {"implementation": "hf-causal-lm-v1", "path": str(model)},
            "data": {"path": "data.jsonl"},
            "training": {
                "sequence_length": 512,
                "rows_per_microbatch": 1,
                "gradient_accumulation_steps": 1,
                "compute_dtype": "float32",
                "optimizer": {"learning_rate": 1e-5},
            },
            "limits": {"max_steps": 8 if quick else 12},
        }
        (root / "recipe.json").write_text(json.dumps(recipe))
        steps: list[dict[str, Any]] = []
        worker = Worker(root / "recipe.json", root / "out", steps.append)
        worker.run()
        timed = [e for e in steps if e.get("event") == "step"][1:]
        ours = sum(e["input_tokens"] for e in timed) / sum(e["step_time_s"] for e in timed)
        base = _baseline(worker, 1e-5)
    size = "tiny model" if quick else "SmolLM2-135M"
    return [
        {
            "name": f"minifield packed SFT 12.0.0 vs padded full-weight loop, {size} fp32",
            "value": round(ours, 1),
            "unit": "tokens/s",
            "baseline": round(base, 1),
            "ratio": ours / base,
            "detail": f"{len(worker.examples)} rows, {len(worker.plan.updates)} updates",
        }
    ]
