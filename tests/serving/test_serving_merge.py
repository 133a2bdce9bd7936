"""Merged serving and the post-deploy check's allowance for rounding ties."""

from __future__ import annotations

import pytest
import torch

from akka_optimize.serving.check import (
    CHECK_PROMPTS,
    TIE_NATS,
    compare,
    shortfall,
    trainer_greedy,
)
from akka_optimize.serving.engine import SamplingParams
from akka_optimize.serving.transformers_engine import TransformersEngine


def _answers(engine: TransformersEngine, adapter: str | None) -> list[str]:
    out = []
    for p in CHECK_PROMPTS:
        ids = engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True
        )["input_ids"]
        params = SamplingParams(max_tokens=16, temperature=0.0)
        out.append("".join(ev.delta for ev in engine.stream(ids, adapter, params)))
    return out


def _base_weights(engine: TransformersEngine) -> dict[str, torch.Tensor]:
    return {
        n: p.detach().clone()
        for n, p in engine.model.named_parameters()
        if "lora_" not in n and n.endswith(("weight", "bias"))
    }


@pytest.mark.parametrize("max_adapters", [8, 1], ids=["resident", "evicting"])
def test_merged_and_unmerged_engines_answer_alike_and_the_base_comes_back_exactly(
    tiny_model_dir, lora_dirs, max_adapters
):
    plain = TransformersEngine(tiny_model_dir, merge_adapters=False, max_adapters=max_adapters)
    merged = TransformersEngine(tiny_model_dir, merge_adapters=True, max_adapters=max_adapters)
    for e in (plain, merged):
        e.load_adapter("alpha", lora_dirs["alpha"])
        e.load_adapter("beta", lora_dirs["beta"])
    pristine = _base_weights(merged)
    order = ["alpha", None, "beta", "alpha", "beta", None]
    for adapter in order:
        assert _answers(merged, adapter) == _answers(plain, adapter), adapter
        if adapter is not None:
            assert merged.merged == adapter
            changed = [
                n for n, w in _base_weights(merged).items() if not torch.equal(w, pristine[n])
            ]
            assert changed  # the adapter really is folded into the weights
    assert merged.merged is None
    for name, w in _base_weights(merged).items():
        assert torch.equal(w, pristine[name]), name  # restored bit for bit


def test_unloading_the_merged_adapter_restores_the_base(tiny_model_dir, lora_dirs):
    engine = TransformersEngine(tiny_model_dir, merge_adapters=True)
    base_answers = _answers(engine, None)
    pristine = _base_weights(engine)
    engine.load_adapter("alpha", lora_dirs["alpha"])
    alpha = _answers(engine, "alpha")
    assert alpha != base_answers
    engine.unload_adapter("alpha")
    assert _answers(engine, None) == base_answers
    for name, w in _base_weights(engine).items():
        assert torch.equal(w, pristine[name.replace("base_model.model.", "")]), name


def test_shortfall_is_zero_for_the_trainers_answer_and_large_for_another(tiny_model_dir, lora_dirs):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir), str(lora_dirs["alpha"])
    ).eval()
    mine = trainer_greedy(tiny_model_dir, lora_dirs["alpha"])
    beta = trainer_greedy(tiny_model_dir, lora_dirs["beta"])["adapter"]
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": CHECK_PROMPTS[0]}], add_generation_prompt=True, tokenize=True
    )["input_ids"]
    assert shortfall(model, tok, list(prompt), mine["adapter"][0]) < 1e-4
    assert beta[0] != mine["adapter"][0]
    assert shortfall(model, tok, list(prompt), beta[0]) > TIE_NATS
    # Through the check's own entry point: beta's answers served for alpha fail it.
    got = trainer_greedy(tiny_model_dir, lora_dirs["alpha"], served=beta)
    verdict = compare(beta, got["adapter"], got["base"], got["shortfall"])
    assert verdict["state"] == "failed"
    assert verdict["findings"][0].startswith("served_differs_from_trainer")


def test_compare_allows_a_rounding_tie_and_nothing_more():
    trainer, base = ["a", "b", "c"], ["x", "y", "z"]
    assert compare(trainer, trainer, base)["state"] == "passed"
    served = ["a", "B", "c"]
    assert compare(served, trainer, base)["state"] == "failed"  # not measured
    assert compare(served, trainer, base, [None, 1e-6, None])["state"] == "passed"
    failed = compare(served, trainer, base, [None, 0.7, None])
    assert failed["state"] == "failed" and "0.7 nats" in failed["findings"][0]
    same = compare(base, base, base)
    assert [f.split(":")[0] for f in same["findings"]] == ["adapter_changes_nothing"]
