"""One group-relative update (:func:`rl_update`; steps 1–4 of :mod:`akka_optimize.engine.rl.loop`):
sample, score, group-relative advantages (:func:`group_advantages`), then train on the
groups that carry a signal, with the update's reward and policy metrics.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from ..errors import EngineError
from ..losses import GSPO_CLIP, POLICY_LOSSES, WEIGHTED_PREFIX, aggregation_weights
from ..rollout import per_sample, rollout_passes, sample_rollouts
from .gap import ONE_DEVICE, Reduce, correct, gap_metrics
from .settings import RLPrompt, RLSettings, Sample

ADVANTAGE_NORMS = ("population_std", "sample_std", "none")
"""``rlHyperparams.advantageNormalization``: what a group's centred rewards are divided by."""

VARIANCE_FLOOR = 1e-8
"""A group whose reward variance is at most this has standard deviation 1 (rule 19)."""


def group_advantages(rewards: list[float], norm: str = "population_std") -> list[float]:
    """Group-relative advantages (DATA-AND-TRAINING-RULES.md rule 19; seeds/004 §1.2 AT 7):
    ``r − mean(r)``, divided by the group's standard deviation.

    Args:
        rewards: one group's rewards (floats), at least two.
        norm: ``population_std`` (divide by N, the rule's default: ``[1,0,0,0]`` →
            ``[1.732, −0.577, −0.577, −0.577]``), ``sample_std`` (divide by N − 1, TRL's
            GRPOTrainer: ``[1.5, −0.5, −0.5, −0.5]``) or ``none`` (centred only, as Dr.
            GRPO, Liu et al. 2025, arXiv:2503.20783). A variance at most
            :data:`VARIANCE_FLOOR` counts as standard deviation 1; equal rewards give all 0.

    Raises:
        ValueError: fewer than two rewards (a group needs two to compare), or an unknown
            ``norm``.
    """
    n = len(rewards)
    if n < 2:
        raise ValueError(f"a group needs at least 2 samples, not {n}")
    if norm not in ADVANTAGE_NORMS:
        raise ValueError(f"advantage normalisation {norm!r} is not one of {ADVANTAGE_NORMS}")
    mean = sum(rewards) / n
    if all(r == rewards[0] for r in rewards):
        return [0.0] * n
    centred = [r - mean for r in rewards]
    if norm == "none":
        return centred
    var = sum(c * c for c in centred) / (n if norm == "population_std" else n - 1)
    std = math.sqrt(var) if var > VARIANCE_FLOOR else 1.0
    return [c / std for c in centred]


def _clipped_share(
    trainer: list[list[float]], sampler: list[list[float]], settings: RLSettings, reduce: Reduce
) -> float:
    """Share of trained tokens whose ratio lies outside the loss's clip range: ``p/q`` per
    token, or under ``gspo`` the sequence's ratio (:func:`~.losses.policy_token_losses`)."""
    gspo = settings.loss_fn == "gspo"
    cfg = settings.loss_config
    lo = cfg.get("clip_low_threshold", GSPO_CLIP[0] if gspo else 0.8)
    hi = cfg.get("clip_high_threshold", GSPO_CLIP[1] if gspo else 1.2)
    out = total = 0
    for p, q in zip(trainer, sampler, strict=True):
        d = [a - b for a, b in zip(p, q, strict=True)]
        ratios = [math.exp(sum(d) / len(d))] * len(d) if gspo and d else [math.exp(x) for x in d]
        out += sum(not lo <= r <= hi for r in ratios)
        total += len(d)
    out, total = reduce.sums([out, total])
    return out / total if total else 0.0


def draw(
    sampler: Any,
    prompts: list[RLPrompt],
    settings: RLSettings,
    stop_ids: set[int],
    update: int,
    version: int,
    groups: list[int] | None = None,
) -> tuple[list[Sample], float]:
    """Step 1 of an update: ``samplesPerPrompt`` completions of each of ``prompts`` from
    ``sampler`` (the session, or the rollout side's copy of its model,
    :mod:`akka_optimize.engine.rl.offpolicy`), each tagged with the adapter ``version`` that
    drew it. Returns the samples and the seconds it took.

    The draws come from one generator seeded by ``(seed, update)`` that serves the groups
    in order; with ``settings.group_generators`` each group has its own, seeded by
    ``(seed, update, g)`` with ``g`` its index in the whole update (``groups``: the
    indices of ``prompts``; default 0, 1, …), so a group draws the same samples on
    whichever rank it is dealt to (:mod:`akka_optimize.engine.rl.ranks`)."""
    base = settings.seed * 1_000_003 + update
    if settings.group_generators:
        ids = groups if groups is not None else list(range(len(prompts)))
        gens = [torch.Generator().manual_seed(base * 65_537 + g) for g in ids]
    else:
        gens = [torch.Generator().manual_seed(base)] * len(prompts)
    t0 = time.perf_counter()
    samples = sample_rollouts(sampler, prompts, settings, stop_ids, gens, version)
    return samples, time.perf_counter() - t0


def rl_update(
    session: Any,
    prompts: list[RLPrompt],
    score: Callable[[list[RLPrompt], list[Sample]], None],
    settings: RLSettings,
    stop_ids: set[int],
    *,
    drawn: tuple[list[Sample], float] | None = None,
    reduce: Reduce = ONE_DEVICE,
) -> tuple[dict[str, Any], list[Sample]]:
    """One group-relative update over ``prompts`` (see the module docstring).

    Args:
        session: the training session (its adapter trains, and samples when on-policy).
        prompts: this update's prompts (``promptsPerStep`` of them, or a rank's share).
        score: fills ``reward`` (and ``error``) of every sample; called once per update
            with every sample, so a grader pool or a judge can batch them.
        settings: the loop's settings.
        stop_ids: tokens that end a completion.
        drawn: the update's samples and sampling seconds when they were drawn ahead
            (``maxStaleness`` > 0, :func:`draw`); None draws them now with the session's
            current weights (on-policy).
        reduce: on several ranks (each with its share of the update's groups), the sums
            and maxima over the ranks (:class:`~akka_optimize.engine.rl.gap.Reduce`): the
            aggregation's tokens and sequences and every metric are the whole update's.

    Returns:
        ``(metrics, samples)``: the supervised step metrics of ``optim_step`` under the
        same names (``loss`` is the aggregated policy loss, ``gradNorm``,
        ``gradClipFactor``, ``adapterNorm``, ``updateRatio``…), plus ``rewardMean``,
        ``rewardStd``, ``rewardMin``, ``rewardMax``, ``rewardErrors``,
        ``zeroAdvantageGroupShare``, ``clippedTokenShare``, the rollout–trainer gap of
        :func:`~akka_optimize.engine.rl.gap.gap_metrics` (``logprobDiffMean``,
        ``logprobDiffMax``, ``approxKl``, ``samplerKl``: ``p`` the trainer's log-probs in
        the update's forward pass, ``q`` the sampler's), the correction's
        ``correctedTokenShare`` and ``maskedSequenceShare``, ``completionLength``,
        ``samplingTokensPerSecond``, ``trainingTokensPerSecond``, ``weightVersion`` (the
        adapter version that sampled: the updates applied before it), ``staleness``
        (updates applied since that version), ``groupsLeftOut`` (the groups whose rewards
        were all equal, left out of the update), ``skipped`` (every group was left out:
        the update trained nothing and logs loss 0) and ``skipReason``
        (:data:`SKIP_REASON` on such an update, else None; TRL and veRL report skipped
        steps likewise).

    Raises:
        EngineError: a loss this loop does not train with; the session's own errors.
    """
    if settings.loss_fn not in POLICY_LOSSES:
        raise EngineError(f"rl_update trains with a policy loss, not {settings.loss_fn!r}.")
    if drawn is None:
        drawn = draw(session, prompts, settings, stop_ids, session.step + 1, session.step)
    samples, sampling_s = drawn
    version = min(s.weight_version for s in samples)
    sampled = sum(len(s.tokens) for s in samples)
    score(prompts, samples)
    zero = _assign_advantages(len(prompts), samples, settings.advantage_norm)
    signal = {s.group for s in samples if s.advantage != 0.0}
    trained = [s for s in samples if s.group in signal]
    metrics: dict[str, Any] = _reward_metrics(samples, zero, len(prompts), version, reduce)
    metrics["staleness"] = session.step - version
    metrics["samplingTokensPerSecond"] = sampled / sampling_s if sampling_s > 0 else 0.0
    tokens, seqs = reduce.sums([sum(len(s.tokens) for s in trained), len(trained)])
    if not seqs:
        metrics.update(session.skip_update(), skipped=True, clippedTokenShare=0.0)
        metrics.update(gap_metrics([], []), correctedTokenShare=0.0, maskedSequenceShare=0.0)
        metrics["skipReason"] = SKIP_REASON
        metrics["trainingTokensPerSecond"] = 0.0
        return metrics, samples
    t1 = time.perf_counter()
    metrics.update(_train(session, prompts, trained, settings, (int(tokens), int(seqs)), reduce))
    seconds = time.perf_counter() - t1
    metrics["trainingTokensPerSecond"] = metrics["totalTokens"] / seconds if seconds else 0.0
    return metrics, samples


def _train(
    session: Any,
    prompts: list[RLPrompt],
    trained: list[Sample],
    settings: RLSettings,
    whole: tuple[int, int],
    reduce: Reduce,
) -> dict[str, Any]:
    """Step 4 of an update over its ``trained`` samples (this rank's; ``whole``: the
    update's trained tokens and sequences over every rank): the rollout correction (its
    no-gradient forward pass first, when the correction or ``gspo`` needs the trainer's
    log-probs before the loss), the aggregation's weights, ``forward_backward`` and
    ``optim_step`` (a rank with nothing to train only joins its sums); returns their
    metrics with the gap's."""
    pack = bool(session._packed_attention)
    sampler = [list(s.logprobs) for s in trained]
    q_loss, keep, corrected = sampler, [1.0] * len(trained), {}
    extra: dict[str, list[list[float]]] = {}
    if settings.correction != "none" or settings.loss_fn == "gspo":
        passes, _ = rollout_passes(prompts, trained, pack=pack)
        before = per_sample(session.forward(passes).logprobs, passes)
        q_loss, keep, corrected = correct(
            before, sampler, settings.correction, settings.correction_cap, reduce
        )
        if settings.correction != "none":
            extra["sampling_logprobs"] = q_loss
        if settings.loss_fn == "gspo":
            extra["sequence_log_ratio"] = [
                [sum(a - b for a, b in zip(p, q, strict=True)) / len(q)] * len(q)
                for p, q in zip(before, q_loss, strict=True)
            ]
    lengths = [len(s.tokens) for s in trained]
    trainer: list[list[float]] = []
    if trained:  # a rank without trained samples adds nothing (a missing gradient is 0)
        agg = aggregation_weights(lengths, settings.aggregation, settings.max_new_tokens, *whole)
        extra["weights"] = [[w * k] * n for w, k, n in zip(agg, keep, lengths, strict=True)]
        passes, inputs = rollout_passes(prompts, trained, pack=pack, token_inputs=extra)
        fb = session.forward_backward(
            passes,
            WEIGHTED_PREFIX + settings.loss_fn,
            loss_inputs=inputs,
            loss_config=settings.loss_config,
        )
        trainer = per_sample(fb.logprobs, passes)
    metrics: dict[str, Any] = dict(session.optim_step())
    metrics.update(gap_metrics(trainer, sampler, reduce))
    if not corrected:  # the shares are sums over the ranks: every rank joins them
        corrected = correct(trainer, sampler, "none", 2.0, reduce)[2]
    metrics.update(corrected)
    clipped = _clipped_share(trainer, q_loss, settings, reduce)
    metrics.update(skipped=False, skipReason=None, clippedTokenShare=clipped)
    return metrics


SKIP_REASON = (
    "all advantages are zero: every group's rewards were equal, so no sample carried a "
    "signal and the update trained nothing (weights and optimizer state unchanged)"
)
"""``skipReason`` of an update where every group was left out (:func:`rl_update`)."""


def _assign_advantages(groups: int, samples: list[Sample], norm: str) -> int:
    """Set each sample's group-relative advantage (:func:`group_advantages`) and return
    how many groups have every advantage zero (equal rewards: no signal)."""
    zero = 0
    for g in range(groups):
        group = [s for s in samples if s.group == g]
        advantages = group_advantages([s.reward for s in group], norm)
        for s, a in zip(group, advantages, strict=True):
            s.advantage = a
        zero += all(s.advantage == 0.0 for s in group)
    return zero


def _reward_metrics(
    samples: list[Sample], zero: int, groups: int, version: int, reduce: Reduce
) -> dict[str, float | int]:
    """The reward side of an update's metrics over every rank's samples: mean,
    population std, min and max of the rewards, grader errors, the groups left out
    (``zero`` here of ``groups``) and their share, the mean completion length in tokens
    and the weight version that sampled them."""
    rewards = [s.reward for s in samples]
    total, n, errors, length, zero, groups = reduce.sums(
        [sum(rewards), len(rewards), sum(s.error is not None for s in samples),
         sum(len(s.tokens) for s in samples), zero, groups]
    )  # fmt: skip
    mean = total / n
    (squares,) = reduce.sums([sum((r - mean) ** 2 for r in rewards)])
    top, neg_low = reduce.maxes([max(rewards), -min(rewards)])
    return {
        "rewardMean": mean,
        "rewardStd": math.sqrt(squares / n),
        "rewardMin": -neg_low,
        "rewardMax": top,
        "rewardErrors": int(errors),
        "zeroAdvantageGroupShare": zero / groups,
        "groupsLeftOut": int(zero),
        "completionLength": length / n,
        "weightVersion": version,
    }
