"""Mixed precision: fp32 weights and adapter, bf16 compute under autocast (config.model)."""

from __future__ import annotations

import torch
from engine_testkit import fp32_config, random_rows

from akka_optimize.data.types import pack_examples
from akka_optimize.engine.session import TrainingSession


def test_bf16_compute_over_fp32_weights_trains_close_to_fp32(tiny_model_dir):
    rows = random_rows(4, seed=3)
    passes = [pack_examples(rows)]
    full = TrainingSession(tiny_model_dir, fp32_config())
    mixed = TrainingSession(tiny_model_dir, fp32_config(precision="bf16", weight_precision="fp32"))
    assert mixed.weight_dtype == torch.float32 and mixed.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in mixed.params.values())
    a = full.forward_backward(passes)
    b = mixed.forward_backward(passes)
    assert a.supervised_tokens == b.supervised_tokens
    # bf16 keeps ~3 significant digits: the per-token loss agrees to about 1%.
    la, lb = a.loss_sum / a.supervised_tokens, b.loss_sum / b.supervised_tokens
    assert abs(la - lb) / la < 0.02, (la, lb)
    ma, mb = full.optim_step(), mixed.optim_step()
    assert mb["gradNorm"] > 0 and abs(ma["gradNorm"] - mb["gradNorm"]) / ma["gradNorm"] < 0.1


def test_bf16_weights_store_the_base_model_in_bf16(tiny_model_dir):
    s = TrainingSession(tiny_model_dir, fp32_config(precision="bf16", weight_precision="bf16"))
    base = s.model.get_base_model()
    assert base.model.layers[0].mlp.down_proj.base_layer.weight.dtype == torch.bfloat16
    out = s.forward([pack_examples(random_rows(2, seed=1))])
    assert out.supervised_tokens > 0 and out.loss_sum > 0
