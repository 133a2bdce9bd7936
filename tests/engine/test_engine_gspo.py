"""GSPO (Tinker's ``gspo``, issue 53 break 6) against numbers worked out by hand, then on
the tiny model: the sequence ratio spans the whole sequence even when the head scores it
in chunks."""

from __future__ import annotations

import math

import pytest
import torch
from engine_testkit import adapter_grads, fp32_config, row

from akka_optimize.data.types import pack_examples
from akka_optimize.engine.errors import EngineError
from akka_optimize.engine.losses import gspo, sequence_log_ratio
from akka_optimize.engine.session.training import TrainingSession


def _inputs(lp: torch.Tensor) -> dict[str, torch.Tensor]:
    q = torch.tensor([-1.5, -2.0, -1.0], dtype=torch.float64)
    mask = torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)
    adv = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64)
    inputs = {"sampling_logprobs": q, "sequence_ratio_mask": mask, "advantages": adv}
    inputs["sequence_log_ratio"] = sequence_log_ratio(lp, inputs).expand(3)
    return inputs


def test_gspo_matches_the_hand_computed_loss_and_gradient() -> None:
    # log pθ − log q = [0.5, 0.0, 0.5]; the mask keeps tokens 2 and 3: mean 0.25, s = e^0.25
    s = math.exp(0.25)
    lp = torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64, requires_grad=True)
    inputs = _inputs(lp)
    assert float(inputs["sequence_log_ratio"][0]) == pytest.approx(0.25)
    loss = gspo(lp, inputs, {})  # clip to [0.8, 1.2]: s = 1.284 clips where A > 0
    loss.backward()
    assert loss.item() == pytest.approx(-(1.2 * 1.0 + 1.2 * 2.0 + s * -1.0), abs=1e-12)
    # clipped tokens carry no gradient; the kept one −s·A with respect to its own log-prob
    assert lp.grad.tolist() == pytest.approx([0.0, 0.0, s], abs=1e-12)

    lp.grad = None
    wide = gspo(lp, _inputs(lp), {"clip_high_threshold": 1.5})  # nothing clipped
    wide.backward()
    assert wide.item() == pytest.approx(-s * (1.0 + 2.0 - 1.0), abs=1e-12)
    assert lp.grad.tolist() == pytest.approx([-s, -2 * s, s], abs=1e-12)


def test_an_empty_sequence_ratio_mask_is_refused() -> None:
    lp = torch.zeros(2, dtype=torch.float64)
    inputs = {"sampling_logprobs": lp, "sequence_ratio_mask": torch.zeros(2)}
    with pytest.raises(ValueError, match="sequence_ratio_mask"):
        sequence_log_ratio(lp, inputs)


def test_gspo_in_chunks_is_gspo_over_the_whole_sequence(tiny_model_dir) -> None:
    p = pack_examples([row([5, 6, 7], [8, 9, 10, 11, 12], 1)])  # 7 scored tokens
    whole = TrainingSession(tiny_model_dir, fp32_config())
    lp = whole.forward([p]).logprobs[0]
    n = len(p.input_ids)
    shift = [0.0, 0.0, 0.0, 0.0, 0.3, -0.2, 0.4, 0.1]  # log pθ − log q per position
    mask = [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]  # the sampled tokens
    adv = [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert n == len(shift)
    inputs = {
        "sampling_logprobs": (lp - torch.tensor(shift)).tolist(),
        "advantages": adv,
        "sequence_ratio_mask": mask,
    }
    s = math.exp(sum(shift[4:]) / 4)  # 0.15 → 1.1618, inside [0.8, 1.2]: nothing clipped
    want = -s * sum(adv)
    got = whole.forward_backward([p], "gspo", loss_inputs=[inputs])
    assert got.loss_sum == pytest.approx(want, abs=1e-4)
    chunked = TrainingSession(tiny_model_dir, fp32_config(head_chunk_tokens=2))
    again = chunked.forward_backward([p], "gspo", loss_inputs=[inputs])
    assert again.loss_sum == pytest.approx(want, abs=1e-4)
    for name, g in adapter_grads(whole).items():
        assert torch.allclose(adapter_grads(chunked)[name], g, rtol=1e-3, atol=1e-5), name
    with pytest.raises(EngineError, match="sequence_ratio_mask"):
        whole.forward([p], "gspo", loss_inputs=[{**inputs, "sequence_ratio_mask": [0.0] * n}])
