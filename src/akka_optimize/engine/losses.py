"""Per-token loss functions; each returns a **sum** over weighted positions.

The caller divides by the update's supervised tokens (DATA-AND-TRAINING-RULES.md
"Remote losses are sums"; DESIGN.md "Losses are token-weighted"). All inputs are
aligned to the *targets* of the positions being scored: ``logprobs_N`` are the
current policy's log-probabilities of the N target tokens, ``weights_N`` their
weights, and for the reinforcement losses ``sampling_logprobs_N`` (the sampler's
log-probs, q) and ``advantages_N``. Formulas follow the Tinker loss reference
(cross_entropy, importance_sampling, ppo, cispo, dro).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

LossInputs = dict[str, Tensor]


def cross_entropy(logprobs_N: Tensor, inputs: LossInputs, config: dict) -> Tensor:
    """−Σ wᵢ·log pθ(xᵢ)."""
    return -(inputs["weights"] * logprobs_N).sum()


def _ratio(logprobs_N: Tensor, inputs: LossInputs) -> Tensor:
    return torch.exp(logprobs_N - inputs["sampling_logprobs"])


def importance_sampling(logprobs_N: Tensor, inputs: LossInputs, config: dict) -> Tensor:
    """−Σ (pθ/q)ᵢ·Aᵢ (REINFORCE with an importance ratio, no clipping)."""
    return -(_ratio(logprobs_N, inputs) * inputs["advantages"]).sum()


def ppo(logprobs_N: Tensor, inputs: LossInputs, config: dict) -> Tensor:
    """−Σ min(ρA, clip(ρ, 1−ε_low, 1+ε_high)·A), ρ = pθ/q; ε defaults 0.2 (Schulman et al. 2017)."""
    ratio = _ratio(logprobs_N, inputs)
    adv = inputs["advantages"]
    lo = config.get("clip_low_threshold", 0.8)
    hi = config.get("clip_high_threshold", 1.2)
    clipped = torch.clamp(ratio, lo, hi)
    return -torch.minimum(ratio * adv, clipped * adv).sum()


def cispo(logprobs_N: Tensor, inputs: LossInputs, config: dict) -> Tensor:
    """−Σ sg(clip(ρ, lo, hi))·log pθ·A (Chen et al. 2025, arXiv:2506.13585)."""
    ratio = _ratio(logprobs_N, inputs)
    lo = config.get("clip_low_threshold", 0.0)
    hi = config.get("clip_high_threshold", 1.28)
    clipped = torch.clamp(ratio, lo, hi).detach()
    return -(clipped * logprobs_N * inputs["advantages"]).sum()


def dro(logprobs_N: Tensor, inputs: LossInputs, config: dict) -> Tensor:
    """−Σ (log pθ·A − ½β(log pθ − log q)²) (Richemond et al. 2024, arXiv:2405.19107); β default 0.05."""
    beta = config.get("beta", 0.05)
    quad = (logprobs_N - inputs["sampling_logprobs"]) ** 2
    return -(logprobs_N * inputs["advantages"] - 0.5 * beta * quad).sum()


LOSSES: dict[str, Callable[[Tensor, LossInputs, dict], Tensor]] = {
    "cross_entropy": cross_entropy,
    "importance_sampling": importance_sampling,
    "ppo": ppo,
    "cispo": cispo,
    "dro": dro,
}
REINFORCEMENT_INPUTS = ("sampling_logprobs", "advantages")
