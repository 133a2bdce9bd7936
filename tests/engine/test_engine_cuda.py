"""The engine's CUDA paths (skipped without a CUDA device; CI has none).

Each has a CPU twin elsewhere in tests/engine; these check what only a GPU runs:
bf16 weights by default, packed attention's batched branch under CUDA sdpa kernels,
a short run that learns, the compiled flex kernel and Liger's kernels for Gemma 4. Run them with ``scripts/gpu_check.sh`` on a GPU machine.
"""

from __future__ import annotations

import pytest
import torch
from engine_testkit import fp32_config, liger_patched, random_rows

from akka_optimize.data.types import pack_examples
from akka_optimize.engine import attention
from akka_optimize.engine.session.training import TrainingSession

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _cuda(**kw):
    return fp32_config(**{"device": "cuda", "precision": "auto", **kw})


def test_cuda_defaults_to_bf16_weights_and_compute(tiny_model_dir):
    s = TrainingSession(tiny_model_dir, _cuda())
    assert s.device.type == "cuda"
    assert s.dtype == torch.bfloat16 == s.weight_dtype
    assert next(s._causal_lm.parameters()).dtype == torch.bfloat16


@pytest.mark.parametrize("loop_segments", [8, 1], ids=["one-call-per-conversation", "padded"])
def test_packed_attention_on_cuda_matches_eager(tiny_model_dir, monkeypatch, loop_segments):
    monkeypatch.setattr(attention, "LOOP_SEGMENTS", loop_segments)
    rows = random_rows(12, seed=4)
    packed = pack_examples(rows)
    ours = TrainingSession(tiny_model_dir, _cuda(precision="fp32", weight_precision="fp32"))
    ref = TrainingSession(
        tiny_model_dir,
        _cuda(precision="fp32", weight_precision="fp32", attn_implementation="eager"),
    )
    a = ours.forward([packed]).logprobs[0]
    b = ref.forward([packed]).logprobs[0]
    torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


def test_a_short_cuda_run_lowers_the_loss(tiny_model_dir):
    rows = random_rows(8, seed=5)
    s = TrainingSession(tiny_model_dir, _cuda(learning_rate=5e-3, micro_batch=4))
    losses = []
    for _ in range(12):
        s.forward_backward([pack_examples(rows[:4]), pack_examples(rows[4:])])
        losses.append(s.optim_step()["loss"])
    assert losses[-1] < losses[0] - 0.25, losses  # fp32 on CPU: 10.82 -> 10.29


def test_varlen_attention_on_cuda_matches_the_per_conversation_loop(tiny_model_dir, monkeypatch):
    """bf16 on CUDA: one ``varlen_attn`` per layer and pass, the same log-probs (within
    bf16 rounding) as one sdpa call per conversation."""
    assert attention.varlen_kernel() is not None, "this torch has no varlen_attn"
    rows = random_rows(12, seed=4)
    packed = pack_examples(rows)
    s = TrainingSession(tiny_model_dir, _cuda())
    calls = []
    real = attention._varlen

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(attention, "_varlen", counting)
    a = s.forward([packed]).logprobs[0]
    assert len(calls) == 2  # one per layer
    monkeypatch.setattr(attention, "_use_varlen", lambda query, dropout: False)
    b = s.forward([packed]).logprobs[0]
    assert len(calls) == 2
    torch.testing.assert_close(a, b, atol=3e-2, rtol=0)
    # The kernel itself, forward and backward, against fp32 per-conversation sdpa.
    _kernel_equals_each_conversation_alone(
        lambda q, k, v, segs: real(torch.nn.Module(), q, k, v, segs, None),
        [0, 17, 150, 151, 300],
    )


def _kernel_equals_each_conversation_alone(kernel, segs: list[int]) -> None:
    """``kernel(q, k, v, segs)`` in bf16 ([1, T, Hq, D] out), forward and backward, against
    fp32 sdpa run on each conversation alone."""
    gen = torch.Generator().manual_seed(0)
    qkv = [torch.randn(1, h, segs[-1], 64, generator=gen) for h in (4, 2, 2)]
    q, k, v = (t.cuda().bfloat16().requires_grad_() for t in qkv)
    q32, k32, v32 = (t.cuda().requires_grad_() for t in qkv)
    out = kernel(q, k, v, segs)
    ref = torch.cat(
        [
            torch.nn.functional.scaled_dot_product_attention(
                q32[:, :, x:y], k32[:, :, x:y], v32[:, :, x:y], is_causal=True, enable_gqa=True
            )
            for x, y in zip(segs[:-1], segs[1:], strict=True)
        ],
        dim=2,
    ).transpose(1, 2)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=0)
    w = torch.randn(ref.shape, generator=gen).cuda()
    (out.float() * w).sum().backward()
    (ref * w).sum().backward()
    for got, want in ((q, q32), (k, k32), (v, v32)):
        torch.testing.assert_close(got.grad.float(), want.grad, atol=5e-2, rtol=5e-2)


def test_flex_attention_on_cuda_compiles_and_matches_each_conversation_alone():
    """bf16 on CUDA: the compiled flex kernel with a pass's document mask (engine/flex.py),
    forward and backward, against fp32 per-conversation sdpa; the start-up probe passes
    at Gemma 4's head dimensions on this GPU."""
    from akka_optimize.engine import flex

    device = torch.device("cuda", torch.cuda.current_device())
    flex.check_device(device, [256, 512], torch.bfloat16)
    module = torch.nn.Module()
    _kernel_equals_each_conversation_alone(
        lambda q, k, v, segs: flex.flex_attention_forward(
            module, q, k, v, None, akka_segments=segs
        )[0],
        [0, 17, 150, 151, 256],  # padded to the 128-token blocks the kernel uses
    )


def test_liger_kernels_patch_gemma4_and_keep_its_scores(tmp_path, monkeypatch):
    """kernels.liger.rms_norm and .geglu (engine/kernels.py) on a tiny Gemma 4: every
    weighted RMSNorm and every MLP computes through Liger, the log-probs stay within bf16
    rounding of transformers' own modules, and an update trains."""
    pytest.importorskip("liger_kernel")
    from families import FAMILIES, VOCAB, build
    from transformers.models.gemma4 import modeling_gemma4

    from akka_optimize.catalog import load_catalog
    from akka_optimize.data.packing import pack

    for name in ("Gemma4RMSNorm", "Gemma4TextMLP"):  # Liger swaps the classes too
        monkeypatch.setattr(modeling_gemma4, name, getattr(modeling_gemma4, name))
    gemma4 = next(f for f in FAMILIES if f.name == "gemma4")
    model, entry = build(gemma4, tmp_path / "g4"), load_catalog(None).get(gemma4.repository)
    passes = pack(random_rows(6, seed=1, vocab=VOCAB), 64)
    kw = dict(target_modules=entry.target_modules(), auto_class=entry.auto_class)
    plain = TrainingSession(model, _cuda(**kw))
    liger = TrainingSession(model, _cuda(liger_rms_norm=True, liger_geglu=True, **kw))
    counts = liger_patched(liger._causal_lm)
    assert counts["geglu"] == 2 and counts["rms_norm"] >= 2 * 4 + 1, counts
    assert liger_patched(plain._causal_lm) == {"rms_norm": 0, "geglu": 0}
    a = torch.cat(plain.forward(passes).logprobs)
    b = torch.cat(liger.forward(passes).logprobs)
    torch.testing.assert_close(b, a, atol=5e-2, rtol=0)
    liger.forward_backward(passes)
    assert torch.isfinite(torch.tensor(liger.optim_step()["loss"]))
