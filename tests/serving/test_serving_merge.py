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


def test_the_check_reports_a_served_adapter_that_changes_nothing(tiny_model_dir, tmp_path):
    """An adapter whose B matrices are all zero (PEFT's initialisation: never trained)
    is served and checked end to end: the endpoint's answers equal the trainer's and the
    base model's, so the check finds ``adapter_changes_nothing``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))
    peft.save_pretrained(tmp_path / "zero")
    saved = load_file(tmp_path / "zero" / "adapter_model.safetensors")
    assert all(torch.count_nonzero(t) == 0 for n, t in saved.items() if "lora_B" in n)
    assert any(torch.count_nonzero(t) > 0 for n, t in saved.items() if "lora_A" in n)

    engine = TransformersEngine(tiny_model_dir, batch_window_s=0.0)
    engine.load_adapter("proj/zero:v1", tmp_path / "zero")
    served = _answers(engine, "proj/zero:v1")
    trainer = trainer_greedy(tiny_model_dir, tmp_path / "zero", served=served)
    assert served == trainer["adapter"] == trainer["base"] == _answers(engine, None)
    result = compare(served, trainer["adapter"], trainer["base"], trainer["shortfall"])
    assert [f.split(":")[0] for f in result["findings"]] == ["adapter_changes_nothing"]


def test_a_bf16_endpoint_passes_the_check_in_bf16_and_a_wrong_adapter_still_fails(
    tiny_model_dir, lora_dirs
):
    """``serving.precision: bf16``: the endpoint merges alpha into bf16 weights; the check
    takes the trainer's sampling over bf16 base weights and passes. Beta's answers served
    for alpha still fail it: the wider bf16 tie (0.25 nats) does not hide another adapter."""
    from akka_optimize.serving.check import TIE_NATS_BF16

    engine = TransformersEngine(tiny_model_dir, precision="bf16", batch_window_s=0.0)
    assert engine.model.get_input_embeddings().weight.dtype == torch.bfloat16
    engine.load_adapter("alpha", lora_dirs["alpha"])
    engine.load_adapter("beta", lora_dirs["beta"])
    served = _answers(engine, "alpha")
    assert engine.merged == "alpha" and engine.lean_batches > 0
    got = trainer_greedy(tiny_model_dir, lora_dirs["alpha"], served=served, precision="bf16")
    verdict = compare(served, got["adapter"], got["base"], got["shortfall"], precision="bf16")
    assert verdict["state"] == "passed", verdict
    wrong = _answers(engine, "beta")
    assert wrong != served
    got = trainer_greedy(tiny_model_dir, lora_dirs["alpha"], served=wrong, precision="bf16")
    verdict = compare(wrong, got["adapter"], got["base"], got["shortfall"], precision="bf16")
    assert verdict["state"] == "failed"
    assert max(g for g in got["shortfall"] if g is not None) > TIE_NATS_BF16
    trainer, base = ["a", "b", "c"], ["x", "y", "z"]
    tie = compare(["a", "B", "c"], trainer, base, [None, 0.2, None], precision="bf16")
    assert tie["state"] == "passed"
    assert compare(["a", "B", "c"], trainer, base, [None, 0.2, None])["state"] == "failed"


@pytest.mark.parametrize("fork", ["1", "0"], ids=["forked", "fresh-interpreter"])
def test_the_checks_trainer_side_runs_in_its_own_process(
    tiny_model_dir, lora_dirs, tmp_path, monkeypatch, fork
):
    """The service runs the trainer side through ``run_check``: forked from the fork
    server, or a fresh interpreter with ``AKKA_OPTIMIZE_FORK_WORKERS=0``; the same answers
    as in this process, and a failing check raises with the end of its stderr."""
    import json

    from akka_optimize.forkserver import Forker
    from akka_optimize.serving.process import run_check

    forker = Forker()
    monkeypatch.setenv("AKKA_OPTIMIZE_FORK_WORKERS", fork)
    spec = tmp_path / "check.json"
    spec.write_text(
        json.dumps({"baseDir": str(tiny_model_dir), "adapterDir": str(lora_dirs["alpha"])})
    )
    got = run_check(spec, forker)
    want = trainer_greedy(tiny_model_dir, lora_dirs["alpha"])
    assert (got["adapter"], got["base"]) == (want["adapter"], want["base"])
    spec.write_text(json.dumps({"baseDir": str(tmp_path / "no-model"), "adapterDir": None}))
    with pytest.raises(RuntimeError, match="no-model"):
        run_check(spec, forker)
    forker.stop()
