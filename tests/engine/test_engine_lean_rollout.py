"""Lean decoding steps with an adapter beside the base weights (issue 24 item 3): a
reinforcement rollout decodes the tokens after the prompt with
:class:`~akka_optimize.engine.lean_decode.LeanDecoder`, whose logits are those of the
PEFT model's forward bit for bit, in fp32 and under the engine's bf16 mixed precision,
so the rollout samples exactly what it sampled through transformers. Adapters the steps
do not reproduce are declined."""

from __future__ import annotations

import pytest
import torch
from engine_testkit import TINY_LLAMA, fp32_config
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from akka_optimize.engine.lean_decode import LeanDecoder
from akka_optimize.engine.rollout import sample_group
from akka_optimize.engine.sampling import kv_cache
from akka_optimize.engine.session.training import TrainingSession

PROMPT = [5, 17, 42, 99, 7, 3, 250, 11]
SHAPE = dict(vocab_size=300, tie_word_embeddings=True, **TINY_LLAMA)
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _moved(params, seed: int = 0) -> None:
    """Move every adapter matrix off its initial value (B starts at zero, which would hide
    an adapter the steps left out)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn(p.shape, generator=g).to(p.dtype) * 0.3)


def _equal_steps(model, lean: LeanDecoder, rows: int = 3, steps: int = 8) -> None:
    """The prompt read by ``model`` for ``rows`` rows, then ``steps`` tokens decoded both
    ways from one cache: every step's logits equal bit for bit."""
    ids = torch.tensor([PROMPT] * rows)
    out = model(input_ids=ids, use_cache=True)
    ((key, cache),) = kv_cache(out).items()
    assert lean.start(cache, room=steps)
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    for step in range(steps):
        theirs = model(input_ids=nxt, use_cache=True, **{key: cache}).logits[:, -1]
        mine = lean.step(nxt)
        assert mine.dtype == theirs.dtype
        assert torch.equal(mine, theirs), f"step {step}: {(mine - theirs).abs().max()}"
        nxt = (theirs.float() + torch.arange(rows)[:, None]).argmax(-1, keepdim=True)


@pytest.mark.parametrize(
    "precision",
    [("fp32", "fp32"), ("bf16", "fp32"), ("bf16", "bf16"), ("fp32", "bf16")],
    ids=["fp32", "bf16-base-fp32-adapter", "bf16", "fp32-base-bf16-adapter"],
)
def test_lean_steps_with_a_sessions_adapter_equal_its_forward(tiny_model_dir, precision) -> None:
    """A training session's adapter (every projection), moved off zero, decoded inside the
    session's compute context (autocast, PEFT's input casts off where the adapter's dtype
    differs from the base's): the lean steps give the model's logits bit for bit."""
    compute, weights = precision
    session = TrainingSession(
        tiny_model_dir, fp32_config(precision=compute, weight_precision=weights)
    )
    _moved(session.params.values())
    model = session.model.eval()
    with torch.no_grad(), session.compute_context():
        lean = LeanDecoder.for_model(model)
        assert lean is not None
        assert all(lin.lora for layer in lean.layers for lin in (layer.q, layer.down))
        _equal_steps(model, lean)


def _peft(**lora) -> torch.nn.Module:
    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(**SHAPE)).eval()
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, **lora))
    _moved(p for n, p in model.named_parameters() if "lora_" in n)
    return model.eval()


def test_two_active_adapters_and_an_adapted_head_equal_peft() -> None:
    """Two adapters active at once (PEFT adds both, in order) on different modules, one of
    them on the output head."""
    model = _peft(target_modules=["q_proj", "v_proj", "lm_head"])
    model.add_adapter("second", LoraConfig(r=2, lora_alpha=2, target_modules=ALL))
    _moved((p for n, p in model.named_parameters() if "second" in n), seed=1)
    model.base_model.set_adapter(["default", "second"])
    with torch.no_grad():
        lean = LeanDecoder.for_model(model)
        assert lean is not None and len(lean.layers[0].q.lora) == 2 and lean.head.lora
        _equal_steps(model, lean)


def test_adapters_the_steps_do_not_reproduce_are_declined_and_the_rest_decoded() -> None:
    assert LeanDecoder.for_model(_peft(target_modules=ALL, use_dora=True)) is None
    assert LeanDecoder.for_model(_peft(target_modules=["q_proj", "embed_tokens"])) is None
    saved = _peft(target_modules=["q_proj"], modules_to_save=["lm_head"])
    assert LeanDecoder.for_model(saved) is None
    dropping = _peft(target_modules=["q_proj"], lora_dropout=0.1)
    assert LeanDecoder.for_model(dropping.train()) is None  # dropout would draw masks
    assert LeanDecoder.for_model(dropping.eval()) is not None
    model = _peft(target_modules=ALL)
    with torch.no_grad():
        with model.disable_adapter():  # the base model: the base weights, decoded lean
            lean = LeanDecoder.for_model(model)
            assert lean is not None and not lean.layers[0].q.lora
            _equal_steps(model, lean)
        model.merge_adapter()  # merged: the merged weights
        lean = LeanDecoder.for_model(model)
        assert lean is not None and not lean.layers[0].q.lora
        _equal_steps(model, lean)
        with model.disable_adapter():  # PEFT would unmerge it inside the forward
            assert LeanDecoder.for_model(model) is None


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_rollout_samples_the_same_with_and_without_the_lean_steps(
    tiny_model_dir, precision, monkeypatch
) -> None:
    """A group of 4 completions of 12 tokens from one generator seed, both ways: the same
    tokens and the same log-probs, exactly; the lean steps decoded every token after the
    first."""
    session = TrainingSession(
        tiny_model_dir, fp32_config(precision=precision, weight_precision="fp32")
    )
    _moved(session.params.values())
    steps: list[int] = []
    step = LeanDecoder.step
    monkeypatch.setattr(
        LeanDecoder,
        "step",
        lambda self, ids, *a: (steps.append(ids.shape[0]), step(self, ids, *a))[1],
    )

    def sample(lean: bool):
        gen = torch.Generator().manual_seed(7)
        return sample_group(session, PROMPT, 4, 12, 1.0, set(), gen, lean=lean)

    slow = sample(False)
    assert steps == []
    fast = sample(True)
    assert steps == [4] * 11
    assert fast == slow
    assert len({tuple(toks) for toks, _ in fast}) > 1  # sampled, not one greedy answer
