"""Per-token loss functions; each returns a **sum** over weighted positions.

The caller divides by the update's supervised tokens (DATA-AND-TRAINING-RULES.md
"Remote losses are sums"; DESIGN.md "Losses are token-weighted"). All inputs are
aligned to the *targets* of the positions being scored: ``logprobs_N`` are the
current policy's log-probabilities of the N target tokens, ``weights_N`` their
weights, and for the reinforcement losses ``sampling_logprobs_N`` (the sampler's
log-probs, q) and ``advantages_N``. Formulas follow the Tinker loss reference
(cross_entropy, importance_sampling, ppo, cispo, dro, gspo).
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


def sequence_log_ratio(logprobs_N: Tensor, inputs: LossInputs) -> Tensor:
    """GSPO's sequence log-ratio: the mean of log pθ − log q over the tokens that
    ``sequence_ratio_mask`` marks (non-zero), detached (Tinker's GSPO reference:
    ``(target_logprobs.detach() - ref_logprobs)[in_ratio].mean()``).

    Args:
        logprobs_N: float [N], every scored token of one sequence (not a chunk of it).
        inputs: ``sampling_logprobs`` and ``sequence_ratio_mask``, float [N].

    Returns:
        A 0-dim tensor (logprobs_N's dtype), with no gradient.

    Raises:
        ValueError: the mask marks no token (the mean of nothing).
    """
    in_ratio = inputs["sequence_ratio_mask"] != 0
    if not bool(in_ratio.any()):
        raise ValueError("sequence_ratio_mask marks no token; GSPO's ratio is a mean over them.")
    return (logprobs_N.detach() - inputs["sampling_logprobs"])[in_ratio].mean()


def gspo(logprobs_N: Tensor, inputs: LossInputs, config: dict) -> Tensor:
    """GSPO-token (Zheng et al. 2025, arXiv:2507.18071; Tinker's ``gspo``):
    −Σ min(sₜA, clip(sₜ, lo, hi)·A), sₜ = sg[s]·pθ(xₜ)/sg[pθ(xₜ)], where
    log s = ``inputs["sequence_log_ratio"]`` (:func:`sequence_log_ratio` of the whole
    sequence, the same value at each of its tokens: the caller computes it, since this
    function may see a chunk only). Every token carries the sequence ratio's value with
    its own log-prob's gradient. ``clip_low_threshold`` / ``clip_high_threshold`` bound
    the ratio (defaults 0.8 and 1.2, as :func:`ppo`)."""
    ratio = torch.exp(inputs["sequence_log_ratio"] + logprobs_N - logprobs_N.detach())
    adv = inputs["advantages"]
    lo = config.get("clip_low_threshold", 0.8)
    hi = config.get("clip_high_threshold", 1.2)
    clipped = torch.clamp(ratio, lo, hi)
    return -torch.minimum(ratio * adv, clipped * adv).sum()


SEQUENCE_LOSSES = {"gspo": sequence_log_ratio}
"""Losses with a per-sequence input the caller computes first, over the whole sequence's
detached log-probs: loss name → the function giving it (stored as its ``__name__``)."""

LOSSES: dict[str, Callable[[Tensor, LossInputs, dict], Tensor]] = {
    "cross_entropy": cross_entropy,
    "importance_sampling": importance_sampling,
    "ppo": ppo,
    "cispo": cispo,
    "dro": dro,
    "gspo": gspo,
}
REINFORCEMENT_INPUTS = ("sampling_logprobs", "advantages")


# --------------------------------------------------------------------------------------
# The reinforcement loop's policy losses (issue 52 item 4): per-token terms, weighted.

POLICY_LOSSES = ("importance_sampling", "ppo", "cispo", "dro", "gspo")
"""``rlHyperparams.lossFn``: the policy losses the reinforcement loop trains with, by
their Tinker names (tinker SDK 0.38 ``LossFnType``; tinker-cookbook 0.6's ``rl/train.py``
default is ``importance_sampling``)."""

GSPO_CLIP = (1.0 - 3e-4, 1.0 + 4e-4)
"""GSPO's default clip range of the sequence ratio, ``1 − ε_low`` and ``1 + ε_high`` with
the paper's ε_low = 3e-4, ε_high = 4e-4 (Zheng et al. 2025, arXiv:2507.18071 §5.1)."""


def policy_token_losses(name: str, logprobs_N: Tensor, inputs: LossInputs, config: dict) -> Tensor:
    """Each scored token's policy loss (a tensor [N], the same dtype as ``logprobs_N``);
    their sum is what :func:`importance_sampling`, :func:`ppo`, :func:`cispo` and
    :func:`dro` return, with the same defaults.

    ``gspo`` (GSPO-token, Zheng et al. 2025, arXiv:2507.18071; Tinker's ``gspo``): every
    token's ratio takes its sequence's value ``exp(mean_t log pθ/q)`` — given, detached,
    as ``inputs["sequence_log_ratio"]`` on each of the sequence's tokens, because a pass's
    tokens reach the loss in chunks — with its own log-prob's gradient, and the ratio is
    clipped as PPO's to ``[clip_low_threshold, clip_high_threshold]`` (:data:`GSPO_CLIP`).

    Raises:
        KeyError: ``name`` is not one of :data:`POLICY_LOSSES`, or ``gspo`` without
            ``sequence_log_ratio``.
    """
    adv = inputs["advantages"]
    if name == "gspo":
        ratio = torch.exp(inputs["sequence_log_ratio"] + logprobs_N - logprobs_N.detach())
        lo = config.get("clip_low_threshold", GSPO_CLIP[0])
        hi = config.get("clip_high_threshold", GSPO_CLIP[1])
        return -torch.minimum(ratio * adv, torch.clamp(ratio, lo, hi) * adv)
    if name not in POLICY_LOSSES:
        raise KeyError(f"{name!r} is not a policy loss; use one of {POLICY_LOSSES}")
    ratio = _ratio(logprobs_N, inputs)
    if name == "importance_sampling":
        return -(ratio * adv)
    if name == "ppo":
        lo, hi = config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)
        return -torch.minimum(ratio * adv, torch.clamp(ratio, lo, hi) * adv)
    if name == "cispo":
        lo, hi = config.get("clip_low_threshold", 0.0), config.get("clip_high_threshold", 1.28)
        return -(torch.clamp(ratio, lo, hi).detach() * logprobs_N * adv)
    beta = config.get("beta", 0.05)  # dro
    return -(logprobs_N * adv - 0.5 * beta * (logprobs_N - inputs["sampling_logprobs"]) ** 2)


def _weighted(name: str) -> Callable[[Tensor, LossInputs, dict], Tensor]:
    def loss(logprobs_N: Tensor, inputs: LossInputs, config: dict) -> Tensor:
        return (inputs["weights"] * policy_token_losses(name, logprobs_N, inputs, config)).sum()

    loss.__name__ = loss.__qualname__ = f"weighted_{name}"
    loss.__doc__ = f"Σ wᵢ·ℓᵢ with ℓ the per-token {name} loss (:func:`policy_token_losses`)."
    return loss


WEIGHTED_PREFIX = "rl:"
"""The reinforcement loop's losses in :data:`LOSSES`: ``rl:NAME`` weighs each token's
``NAME`` loss by the pass's ``weights`` (the loss aggregation and the rollout correction,
:func:`aggregation_weights`). Not a Tinker API name: the API's own losses keep theirs."""

LOSSES.update({WEIGHTED_PREFIX + n: _weighted(n) for n in POLICY_LOSSES})

LOSS_AGGREGATIONS = ("token_mean", "sequence_mean", "dr_grpo")
"""``rlHyperparams.lossAggregation`` (:func:`aggregation_weights`)."""


def aggregation_weights(
    lengths: list[int],
    mode: str,
    constant: int,
    total_tokens: int | None = None,
    total_sequences: int | None = None,
) -> list[float]:
    """The weight of each sequence's tokens such that the weighted token sum, divided by
    the update's trained tokens (what ``optim_step`` divides by), is the aggregated loss.

    With ``T`` the update's tokens (``total_tokens``, default ``sum(lengths)``; on
    several ranks the whole update's), ``S`` its sequences (``len(lengths)`` here, or the
    whole update's when the caller scales) and ``L_i`` sequence i's tokens:

    - ``token_mean``: ``(1/T) Σ_i Σ_t ℓ`` — weight 1 (DAPO, Yu et al. 2025,
      arXiv:2503.14476; every token counts the same, whatever its sequence's length);
    - ``sequence_mean``: ``(1/S) Σ_i (1/L_i) Σ_t ℓ`` — weight ``T / (S·L_i)`` (GRPO as
      published, Shao et al. 2024, arXiv:2402.03300);
    - ``dr_grpo``: ``(1/S) Σ_i (1/C) Σ_t ℓ`` with ``C = constant`` (the longest completion,
      ``maxNewTokens``) — weight ``T / (S·C)`` (Dr. GRPO, Liu et al. 2025,
      arXiv:2503.20783; TRL's ``loss_type="dr_grpo"``).

    Returns:
        One weight per sequence (floats; exactly 1.0 under ``token_mean``).

    Raises:
        ValueError: an unknown ``mode``, no sequence, an empty one, or ``constant`` < 1.
    """
    if mode not in LOSS_AGGREGATIONS:
        raise ValueError(f"loss aggregation {mode!r} is not one of {LOSS_AGGREGATIONS}")
    if not lengths or min(lengths) < 1 or constant < 1:
        raise ValueError("aggregation needs sequences of at least one token and constant ≥ 1")
    total = sum(lengths) if total_tokens is None else total_tokens
    seqs = len(lengths) if total_sequences is None else total_sequences
    if mode == "token_mean":
        return [1.0] * len(lengths)
    if mode == "sequence_mean":
        return [total / (seqs * n) for n in lengths]
    return [total / (seqs * constant)] * len(lengths)
