"""The computation identity of a recipe (seeds/003 "Limits and recovery").

"The computation identity binds model and data references, serialization, packing,
numerical settings, optimizer, schedule, and training seed" — and, for QAT, the
quantization and objective settings. :func:`computation_settings` gathers exactly those
(content hashes, not paths, for the model and data, so a moved file keeps its identity)
and :func:`identity_of` hashes their canonical JSON (sorted keys, compact) with SHA-256.

Not bound: ``limits`` (``max_steps`` is a cap and the checkpoint cadence changes no
number), the output folder and the attempt identity. Two-stage training binds
``training.updates``, which its plan depends on.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from akka_optimize.data.prepared.descriptor import template_fingerprint, tokenizer_fingerprint

from .recipe import QatTraining, Recipe, TwoStageTraining
from .registry import Strategy
from .ternary import describe, resolve_rule

MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_reference(model_dir: Path) -> dict[str, str]:
    """``{file name: sha256}`` of the model's config, weights and tokenizer files."""
    names = sorted(
        {p.name for p in model_dir.glob("*.safetensors")}
        | {n for n in MODEL_FILES if (model_dir / n).exists()}
    )
    return {n: file_sha256(model_dir / n) for n in names}


def canonical(value: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, compact separators, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def computation_settings(
    strategy: Strategy, recipe: Recipe, model_dir: Path, data_path: Path, tokenizer: Any
) -> dict[str, Any]:
    """Every setting the identity binds, as JSON (see the module docstring)."""
    t = recipe.training
    numerics: dict[str, Any] = {
        "compute_dtype": t.compute_dtype,
        "master_dtype": t.master_dtype,
        "quantization_profile": t.quantization_profile,
    }
    if isinstance(t, QatTraining):
        numerics["quantization"] = describe(resolve_rule(t.qat.scale_rule))
        numerics["objective"] = t.qat.model_dump(exclude={"scale_rule"})
    out: dict[str, Any] = {
        "strategy": strategy.name,
        "schema_version": recipe.schema_version,
        "implementation": recipe.model.implementation,
        "model": model_reference(model_dir),
        "data": {"sha256": file_sha256(data_path)},
        "serialization": {
            "name": recipe.data.serialization,
            "tokenizer": tokenizer_fingerprint(tokenizer),
            "chat_template": template_fingerprint(tokenizer),
        },
        "packing": {
            "sequence_length": t.sequence_length,
            "rows_per_microbatch": t.rows_per_microbatch,
            "gradient_accumulation_steps": t.gradient_accumulation_steps,
            "projection_chunk_size": t.projection_chunk_size,
            "max_projection_chunks": t.max_projection_chunks,
        },
        "numerics": numerics,
        "optimizer": t.optimizer.model_dump(),
        "schedule": t.schedule,
        "seed": t.seed,
    }
    if isinstance(t, TwoStageTraining):
        out["updates"] = t.updates
    return out


def identity_of(settings: dict[str, Any]) -> str:
    """The computation identity: SHA-256 hex of the settings' canonical JSON."""
    return hashlib.sha256(canonical(settings)).hexdigest()


def changed_settings(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths whose values differ between two settings objects."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            out += changed_settings(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [prefix.rstrip(".") or "(all)"]
