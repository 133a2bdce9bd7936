"""Packed-pass attention: per-conversation sdpa equals transformers' masked attention."""

from __future__ import annotations

import pytest
import torch
from engine_testkit import adapter_grads, fp32_config, random_rows

from akka_optimize.data.types import pack_examples
from akka_optimize.engine import attention
from akka_optimize.engine.session import TrainingSession

ROWS = random_rows(5, seed=3)


def _logprobs_and_grads(model_dir, attn: str, rows=ROWS):
    session = TrainingSession(model_dir, fp32_config(attn_implementation=attn, seed=7))
    packed = pack_examples(rows)
    lp = session.forward([packed]).logprobs[0]
    session.forward_backward([packed])
    return session, lp, adapter_grads(session)


def test_the_engine_attends_per_conversation_by_default(tiny_model_dir):
    session = TrainingSession(tiny_model_dir, fp32_config())
    assert session._causal_lm.config._attn_implementation == attention.PACKED_ATTENTION
    eager = TrainingSession(tiny_model_dir, fp32_config(attn_implementation="eager"))
    assert eager._causal_lm.config._attn_implementation == "eager"


@pytest.mark.parametrize("loop_segments", [8, 1], ids=["one-call-per-conversation", "padded"])
def test_packed_attention_equals_masked_attention(tiny_model_dir, monkeypatch, loop_segments):
    monkeypatch.setattr(attention, "LOOP_SEGMENTS", loop_segments)
    _, lp_ref, g_ref = _logprobs_and_grads(tiny_model_dir, "eager")
    _, lp, g = _logprobs_and_grads(tiny_model_dir, "sdpa")
    assert lp.abs().sum() > 0
    torch.testing.assert_close(lp, lp_ref, atol=2e-5, rtol=0)
    assert g.keys() == g_ref.keys() and g
    for name in g:
        torch.testing.assert_close(g[name], g_ref[name], atol=1e-5, rtol=1e-4, msg=name)


def test_a_conversation_scores_the_same_alone_and_packed(tiny_model_dir):
    session = TrainingSession(tiny_model_dir, fp32_config())
    packed = session.forward([pack_examples(ROWS)]).logprobs[0]
    start = 0
    for r in ROWS:
        alone = session.forward([pack_examples([r])]).logprobs[0]
        torch.testing.assert_close(
            packed[start : start + len(r.input_ids)], alone, atol=1e-5, rtol=0
        )
        start += len(r.input_ids)


def test_generation_with_a_cache_still_uses_plain_sdpa(tiny_model_dir):
    """Sampling (KV cache, no segments) goes through the sdpa fallback unchanged."""
    ours = TrainingSession(tiny_model_dir, fp32_config())
    ref = TrainingSession(tiny_model_dir, fp32_config(attn_implementation="eager"))
    prompt = ROWS[0].input_ids[:6]
    a = ours.sample([prompt], max_new_tokens=8, temperature=0.0)
    b = ref.sample([prompt], max_new_tokens=8, temperature=0.0)
    assert a == b
