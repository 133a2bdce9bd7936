"""A tiny test model: SmolLM2's architecture (Llama) at a few million parameters,
with SmolLM2's tokenizer and chat template, so tests train and serve in seconds.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

TINY_REPOSITORY = "akka-optimize/tiny-smollm2"


def build_tiny_model(tokenizer_dir: Path, dest: Path, *, seed: int = 0) -> Path:
    """Write a randomly initialised tiny Llama model plus the tokenizer at ``dest``.

    Shape: hidden 64, 2 layers, 4 heads (2 KV heads), intermediate 128, vocabulary
    of the tokenizer (49,152 for SmolLM2): about 6.4 M parameters, mostly the tied
    embedding. fp32 safetensors. The directory appears atomically.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        rope_theta=10000.0,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
