"""PEFT adapter checks against the base model (F118), on adapters made by ``peft`` itself
on the tiny test model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from akka_optimize.errors import InvalidRequest
from akka_optimize.registry.adapter_checks import check_adapter


def make_adapter(base_dir: Path, dest: Path, **lora: object) -> Path:
    """``peft.get_peft_model(...).save_pretrained(dest)`` with this LoraConfig."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    cfg = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], **lora}
    get_peft_model(model, LoraConfig(**cfg)).save_pretrained(dest)
    return dest


def _edit_config(folder: Path, **changes: object) -> Path:
    path = folder / "adapter_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))
    return folder


def _refusal(folder: Path, base: Path, max_rank: int = 64) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        check_adapter(folder, base, max_rank=max_rank)
    assert info.value.code == "adapter_refused"
    return info.value


def test_a_peft_adapter_passes_and_reports_its_rank(tiny_model_dir: Path, tmp_path: Path):
    got = check_adapter(make_adapter(tiny_model_dir, tmp_path / "ok"), tiny_model_dir, max_rank=64)
    assert got["rank"] == 8 and sorted(got["targetModules"]) == ["q_proj", "v_proj"]
    layers = json.loads((tiny_model_dir / "config.json").read_text())["num_hidden_layers"]
    assert got["adaptedModules"] == 2 * layers


def test_each_unservable_adapter_is_refused_with_what_and_where(
    tiny_model_dir: Path, tmp_path: Path
):
    base = tiny_model_dir
    cases = [
        (make_adapter(base, tmp_path / "dora", use_dora=True), "use_dora is true", "use_dora"),
        (
            make_adapter(base, tmp_path / "save", modules_to_save=["lm_head"]),
            "modules_to_save is ['lm_head']",
            "modules_to_save",
        ),
        (
            make_adapter(base, tmp_path / "head", target_modules=["q_proj", "lm_head"]),
            "target_modules includes 'lm_head'",
            "target_modules",
        ),
        (
            make_adapter(base, tmp_path / "emb", target_modules=["embed_tokens"]),
            "target_modules includes 'embed_tokens'",
            "target_modules",
        ),
    ]
    for folder, words, key in cases:
        err = _refusal(folder, base)
        assert words in err.message and err.field == f"adapter_config.json:{key}", err.message


def test_rank_above_the_serving_ceiling_is_refused(tiny_model_dir: Path, tmp_path: Path):
    err = _refusal(make_adapter(tiny_model_dir, tmp_path / "big", r=16), tiny_model_dir, 8)
    assert "rank 16 is above the serving engine's largest, 8" in err.message


def test_shapes_and_modules_are_checked_against_the_base_model(
    tiny_model_dir: Path, tmp_path: Path
):
    folder = _edit_config(make_adapter(tiny_model_dir, tmp_path / "shape"), r=4)
    err = _refusal(folder, tiny_model_dir)
    assert "lora_A" in err.message and "has shape [8," in err.message, err.message
    assert "must be [4," in err.message and err.field == "adapter_model.safetensors"
    folder = _edit_config(
        make_adapter(tiny_model_dir, tmp_path / "mod"), target_modules=["q_proj", "w_gate"]
    )
    err = _refusal(folder, tiny_model_dir)
    assert "names 'w_gate', which the base model does not have" in err.message
    (tmp_path / "empty").mkdir()
    err = _refusal(tmp_path / "empty", tiny_model_dir)
    assert "adapter_config.json is missing" in err.message
