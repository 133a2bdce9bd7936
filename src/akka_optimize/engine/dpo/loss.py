"""Preference losses on sequence log-probabilities (issue 50; seeds/004 §1.4).

A pair's *sequence log-probability* under a model is the sum of the log-probabilities of
its answer's tokens (the prompt is not scored), as TRL's ``DPOTrainer`` computes it. With
the policy (the adapter on) and the reference (the same base weights, adapter off):

* ``Δ = (log πθ(c) − log πref(c)) − (log πθ(r) − log πref(r))`` for the preferred answer c
  and the non-preferred answer r;
* ``sigmoid`` (DPO, Rafailov et al. 2023, arXiv:2305.18290, eq. 7):
  ``−(1−ε)·log σ(βΔ) − ε·log σ(−βΔ)``; ε is ``labelSmoothing`` (conservative DPO,
  Mitchell 2023, "A note on DPO with noisy preferences"), 0 by default, which is TRL's
  ``sigmoid`` exactly;
* ``ipo`` (IPO, Azar et al. 2023, arXiv:2310.12036, eq. 17, on log-ratios averaged over
  each answer's tokens as TRL computes it): ``(Δc/|c| − Δr/|r| − 1/(2β))²``.

Several loss types add up with their weights: ``Σₖ wₖ·lossₖ`` per pair (TRL's
``loss_type`` list with ``loss_weights``). The rewards are ``β·(log πθ − log πref)`` of each
answer; a pair is *accurate* when its chosen reward exceeds its rejected reward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

LOSS_TYPES = ("sigmoid", "ipo")


@dataclass(frozen=True)
class DpoSettings:
    """The preference loss of a run (``config.dpoHyperparams``).

    Attributes:
        beta: β > 0. loss_types: each of :data:`LOSS_TYPES`. loss_weights: one per type.
        label_smoothing: ε in [0, 0.5), the ``sigmoid`` loss only.

    Raises:
        ValueError: an unknown loss type, weights of another length, β ≤ 0, or label
            smoothing with ``ipo`` (seeds/004 §1.4; the plan refuses these first).
    """

    beta: float = 0.1
    loss_types: tuple[str, ...] = ("sigmoid",)
    loss_weights: tuple[float, ...] = (1.0,)
    label_smoothing: float = 0.0

    def __post_init__(self) -> None:
        bad = [t for t in self.loss_types if t not in LOSS_TYPES]
        if bad or not self.loss_types:
            raise ValueError(f"loss types {list(self.loss_types)}: use {list(LOSS_TYPES)}")
        if len(self.loss_weights) != len(self.loss_types):
            raise ValueError("give one loss weight per loss type")
        if self.beta <= 0 or not 0 <= self.label_smoothing < 0.5:
            raise ValueError("beta must be > 0 and label smoothing in [0, 0.5)")
        if self.label_smoothing and "ipo" in self.loss_types:
            raise ValueError("label smoothing applies to the sigmoid (DPO) loss only, not ipo")

    @classmethod
    def from_plan(cls, hp: dict) -> DpoSettings:
        """From a resolved ``dpoHyperparams`` (``beta``, ``lossTypes``, ``lossWeights``,
        ``labelSmoothing``)."""
        types = tuple(hp.get("lossTypes") or ("sigmoid",))
        weights = tuple(float(w) for w in (hp.get("lossWeights") or [1.0] * len(types)))
        return cls(
            float(hp.get("beta", 0.1)), types, weights, float(hp.get("labelSmoothing") or 0.0)
        )

    def to_dict(self) -> dict:
        """JSON form (kept in saved state)."""
        return {
            "beta": self.beta,
            "loss_types": list(self.loss_types),
            "loss_weights": list(self.loss_weights),
            "label_smoothing": self.label_smoothing,
        }


def pair_losses(
    policy_P2: Tensor, reference_P2: Tensor, answer_tokens_P2: Tensor, s: DpoSettings
) -> Tensor:
    """The loss of each of P pairs (module docstring).

    Args:
        policy_P2: [P, 2] sequence log-probabilities under the policy, column 0 the chosen
            answer, column 1 the rejected one (float64 keeps a long answer's sum exact).
        reference_P2: [P, 2] the same under the reference (no gradient).
        answer_tokens_P2: [P, 2] scored tokens of each answer (for ``ipo``).

    Returns:
        [P] per-pair losses, weighted and summed over ``s.loss_types``.
    """
    ratio_P2 = policy_P2 - reference_P2
    delta_P = ratio_P2[:, 0] - ratio_P2[:, 1]
    total = torch.zeros_like(delta_P)
    for kind, weight in zip(s.loss_types, s.loss_weights, strict=True):
        if kind == "sigmoid":
            eps = s.label_smoothing
            loss = -(1 - eps) * F.logsigmoid(s.beta * delta_P)
            if eps:
                loss = loss - eps * F.logsigmoid(-s.beta * delta_P)
        else:  # ipo
            avg_P2 = ratio_P2 / answer_tokens_P2.clamp(min=1)
            loss = (avg_P2[:, 0] - avg_P2[:, 1] - 1 / (2 * s.beta)) ** 2
        total = total + weight * loss
    return total


def reward_sums(policy_P2: Tensor, reference_P2: Tensor, beta: float) -> list[float]:
    """``[Σ chosen reward, Σ rejected reward, Σ margin, accurate pairs]`` over P pairs
    (sums, so ranks and passes add up before the update divides by its pairs)."""
    with torch.no_grad():
        r_P2 = beta * (policy_P2 - reference_P2)
        margin_P = r_P2[:, 0] - r_P2[:, 1]
        return [
            float(r_P2[:, 0].sum()),
            float(r_P2[:, 1].sum()),
            float(margin_P.sum()),
            float((margin_P > 0).sum()),
        ]
