"""Merge a LoRA adapter into its base model and save a transformers folder.

``registry models export REF --merged -o DIR`` (issue 16 "Adapters out"): the merge
arithmetic runs in fp32 (``W + scale · B @ A`` through ``peft``'s ``merge_and_unload``)
and the merged weights are saved in the base model's own dtype (``config.json``'s
``dtype``/``torch_dtype``; fp32 when it names none), with the base model's tokenizer and
chat template, so ``AutoModelForCausalLM.from_pretrained(DIR)`` loads it unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path


def base_dtype(base_dir: Path) -> str:
    """The dtype name the base model's ``config.json`` records (``float32`` when none)."""
    cfg = json.loads((Path(base_dir) / "config.json").read_text())
    return str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32")


def merge_adapter(base_dir: Path, adapter_dir: Path, out_dir: Path) -> Path:
    """Write ``base + adapter`` merged to ``out_dir`` (safetensors, config, tokenizer).

    Args:
        base_dir: the base model's weights folder (``config.json``, ``*.safetensors``,
            tokenizer files).
        adapter_dir: a PEFT LoRA adapter folder trained on that base model.
        out_dir: the folder to write; created.

    Returns:
        ``out_dir``.
    """
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, base_dtype(base_dir).replace("torch.", ""), torch.float32)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    merged = merged.to(dtype)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out_dir)
    return out_dir
