"""Shared pieces of the minifield-worker tests: action rows, recipes and a loss probe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

CITIES = ["Oslo", "Rome", "Paris", "Lima", "Cairo", "Quito"]


def write_rows(path: Path, n: int = 6) -> Path:
    """``n`` minifield.action.v1 rows: three tools, one city argument each."""
    tools = ["get_weather", "get_time", "book_table"]
    with path.open("w") as f:
        for i in range(n):
            city = CITIES[i % len(CITIES)]
            row = {
                "messages": [{"role": "user", "content": f"Request {i} about {city}"}],
                "action": {"name": tools[i % 3], "arguments": {"city": city}},
            }
            f.write(json.dumps(row) + "\n")
    return path


PAGE_FRAGMENT = {
    "sequence_length": 8192,
    "rows_per_microbatch": 1,
    "gradient_accumulation_steps": 4,
    "projection_chunk_size": 256,
    "max_projection_chunks": 8,
    "seed": 42,
    "compute_dtype": "bfloat16",
    "master_dtype": "float32",
    "quantization_profile": "disabled-v1",
    "schedule": "constant-v1",
}
"""The training fragment of seeds/003 "Packed SFT settings", verbatim."""


def recipe_doc(
    model_dir: Path | str, version: str = "12.0.0", training: dict | None = None, **limits: Any
) -> dict[str, Any]:
    """A small recipe for the tiny model: short rows, chunks of 16, learning rate 1e-2."""
    t: dict[str, Any] = {
        "sequence_length": 64,
        "projection_chunk_size": 16,
        "max_projection_chunks": 4,
        "compute_dtype": "float32",
        "optimizer": {"learning_rate": 1e-2},
    }
    if version == "13.0.0":
        t |= {"quantization_profile": "ternary-g128-v1", "schedule": "immediate-v1"}
    t |= training or {}
    return {
        "schema_version": version,
        "model": {"implementation": "hf-causal-lm-v1", "path": str(model_dir)},
        "data": {"path": "data.jsonl"},
        "training": t,
        "limits": {"checkpoint_every_steps": 100} | limits,
    }


def write_recipe(folder: Path, doc: dict[str, Any], name: str = "recipe.json") -> Path:
    """Write ``doc`` (and the rows, unless present) into ``folder``; returns the recipe path."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "data.jsonl").exists():
        write_rows(folder / "data.jsonl")
    path = folder / name
    path.write_text(json.dumps(doc))
    return path


def events(out: Path, kind: str = "step") -> list[dict[str, Any]]:
    """The events of one kind in ``out/events.jsonl``."""
    lines = (out / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def data_loss(model: torch.nn.Module, worker: Any) -> float:
    """Token-weighted cross-entropy of ``model`` over every action target of the run's rows."""
    total, n = 0.0, 0
    model.eval()
    with torch.no_grad():
        for ex in worker.examples:
            ids = torch.tensor(ex.input_ids)[None]
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            tok = logp.gather(1, ids[0, 1:, None]).squeeze(1)
            mask = torch.tensor(ex.stage[1:]) != 0
            total -= float(tok[mask].sum())
            n += int(mask.sum())
    return total / n
