"""The Tinker API's ``optim_step`` applies every ``adam_params`` setting as torch's AdamW
does (issue 56 item 2), on the tiny model in-process, through the worker's own handler
(:class:`akka_optimize.tinker.worker.Calls`, which receives the SDK's JSON body as the
service passes it on).

Each case changes one setting from the SDK's default (weight decay, beta1, beta2, eps,
the gradient clip) and trains three updates on different batches. After each update the
adapter equals, within :data:`TOL`, a copy of it stepped by ``torch.optim.AdamW`` (after
``torch.nn.utils.clip_grad_norm_``) with the same gradients and settings. The case also
shows it can see its setting: the same copy stepped with that one setting at the SDK's
default ends more than 100 × :data:`TOL` away, so an ``optim_step`` that ignored it
fails the case.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from akka_optimize.tinker.datums import ADAM_DEFAULTS
from akka_optimize.tinker.worker import Calls

TOL = 1e-6
"""Largest absolute difference in any adapter weight from torch's AdamW (both fp32 on the
CPU, the same gradients: they differ by rounding only)."""
STEPS = 3

CASES = {
    "weight_decay": {"weight_decay": 0.5},
    "beta1": {"beta1": 0.5},
    "beta2": {"beta2": 0.5},
    "eps": {"eps": 1e-2},
    "grad_clip_norm": {"grad_clip_norm": 0.05},
}


class _Events:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, event: dict[str, Any]) -> None:
        self.sent.append(event)


def _batch(step: int, vocab: int) -> dict[str, Any]:
    """Three datums of random tokens, different at each step (so the gradients differ)."""
    gen = torch.Generator().manual_seed(100 + step)
    data = []
    for n in (9, 12, 15):
        ids = torch.randint(3, vocab, (n,), generator=gen).tolist()
        inputs = {"target_tokens": ids[1:], "weights": [1.0] * (n - 1)}
        data.append({"tokens": ids[:-1], "inputs": inputs})
    return {"data": data, "loss_fn": "cross_entropy", "loss_fn_config": {}}


def _adamw(params: list[torch.Tensor], p: dict[str, float]) -> torch.optim.AdamW:
    return torch.optim.AdamW(
        params,
        lr=p["learning_rate"],
        betas=(p["beta1"], p["beta2"]),
        eps=p["eps"],
        weight_decay=p["weight_decay"],
    )


def _step(opt: torch.optim.AdamW, params: list[torch.Tensor], grads: list, clip: float) -> None:
    for q, g in zip(params, grads, strict=True):
        q.grad = g.clone()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()


def _worst(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x.detach() - y).abs().max()) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("setting", sorted(CASES))
def test_optim_step_applies_each_adam_setting_as_torch_adamw(
    setting: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from akka_optimize.engine.config import EngineConfig
    from akka_optimize.engine.session.training import TrainingSession
    from akka_optimize.tinker.kind import ATTN, MLP

    cfg = EngineConfig(
        lora_rank=4, lora_alpha=32.0, seed=3, device="cpu", target_modules=ATTN + MLP
    )
    session = TrainingSession(tiny_model_dir, cfg)
    calls = Calls(session, SimpleNamespace(extra={}), None, _Events(), tmp_path)
    given = {"learning_rate": 0.01, **CASES[setting]}
    want = {**ADAM_DEFAULTS, **given}  # what the step must apply
    other = {**want, setting: ADAM_DEFAULTS[setting]}  # the same with this setting ignored
    live = list(session.params.values())
    ref = [p.detach().clone() for p in live]
    ref_other = [p.detach().clone() for p in live]
    opt, opt_other = _adamw(ref, want), _adamw(ref_other, other)
    for step in range(1, STEPS + 1):
        calls.handle("forward_backward", _batch(step, session.vocab_size))
        grads = [p.grad.detach().clone() for p in live]
        _step(opt, ref, grads, want["grad_clip_norm"])
        _step(opt_other, ref_other, grads, other["grad_clip_norm"])
        calls.handle("optim_step", {"adam_params": given})
        assert _worst(live, ref) < TOL, (setting, step, _worst(live, ref))
    assert _worst(ref, ref_other) > 100 * TOL, (setting, _worst(ref, ref_other))
