"""The gap between the rollout's and the trainer's log-probabilities of the same sampled
tokens, measured (:func:`gap_metrics`) and corrected (:func:`correct`) — issue 52 item 2.

The sampler's log-prob ``q`` of each token is kept with its sample
(:attr:`~akka_optimize.engine.rl.settings.Sample.logprobs`); the trainer's ``p`` is the
update's own forward pass at its current weights. Their gap comes from two sources: the
rollout weights' staleness (``rlHyperparams.maxStaleness``) and numerics (another kernel,
dtype or engine computing "the same" logits: up to 0.17 nats per token in bf16 on
SmolLM2-135M; open-instruct #1473, tinker-feedback #148).

``rlHyperparams.rolloutCorrection`` (cap ``C`` = ``rolloutCorrectionCap``):

- ``none`` (the default): the losses use the sampler's ``q`` as they are. Every policy
  loss here is already importance-weighted against the sampler's log-probs (Tinker's
  convention: the ratio is ``pθ/q``, clipped by ``ppo``, ``cispo`` and ``gspo``), so the gap
  is inside the ratio and the update stays unbiased; what it lacks is a bound on an
  unclipped loss's ratio. TRL corrects by default (``sequence_mask``, cap 3.0) because
  its loss's ratio is against the trainer's own old log-probs and never sees the
  sampler's. ``none`` also keeps a run exactly as it was before the setting existed.
- ``truncated_is``: each token's ratio is capped at ``C`` (truncated importance sampling,
  Ionides 2008; Yao et al. 2025 "Your efficient RL framework secretly brings you
  off-policy RL training"): the sampler log-prob the loss sees becomes
  ``max(q, p − log C)``, so ``pθ/q'`` = ``min(pθ/q, C)`` in value, with ``pθ``'s gradient.
- ``sequence_mask``: a sequence whose ratio ``exp(Σ_t (p − q))`` (TRL's sequence ratio)
  leaves ``[1/C, C]`` gets loss weight 0 (it still counts in the aggregation's
  denominators, as in TRL).
"""

from __future__ import annotations

import math

CORRECTIONS = ("none", "truncated_is", "sequence_mask")
"""``rlHyperparams.rolloutCorrection``."""


class Reduce:
    """Sums and maxima of an update's metric terms over the ranks that share it; this
    base class is one device (the values as they are). :class:`akka_optimize.engine.
    rl_ranks.RankReduce` reduces over a process group."""

    def sums(self, values: list[float]) -> list[float]:
        """``values`` summed elementwise over the ranks."""
        return list(values)

    def maxes(self, values: list[float]) -> list[float]:
        """The elementwise largest of ``values`` over the ranks."""
        return list(values)


ONE_DEVICE = Reduce()


def gap_metrics(
    trainer: list[list[float]], sampler: list[list[float]], reduce: Reduce = ONE_DEVICE
) -> dict[str, float]:
    """The update's rollout–trainer gap over its trained tokens (of every rank, through
    ``reduce``), per sample the trainer's log-probs ``p`` and the sampler's ``q`` (nats,
    same lengths).

    Returns:
        ``logprobDiffMean`` and ``logprobDiffMax`` (mean and max of ``|p − q|``),
        ``approxKl`` (mean of ``q − p``, the k1 estimate of KL(q‖p)) and ``samplerKl``
        (mean of ``(r − 1) − log r`` with ``r = p/q``: the k3 estimate of KL(q‖p), never
        negative; Schulman 2020, "Approximating KL divergence"). All 0 with no token.

    Raises:
        ValueError: a sample whose two lists differ in length.
    """
    diffs = []
    for p, q in zip(trainer, sampler, strict=True):
        if len(p) != len(q):
            raise ValueError(f"{len(p)} trainer log-probs against {len(q)} sampler log-probs")
        diffs += [a - b for a, b in zip(p, q, strict=True)]
    absolute, signed, k3, n = reduce.sums(
        [sum(map(abs, diffs)), sum(diffs), sum(math.expm1(d) - d for d in diffs), len(diffs)]
    )
    (largest,) = reduce.maxes([max(map(abs, diffs), default=0.0)])
    if not n:
        return {"logprobDiffMean": 0.0, "logprobDiffMax": 0.0, "approxKl": 0.0, "samplerKl": 0.0}
    return {
        "logprobDiffMean": absolute / n,
        "logprobDiffMax": largest,
        "approxKl": -signed / n,
        "samplerKl": k3 / n,
    }


def correct(
    trainer: list[list[float]],
    sampler: list[list[float]],
    mode: str,
    cap: float,
    reduce: Reduce = ONE_DEVICE,
) -> tuple[list[list[float]], list[float], dict[str, float]]:
    """Apply ``rolloutCorrection`` (module docstring) to one update's trained samples.

    Args:
        trainer / sampler: per sample, the trainer's and the sampler's log-probs.
        mode: one of :data:`CORRECTIONS`.
        cap: ``C`` (> 1).
        reduce: the shares are over every rank's samples.

    Returns:
        ``(sampling_logprobs, keep, metrics)``: per sample the log-probs the loss uses in
        place of ``q``; per sample 1.0 or 0.0 (masked); ``correctedTokenShare`` (tokens
        whose ratio was capped) and ``maskedSequenceShare``.

    Raises:
        ValueError: an unknown ``mode`` or ``cap`` ≤ 1.
    """
    if mode not in CORRECTIONS:
        raise ValueError(f"rollout correction {mode!r} is not one of {CORRECTIONS}")
    if not cap > 1:
        raise ValueError(f"rolloutCorrectionCap must be above 1, not {cap}")
    log_cap = math.log(cap)
    q_out, keep, capped, tokens = [], [], 0, 0
    for p, q in zip(trainer, sampler, strict=True):
        tokens += len(q)
        if mode == "truncated_is":
            lifted = [max(b, a - log_cap) for a, b in zip(p, q, strict=True)]
            capped += sum(x != b for x, b in zip(lifted, q, strict=True))
            q_out.append(lifted)
        else:
            q_out.append(list(q))
        inside = abs(sum(a - b for a, b in zip(p, q, strict=True))) <= log_cap
        keep.append(1.0 if mode != "sequence_mask" or inside else 0.0)
    capped, tokens, masked, seqs = reduce.sums([capped, tokens, keep.count(0.0), len(keep)])
    return (
        q_out,
        keep,
        {
            "correctedTokenShare": capped / tokens if tokens else 0.0,
            "maskedSequenceShare": masked / seqs if seqs else 0.0,
        },
    )
