"""Mixed precision: fp32 weights and adapter, bf16 compute under autocast (config.model)."""

from __future__ import annotations

import torch
from engine_testkit import fp32_config, random_rows

from akka_optimize.data.types import pack_examples
from akka_optimize.engine.session import TrainingSession


def test_bf16_compute_over_fp32_weights_trains_close_to_fp32(tiny_model_dir):
    """Three updates under bf16 autocast follow the fp32 run: each update's loss and
    gradient norm, and the adapter at the end, stay close to fp32's."""
    rows = random_rows(4, seed=3)
    updates = [[pack_examples(rows[:2])], [pack_examples(rows[2:])], [pack_examples(rows[:2])]]
    cfg = dict(learning_rate=5e-3)
    full = TrainingSession(tiny_model_dir, fp32_config(**cfg))
    mixed = TrainingSession(
        tiny_model_dir, fp32_config(precision="bf16", weight_precision="fp32", **cfg)
    )
    assert mixed.weight_dtype == torch.float32 and mixed.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in mixed.params.values())
    start = {n: p.detach().clone() for n, p in full.params.items()}
    losses = []
    for passes in updates:
        a = full.forward_backward(passes)
        b = mixed.forward_backward(passes)
        assert a.supervised_tokens == b.supervised_tokens
        ma, mb = full.optim_step(), mixed.optim_step()
        # bf16 keeps ~3 significant digits: the per-token loss agrees to about 1%.
        assert abs(ma["loss"] - mb["loss"]) / ma["loss"] < 0.02, (ma["loss"], mb["loss"])
        assert mb["gradNorm"] > 0
        assert abs(ma["gradNorm"] - mb["gradNorm"]) / ma["gradNorm"] < 0.1
        losses.append(ma["loss"])
    assert losses[-1] < losses[0]  # the same rows again, after two updates: it trained

    def norm(tensors) -> float:
        return sum(float(t.detach().norm() ** 2) for t in tensors) ** 0.5

    moved = norm(full.params[n] - start[n] for n in start)  # how far fp32 trained
    apart = norm(full.params[n] - mixed.params[n] for n in start)
    assert moved > 0 and apart / moved < 0.2, apart / moved


def test_bf16_weights_store_the_base_model_in_bf16(tiny_model_dir):
    s = TrainingSession(tiny_model_dir, fp32_config(precision="bf16", weight_precision="bf16"))
    base = s.model.get_base_model()
    assert base.model.layers[0].mlp.down_proj.base_layer.weight.dtype == torch.bfloat16
    out = s.forward([pack_examples(random_rows(2, seed=1))])
    assert out.supervised_tokens > 0 and out.loss_sum > 0
