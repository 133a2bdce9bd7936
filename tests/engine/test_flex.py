"""Flex attention over a packed pass (engine/flex.py; seeds/001 "Flex attention for Gemma
4"; issue 24 item 4: the kernel's CPU path equals the per-conversation path within 1e-4
fp32). The two-rank Gemma 4 run with flex is in test_engine_ranks.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from families import FAMILIES, build

from akka_optimize.engine import flex
from akka_optimize.engine.attention import flash_attention_refusal, head_dims
from akka_optimize.engine.errors import EngineError

SEGMENTS = [0, 7, 18, 23, 40]  # four conversations (the last could be padding)
MODULE = SimpleNamespace(is_causal=True, training=True, num_key_value_groups=2)


def _qkv(dim: int = 8, grad: bool = False, t: int = SEGMENTS[-1]) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, t, dim, generator=g) for h in (4, 2, 2))  # grouped heads
    return tuple(x.requires_grad_(grad) for x in (q, k, v))


def _alone(q, k, v, window=None, softcap=None, scale=0.3) -> torch.Tensor:
    """Each conversation attending to itself alone, written out: [1, T, Hq, D]."""
    outs = []
    for a, b in zip(SEGMENTS[:-1], SEGMENTS[1:], strict=True):
        qi = q[:, :, a:b]
        ki, vi = (x[:, :, a:b].repeat_interleave(2, dim=1) for x in (k, v))
        s = qi @ ki.transpose(-1, -2) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(b - a)
        keep = (i[None, :] <= i[:, None]) & ((i[:, None] - i[None, :] < window) if window else True)
        outs.append(torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ vi)
    return torch.cat(outs, dim=2).transpose(1, 2)


def _flex(q, k, v, **kw) -> torch.Tensor:
    out, none = flex.flex_attention_forward(
        MODULE, q, k, v, None, scaling=0.3, akka_segments=SEGMENTS, **kw
    )
    assert none is None
    return out


CASES = [dict(), dict(sliding_window=4), dict(softcap=2.0), dict(sliding_window=3, softcap=2.0)]
IDS = ["causal", "sliding", "softcap", "sliding-softcap"]


@pytest.mark.parametrize("kw", CASES, ids=IDS)
def test_the_flex_kernel_equals_each_conversation_alone(kw):
    """No gradients: torch's own flex_attention kernel (eager on CPU) with the pass's
    document mask."""
    q, k, v = _qkv()
    with torch.no_grad():
        out = _flex(q, k, v, **kw)
    assert out.shape == (1, SEGMENTS[-1], 4, 8)
    ref = _alone(q, k, v, window=kw.get("sliding_window"), softcap=kw.get("softcap"))
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("kw", CASES, ids=IDS)
def test_a_training_pass_on_cpu_attends_and_differentiates_the_same(kw):
    """With gradients (torch has no CPU backward for flex_attention) the same mask,
    evaluated densely: outputs and gradients equal each conversation alone."""
    q, k, v = _qkv(grad=True)
    out = _flex(q, k, v, **kw)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
    q2, k2, v2 = _qkv(grad=True)
    ref = _alone(q2, k2, v2, window=kw.get("sliding_window"), softcap=kw.get("softcap"))
    ref_grads = torch.autograd.grad((ref * weights).sum(), (q2, k2, v2))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_a_pass_without_segments_is_plain_sdpa():
    q, k, v = _qkv()
    out, _ = flex.flex_attention_forward(MODULE, q, k, v, None, scaling=0.3)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, scale=0.3, enable_gqa=True
    )
    torch.testing.assert_close(out, ref.transpose(1, 2), atol=1e-6, rtol=0)


def test_a_session_asked_for_flex_attention_attends_through_it(tmp_path):
    """A tiny Gemma 4 (sliding layers of head dimension 8, full layers of 512) loads with
    ``akka_flex``; packed log-probs equal the sdpa session's within 1e-4."""
    from engine_testkit import fp32_config, random_rows
    from families import VOCAB

    from akka_optimize.catalog import load_catalog
    from akka_optimize.data.packing import pack
    from akka_optimize.engine.session.training import TrainingSession

    gemma4 = next(f for f in FAMILIES if f.name == "gemma4")
    model = build(gemma4, tmp_path / "gemma4")
    entry = load_catalog(None).get(gemma4.repository)
    rows = random_rows(6, seed=1, vocab=VOCAB)
    logprobs = {}
    for attn in ("sdpa", "flex_attention"):
        cfg = fp32_config(
            target_modules=entry.target_modules(),
            auto_class=entry.auto_class,
            attn_implementation=attn,
        )
        session = TrainingSession(model, cfg)
        if attn == "flex_attention":
            implementation = session._causal_lm.config.get_text_config()._attn_implementation
            assert implementation == flex.FLEX_ATTENTION
            assert head_dims(session._causal_lm) == [8, 512]
        passes = pack(rows, 64)
        assert any(len(p.rows) > 1 for p in passes)
        logprobs[attn] = torch.cat(session.forward(passes).logprobs)
    torch.testing.assert_close(logprobs["flex_attention"], logprobs["sdpa"], atol=1e-4, rtol=0)


def test_a_gpu_the_kernel_cannot_run_on_fails_naming_the_device(monkeypatch):
    """seeds/001: "On a GPU without it, the run fails at startup and the error names the
    device". The probe's failure becomes the sentence: here the kernel raises Triton's
    shared-memory error (on a CPU build the probe's CUDA tensor fails first, alike)."""
    props = SimpleNamespace(name="NVIDIA T4", shared_memory_per_block_optin=64 * 1024)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)

    def out_of_shared_memory(device):
        raise RuntimeError(
            "out of resource: shared memory, Required: 264192, Hardware limit: 65536"
        )

    monkeypatch.setattr(flex, "_kernel", out_of_shared_memory)
    with pytest.raises(EngineError) as err:
        flex.check_device(torch.device("cuda", 0), [256, 512], torch.bfloat16)
    assert err.value.field == "config.model.attentionImplementation"
    message = err.value.message
    assert message.startswith(
        "config.model.attentionImplementation flex_attention cannot run on NVIDIA T4 "
        "(cuda:0, 64 KiB of shared memory per block) at head dimension 256: "
    )
    assert message.endswith("Use sdpa, or a GPU with more shared memory per block.")
    flex.check_device(torch.device("cpu"), [512], torch.float32)  # nothing to probe on CPU


def test_the_triton_sentence_is_kept():
    exc = RuntimeError("out of resource: shared memory, Required: 264192, Hardware limit: 101376")
    props = SimpleNamespace(name="NVIDIA A10", shared_memory_per_block_optin=101376)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "get_device_properties", lambda device: props)
        sentence = flex.flex_device_refusal(torch.device("cuda", 1), 512, exc)
    assert "NVIDIA A10 (cuda:1, 99 KiB of shared memory per block) at head dimension 512" in (
        sentence
    )
    assert "Required: 264192, Hardware limit: 101376" in sentence


def test_flash_attention_2_is_refused_above_its_head_dimension(tmp_path):
    """DATA-AND-TRAINING-RULES.md §2 rule 16: flash-attention 2 takes head dimensions up to
    256; Gemma 4's global layers have 512. Refused before any weight loads, naming the
    field, the dimension and what to use; on CPU, refused for the device."""
    from engine_testkit import fp32_config

    from akka_optimize.catalog import load_catalog
    from akka_optimize.engine.session.training import TrainingSession

    gemma4 = next(f for f in FAMILIES if f.name == "gemma4")
    model = build(gemma4, tmp_path / "gemma4")
    entry = load_catalog(None).get(gemma4.repository)
    cfg = fp32_config(
        target_modules=entry.target_modules(),
        auto_class=entry.auto_class,
        attn_implementation="flash_attention_2",
    )
    with pytest.raises(EngineError) as err:
        TrainingSession(model, cfg)
    assert err.value.field == "config.model.attentionImplementation"
    assert err.value.message == (
        "config.model.attentionImplementation flash_attention_2 takes head dimensions up to "
        "256 (the flash-attn kernels' limit); this model has attention layers of head "
        "dimension 512. Use sdpa (or flex_attention for Gemma 4 on several devices)."
    )
    from akka_optimize.engine.targets import meta_model

    llama = meta_model(build(FAMILIES[0], tmp_path / "llama"))  # head dimension 8
    assert flash_attention_refusal(llama, torch.device("cpu")) == (
        "config.model.attentionImplementation flash_attention_2 runs on CUDA only; this run "
        "trains on cpu. Use sdpa."
    )


@pytest.fixture
def compiled_on_cpu(monkeypatch):
    """The flex kernel compiled on CPU with Torch's eager backend (the compiler's guards
    and recompile counts as on CUDA, without building kernels), limits restored after."""
    import torch._dynamo

    names = ("recompile_limit", "accumulated_recompile_limit", "fail_on_recompile_limit_hit")
    saved = {name: getattr(torch._dynamo.config, name) for name in names}
    monkeypatch.setattr(flex, "COMPILED_ON", ("cuda", "cpu"))
    monkeypatch.setattr(flex, "COMPILE_BACKEND", "eager")
    monkeypatch.setattr(flex, "limits", flex.limits)
    flex._forget_compiled()
    yield
    flex._forget_compiled()
    for name, value in saved.items():  # the config's own setattr (monkeypatch would delete)
        setattr(torch._dynamo.config, name, value)


def _passes_of_three_shapes(segments_of=(SEGMENTS, [0, 30, 64], [0, 100, 128])):
    q, k, v = _qkv(t=max(segments[-1] for segments in segments_of))
    outs = []
    with torch.no_grad():
        for segments in segments_of:
            t = segments[-1]
            out, _ = flex.flex_attention_forward(
                MODULE, q[:, :, :t], k[:, :, :t], v[:, :, :t], None, akka_segments=segments
            )
            outs.append(out)
    return outs


def test_a_compile_limit_reached_fails_the_run_when_told_to(compiled_on_cpu):
    """compile.recompile_limit 1 with compile.fail_on_recompile_limit: the second pass
    shape would compile the kernel again, and the run fails naming the setting."""
    import torch._dynamo

    flex.use_limits(flex.CompileLimits(1, 256, fail=True))
    assert torch._dynamo.config.recompile_limit == 1
    assert torch._dynamo.config.fail_on_recompile_limit_hit is True
    with pytest.raises(EngineError) as err:
        _passes_of_three_shapes()
    assert err.value.field == "config.engineSettings.compile.recompile_limit"
    assert err.value.message.startswith(
        "config.engineSettings.compile.recompile_limit 1 reached: the flex attention kernel "
        "(or its block mask) would compile again for a new pass shape"
    )
    flex.use_limits(flex.CompileLimits(8, 1, fail=True))
    with pytest.raises(EngineError) as err:
        _passes_of_three_shapes()
    assert err.value.field == "config.engineSettings.compile.accumulated_recompile_limit"


def test_past_a_limit_the_kernel_runs_uncompiled_with_the_same_result(compiled_on_cpu):
    flex.use_limits(flex.CompileLimits(1, 256, fail=False))
    compiled = _passes_of_three_shapes()
    flex.COMPILED_ON = ("cuda",)  # plain eager flex
    for got, want in zip(compiled, _passes_of_three_shapes(), strict=True):
        torch.testing.assert_close(got, want, atol=0, rtol=0)
