"""Tiny random-weight models of every catalog family, built from configs (no hub).

Each :class:`Family` names a catalog entry, the config of its architecture at tiny
dimensions (hidden 32, 2 layers, vocabulary 256) and the features the real model's
config has that change what the model scores: sliding-window layers, final-logit
soft-capping (top level for Gemma 3 text, ``text_config`` for Gemma 3 multimodal and
Gemma 4), scaled embeddings (Gemma), attention soft-caps, per-layer inputs (Gemma 4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VOCAB = 256
_DIMS = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=256,
)
_SLIDING = dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"])
_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)


def _llama() -> Any:
    from transformers import LlamaConfig

    dims = {k: v for k, v in _DIMS.items() if k != "head_dim"}
    return LlamaConfig(**dims, tie_word_embeddings=True)


def _qwen3() -> Any:
    from transformers import Qwen3Config

    return Qwen3Config(**_DIMS)


def _gemma3_text() -> Any:
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(**_DIMS, **_SLIDING, final_logit_softcapping=0.1)


def _gemma3_text_attn_softcap() -> Any:
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        **_DIMS, **_SLIDING, final_logit_softcapping=0.1, attn_logit_softcapping=50.0
    )


def _gemma3() -> Any:
    from transformers import Gemma3Config

    return Gemma3Config(
        text_config=dict(**_DIMS, **_SLIDING, final_logit_softcapping=0.1),
        vision_config=dict(**_VISION, image_size=28, patch_size=14),
        mm_tokens_per_image=4,
        image_token_index=VOCAB - 1,
        boi_token_index=VOCAB - 2,
        eoi_token_index=VOCAB - 3,
    )


def _gemma4() -> Any:
    from transformers import Gemma4Config

    return Gemma4Config(
        text_config=dict(
            **_DIMS,
            **_SLIDING,
            final_logit_softcapping=0.1,
            vocab_size_per_layer_input=VOCAB,
            hidden_size_per_layer_input=8,
        ),
        vision_config=dict(**_VISION, num_key_value_heads=2, head_dim=8),
        audio_config=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2),
        image_token_id=VOCAB - 1,
        boi_token_id=VOCAB - 2,
        eoi_token_id=VOCAB - 3,
        audio_token_id=VOCAB - 4,
        boa_token_id=VOCAB - 5,
        eoa_token_index=VOCAB - 6,
        video_token_id=VOCAB - 7,
    )


def _ministral() -> Any:
    from transformers import MinistralConfig

    return MinistralConfig(**_DIMS, **_SLIDING)


def _mistral3() -> Any:
    from transformers import Mistral3Config

    return Mistral3Config(
        text_config=dict(model_type="ministral3", **_DIMS),
        vision_config=dict(**_VISION, head_dim=8, image_size=56, patch_size=14),
        image_token_index=VOCAB - 1,
    )


@dataclass(frozen=True)
class Family:
    """One catalog entry and the tiny config of its architecture."""

    name: str
    repository: str
    """The catalog entry whose ``loraTargetModules`` and ``autoClass`` select the model."""
    config: Callable[[], Any]
    multimodal: bool = False


FAMILIES = [
    Family("llama", "HuggingFaceTB/SmolLM2-135M-Instruct", _llama),
    Family("qwen3", "Qwen/Qwen3-0.6B", _qwen3),
    Family("gemma3-text", "google/gemma-3-1b-it", _gemma3_text),
    Family("gemma3-text-attn-softcap", "google/gemma-3-1b-it", _gemma3_text_attn_softcap),
    Family("gemma3", "google/gemma-3-4b-it", _gemma3, multimodal=True),
    Family("gemma4", "google/gemma-4-E2B-it", _gemma4, multimodal=True),
    Family("ministral", "mistralai/Ministral-8B-Instruct-2410", _ministral),
    Family("ministral3", "mistralai/Ministral-3-8B-Instruct-2512", _mistral3, multimodal=True),
]


def build(family: Family, dest: Path, seed: int = 0) -> Path:
    """Write ``family``'s tiny model (random weights, fp32 safetensors) to ``dest``,
    loaded by the catalog entry's ``autoClass``."""
    import torch
    import transformers

    from akka_optimize.catalog import load_catalog

    entry = load_catalog(None).get(family.repository)
    torch.manual_seed(seed)
    model = getattr(transformers, entry.auto_class).from_config(family.config())
    model.save_pretrained(dest)
    return dest
