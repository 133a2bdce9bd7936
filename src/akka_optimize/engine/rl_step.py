"""One group-relative update (:func:`rl_update`; steps 1–4 of :mod:`akka_optimize.engine.rl`):
sample, score, group-relative advantages (:func:`group_advantages`), then train on the
groups that carry a signal, with the update's reward and policy metrics.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from ..data.types import Pass
from .errors import EngineError
from .rl_settings import RLPrompt, RLSettings, Sample
from .rollout import _sample_rollouts, rollout_passes


def group_advantages(rewards: list[float], scale_by_std: bool = True) -> list[float]:
    """Group-relative advantages: ``r − mean(r)``, over the sample standard deviation
    when ``scale_by_std``; all 0 when every reward is equal (module docstring, step 3).

    Raises:
        ValueError: fewer than two rewards (a group needs two to compare).
    """
    n = len(rewards)
    if n < 2:
        raise ValueError(f"a group needs at least 2 samples, not {n}")
    mean = sum(rewards) / n
    if all(r == rewards[0] for r in rewards):
        return [0.0] * n
    centred = [r - mean for r in rewards]
    if not scale_by_std:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / (n - 1))
    return [c / std for c in centred]


def _clipped_share(
    trainer: list[torch.Tensor], inputs: list[dict[str, list[float]]], passes: list[Pass], cfg: dict
) -> float:
    """Share of trained tokens whose ratio ``p/q`` lies outside the clip range."""
    lo, hi = cfg.get("clip_low_threshold", 0.8), cfg.get("clip_high_threshold", 1.2)
    out = total = 0
    for lp, inp, p in zip(trainer, inputs, passes, strict=True):
        for t, w in enumerate(p.weights):
            if w:
                r = math.exp(float(lp[t]) - inp["sampling_logprobs"][t])
                out += not lo <= r <= hi
                total += 1
    return out / total if total else 0.0


def rl_update(
    session: Any,
    prompts: list[RLPrompt],
    score: Callable[[list[RLPrompt], list[Sample]], None],
    settings: RLSettings,
    stop_ids: set[int],
) -> tuple[dict[str, float | int], list[Sample]]:
    """One group-relative update over ``prompts`` (see the module docstring).

    Args:
        session: the training session (its adapter samples and trains).
        prompts: this update's prompts (``promptsPerStep`` of them).
        score: fills ``reward`` (and ``error``) of every sample; called once per update
            with every sample, so a grader pool or a judge can batch them.
        settings: the loop's settings.
        stop_ids: tokens that end a completion.

    Returns:
        ``(metrics, samples)``: the supervised step metrics of ``optim_step`` under the
        same names (``loss`` is the policy loss per trained token, ``gradNorm``,
        ``gradClipFactor``, ``adapterNorm``, ``updateRatio``…), plus ``rewardMean``,
        ``rewardStd``, ``rewardMin``, ``rewardMax``, ``rewardErrors``,
        ``zeroAdvantageGroupShare``, ``clippedTokenShare``, ``approxKl`` (mean of
        ``log q − log p`` over trained tokens, with ``p`` the trainer's log-probs in the
        update's forward pass), ``completionLength``, ``samplingTokensPerSecond``,
        ``trainingTokensPerSecond``, ``weightVersion`` (before the update), ``groupsLeftOut``
        (the groups whose rewards were all equal, left out of the update), ``skipped``
        (every group was left out: the update trained nothing and logs loss 0) and
        ``skipReason`` (:data:`SKIP_REASON` on such an update, else None; TRL and veRL
        report skipped steps likewise).

    Raises:
        EngineError: a loss this loop does not train with; the session's own errors.
    """
    if settings.loss_fn not in ("importance_sampling", "ppo", "cispo", "dro"):
        raise EngineError(f"rl_update trains with a policy loss, not {settings.loss_fn!r}.")
    update = session.step + 1
    gen = torch.Generator().manual_seed(settings.seed * 1_000_003 + update)
    version = session.step
    t0 = time.perf_counter()
    samples = _sample_rollouts(session, prompts, settings, stop_ids, gen, version)
    sampled = sum(len(s.tokens) for s in samples)
    sampling_s = time.perf_counter() - t0
    score(prompts, samples)
    zero = _assign_advantages(len(prompts), samples, settings.scale_by_std)
    signal = {s.group for s in samples if s.advantage != 0.0}
    trained = [s for s in samples if s.group in signal]
    metrics = _reward_metrics(samples, zero / len(prompts), version)
    metrics["groupsLeftOut"] = zero
    metrics["samplingTokensPerSecond"] = sampled / sampling_s if sampling_s > 0 else 0.0
    t1 = time.perf_counter()
    if not trained:
        metrics.update(session.skip_update(), skipped=True, clippedTokenShare=0.0, approxKl=0.0)
        metrics["skipReason"] = SKIP_REASON
        metrics["trainingTokensPerSecond"] = 0.0
        return metrics, samples
    passes, inputs = rollout_passes(prompts, trained, pack=bool(session._packed_attention))
    fb = session.forward_backward(
        passes, settings.loss_fn, loss_inputs=inputs, loss_config=settings.loss_config
    )
    kl = [
        inp["sampling_logprobs"][t] - float(lp[t])
        for lp, inp, p in zip(fb.logprobs, inputs, passes, strict=True)
        for t, w in enumerate(p.weights)
        if w
    ]
    clipped = _clipped_share(fb.logprobs, inputs, passes, settings.loss_config)
    metrics.update(session.optim_step())
    seconds = time.perf_counter() - t1
    metrics.update(
        skipped=False,
        skipReason=None,
        clippedTokenShare=clipped,
        approxKl=sum(kl) / len(kl),
        trainingTokensPerSecond=sum(p.num_tokens for p in passes) / seconds if seconds else 0.0,
    )
    return metrics, samples


SKIP_REASON = (
    "all advantages are zero: every group's rewards were equal, so no sample carried a "
    "signal and the update trained nothing (weights and optimizer state unchanged)"
)
"""``skipReason`` of an update where every group was left out (:func:`rl_update`)."""


def _assign_advantages(groups: int, samples: list[Sample], scale_by_std: bool) -> int:
    """Set each sample's group-relative advantage (:func:`group_advantages`) and return
    how many groups have every advantage zero (equal rewards: no signal)."""
    zero = 0
    for g in range(groups):
        group = [s for s in samples if s.group == g]
        advantages = group_advantages([s.reward for s in group], scale_by_std)
        for s, a in zip(group, advantages, strict=True):
            s.advantage = a
        zero += all(s.advantage == 0.0 for s in group)
    return zero


def _reward_metrics(
    samples: list[Sample], zero_share: float, version: int
) -> dict[str, float | int]:
    """The reward side of an update's metrics: mean, population std, min and max of the
    rewards, grader errors, the share of zero-advantage groups, the mean completion
    length in tokens and the weight version that sampled them."""
    rewards = [s.reward for s in samples]
    mean = sum(rewards) / len(rewards)
    return {
        "rewardMean": mean,
        "rewardStd": math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)),
        "rewardMin": min(rewards),
        "rewardMax": max(rewards),
        "rewardErrors": sum(s.error is not None for s in samples),
        "zeroAdvantageGroupShare": zero_share,
        "completionLength": sum(len(s.tokens) for s in samples) / len(samples),
        "weightVersion": version,
    }
