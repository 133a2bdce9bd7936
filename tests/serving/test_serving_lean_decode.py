"""The lean decoding steps compute what the model's forward computes, bit for bit
(issue 24 item 3), and decline where they would not."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from akka_optimize.engine.lean_decode import LeanDecoder
from akka_optimize.serving.engine import SamplingParams
from akka_optimize.serving.transformers_engine import TransformersEngine

SHAPE = {
    "vocab_size": 300,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}


def _model(arch: str, dtype: torch.dtype, **extra) -> torch.nn.Module:
    torch.manual_seed(0)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**SHAPE, **extra))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=16, **SHAPE, **extra))
    with torch.no_grad():  # logits far from uniform, so a rounding change shows in argmax
        for p in model.parameters():
            p.mul_(4.0)
    return model.to(dtype).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_lean_steps_equal_the_models_forward(arch: str, dtype: torch.dtype) -> None:
    """Three left-padded rows decoded 12 steps both ways from one prompt cache: the logits
    are equal bit for bit at every step, after a row leaves at step 4, and after the KV
    buffers grow (seeded with room for 2 positions)."""
    model = _model(arch, dtype)
    ids = torch.randint(0, SHAPE["vocab_size"], (3, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[1, :3] = 0
    mask[2, :5] = 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        cache = out.past_key_values
        lean = LeanDecoder.for_model(model)
        assert lean is not None
        assert lean.start(copy.deepcopy(cache), room=2)
        nxt, last = out.logits[:, -1].argmax(-1, keepdim=True), pos[:, -1:]
        for step in range(12):
            if step == 4:  # the second row's answer ends: it leaves both caches
                keep = torch.tensor([0, 2])
                cache.batch_select_indices(keep)
                lean.keep(keep)
                nxt, mask, last = nxt[keep], mask[keep], last[keep]
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
            last = last + 1
            theirs = model(
                input_ids=nxt, attention_mask=mask, position_ids=last, cache=cache, use_cache=True
            ).logits[:, -1]
            mine = lean.step(nxt, last, mask)
            assert mine.dtype == dtype
            assert torch.equal(mine, theirs), f"step {step}: {(mine - theirs).abs().max()}"
            nxt = theirs.argmax(-1, keepdim=True)
        assert lean.keys[0].shape[2] >= 7 + 12  # grew past the seeded room
        assert lean.length == 7 + 12


def test_a_large_max_tokens_reserves_one_block_up_front() -> None:
    """Room for 100,000 tokens asked: the buffers start at the prompt plus one block."""
    from akka_optimize.engine.lean_decode import GROW_BLOCK

    model = _model("llama", torch.float32)
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([[5, 6, 7]]), use_cache=True)
        lean = LeanDecoder.for_model(model)
        assert lean is not None and lean.start(out.past_key_values, room=100_000)
    assert lean.keys[0].shape[2] == 3 + GROW_BLOCK


def test_lean_steps_without_padding_equal_the_models_forward() -> None:
    """One unpadded row: no mask on either side (grouped heads through ``enable_gqa``)."""
    model = _model("llama", torch.float32)
    ids = torch.randint(0, SHAPE["vocab_size"], (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True)
        cache = out.past_key_values
        lean = LeanDecoder.for_model(model)
        assert lean is not None and lean.start(copy.deepcopy(cache), room=8)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(6):
            theirs = model(input_ids=nxt, cache=cache, use_cache=True).logits[:, -1]
            assert torch.equal(lean.step(nxt), theirs)
            nxt = theirs.argmax(-1, keepdim=True)


def test_lean_decoder_declines_what_it_would_compute_differently() -> None:
    """A sliding window, another architecture: None. Adapters (computed beside the base
    modules, merged, disabled, or of a kind the steps do not reproduce) are tested in
    tests/engine/test_engine_lean_rollout.py."""
    assert LeanDecoder.for_model(_model("qwen3", torch.float32, use_sliding_window=True)) is None
    torch.manual_seed(0)
    mistral = MistralForCausalLM(MistralConfig(**SHAPE)).eval()
    assert LeanDecoder.for_model(mistral) is None


def _ids(engine: TransformersEngine, text: str) -> list[int]:
    msgs = [{"role": "user", "content": text}]
    return engine.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)[
        "input_ids"
    ]


def _answers(engine: TransformersEngine) -> list[list[str]]:
    """Four prompts of different lengths, greedy with different lengths plus a seeded
    request of two samples, sent together (one batch: left padding, rows leaving)."""
    prompts = ["Hi", "What is two plus two?", "Name a colour.", "Count from one to ten."]
    jobs = [
        (_ids(engine, p), SamplingParams(max_tokens=k, temperature=0.0))
        for p, k in zip(prompts, [3, 17, 8, 12], strict=True)
    ]
    jobs.append((jobs[1][0], SamplingParams(max_tokens=12, temperature=0.9, seed=5, n=2)))
    out: list[list[str]] = [[] for _ in jobs]

    def go(i: int) -> None:
        ids, params = jobs[i]
        texts = [""] * params.n
        for ev in engine.stream(ids, None, params):
            texts[ev.index] += ev.delta
        out[i] = texts

    engine.lock.acquire()  # every request queues before the batch thread decodes
    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(jobs))]
    try:
        for t in threads:
            t.start()
        for _ in range(6000):  # answers queued (rows: the seeded request has two)
            if sum(r.params.n for r in engine._queue) + sum(engine.batch_sizes) == 6:
                break
            threading.Event().wait(0.01)
        else:
            raise AssertionError("the requests did not all queue within 60 s")
    finally:
        engine.lock.release()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a request did not finish"
    return out


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_engine_answers_equal_with_and_without_lean_steps(tiny_model_dir, precision) -> None:
    """The endpoint engine's answers (greedy and seeded, batched) are the same with the
    lean steps as through transformers' forward, and the lean steps did decode them."""
    lean = TransformersEngine(tiny_model_dir, precision=precision, batch_window_s=0.0)
    plain = TransformersEngine(
        tiny_model_dir, precision=precision, batch_window_s=0.0, lean_decode=False
    )
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    assert {p.dtype for p in lean.model.parameters()} == {want}
    mine, theirs = _answers(lean), _answers(plain)
    assert mine == theirs
    assert any(len(t) > 3 for a in mine for t in a)  # answers of several tokens
    assert lean.lean_batches >= 1 and plain.lean_batches == 0


def test_engine_refuses_an_unknown_precision(tiny_model_dir) -> None:
    with pytest.raises(ValueError, match="precision must be one of auto, bf16, fp32, not 'fp8'"):
        TransformersEngine(tiny_model_dir, precision="fp8")
