"""Packed-pass attention: per-conversation sdpa equals transformers' masked attention."""

from __future__ import annotations

import pytest
import torch
from engine_testkit import adapter_grads, fp32_config, random_rows

from akka_optimize.data.types import pack_examples
from akka_optimize.engine import attention
from akka_optimize.engine.session.training import TrainingSession

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


def _reference(q, k, v, segments, scale):
    """Per-conversation causal sdpa over [1, H, T, D] tensors → [1, T, Hq, D]."""
    outs = [
        torch.nn.functional.scaled_dot_product_attention(
            q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], is_causal=True, scale=scale, enable_gqa=True
        )
        for a, b in zip(segments[:-1], segments[1:], strict=True)
    ]
    return torch.cat(outs, dim=2).transpose(1, 2)


def _documented(q, k, v, cu_q, scale=None, enable_gqa=False):
    """What ``varlen_attn`` documents, on [T, H, D] tensors: causal attention within each
    ``cu_q`` segment."""
    segs = cu_q.tolist()
    out = [
        torch.nn.functional.scaled_dot_product_attention(
            q[a:b].transpose(0, 1),
            k[a:b].transpose(0, 1),
            v[a:b].transpose(0, 1),
            is_causal=True,
            scale=scale,
            enable_gqa=enable_gqa,
        ).transpose(0, 1)
        for a, b in zip(segs[:-1], segs[1:], strict=True)
    ]
    return torch.cat(out)


def _kernel_2_10(calls):
    """varlen_attn as torch 2.10 spells it: ``is_causal``, no ``scale``, no GQA."""

    def varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=False, return_aux=None):
        assert is_causal and q.shape[1] == k.shape[1]
        calls.append((cu_q.dtype, cu_q.tolist(), max_q, max_k))
        return _documented(q, k, v, cu_q)

    return varlen_attn


def _kernel_2_13(calls):
    """varlen_attn as torch 2.13 spells it: ``window_size``, ``scale``, ``enable_gqa``."""

    def varlen_attn(
        q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None,
        window_size=(-1, -1), enable_gqa=False,
    ):  # fmt: skip
        assert window_size == (-1, 0) and (enable_gqa or q.shape[1] == k.shape[1])
        calls.append((cu_q.dtype, cu_q.tolist(), max_q, max_k))
        return _documented(q, k, v, cu_q, scale, enable_gqa)

    return varlen_attn


@pytest.mark.parametrize("spelling", [_kernel_2_10, _kernel_2_13], ids=["torch2.10", "torch2.13"])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_one_varlen_call_per_pass_equals_per_conversation_attention(monkeypatch, spelling, scale):
    """The CUDA branch's arguments (layout, cu_seqlens, GQA, scale, causality), checked on
    CPU against a kernel that computes what ``varlen_attn`` documents; the real kernel is
    checked on a GPU (tests/engine/test_engine_cuda.py)."""
    calls: list = []
    monkeypatch.setattr(attention, "varlen_kernel", lambda: spelling(calls))
    gen = torch.Generator().manual_seed(0)
    segments = [0, 5, 6, 19, 30]
    q = torch.randn(1, 4, 30, 8, generator=gen)
    k = torch.randn(1, 2, 30, 8, generator=gen)
    v = torch.randn(1, 2, 30, 8, generator=gen)
    out = attention._varlen(torch.nn.Module(), q, k, v, segments, scale)
    assert calls == [(torch.int32, segments, 13, 13)]
    assert out.shape == (1, 30, 4, 8)
    torch.testing.assert_close(out, _reference(q, k, v, segments, scale), atol=1e-5, rtol=0)


def test_the_engine_sends_a_packed_pass_to_one_varlen_call(tiny_model_dir, monkeypatch):
    """With the varlen branch taken (forced here on CPU with a reference kernel), a pass's
    log-probs and adapter gradients equal masked attention within 1e-4 in fp32, and each
    layer makes one kernel call for the whole pass."""
    calls: list = []
    monkeypatch.setattr(attention, "varlen_kernel", lambda: _kernel_2_13(calls))
    monkeypatch.setattr(attention, "_use_varlen", lambda query, dropout: True)
    _, lp_ref, g_ref = _logprobs_and_grads(tiny_model_dir, "eager")
    _, lp, g = _logprobs_and_grads(tiny_model_dir, "sdpa")
    segments = list(pack_examples(ROWS).cu_seqlens)
    # Two layers; forward() once, forward_backward() once.
    assert [c[1] for c in calls] == [segments] * 4
    torch.testing.assert_close(lp, lp_ref, atol=1e-4, rtol=0)
    for name in g:
        torch.testing.assert_close(g[name], g_ref[name], atol=1e-5, rtol=1e-4, msg=name)


def test_the_varlen_kernel_is_for_half_precision_on_cuda():
    cpu = torch.zeros(1, 2, 3, 4, dtype=torch.bfloat16)
    assert not attention._use_varlen(cpu, 0.0)
