"""The reinforcement loop's losses by name, their aggregation and the rollout–trainer gap
(issue 52 items 4 and 2): each loss's per-token terms against a hand computation, gspo's
sequence ratio, the three aggregations on a case where they differ, and the gap's metrics
and corrections on samples whose sampler log-probs are shifted by known amounts."""

from __future__ import annotations

import math

import pytest
import torch
from engine_testkit import fp32_config

from akka_optimize.engine import losses as L
from akka_optimize.engine.rl.gap import correct, gap_metrics
from akka_optimize.engine.rl.loop import RLPrompt, RLSettings, Sample, rl_update, rollout_passes
from akka_optimize.engine.session.training import TrainingSession

PROMPT = [1, 2045, 314, 1930, 28, 17, 1789, 5]


def _inputs(q: list[float], a: list[float], **more: list[float]) -> dict[str, torch.Tensor]:
    out = {"sampling_logprobs": torch.tensor(q, dtype=torch.float64)}
    out["advantages"] = torch.tensor(a, dtype=torch.float64)
    out.update({k: torch.tensor(v, dtype=torch.float64) for k, v in more.items()})
    return out


@pytest.mark.parametrize("name", ["importance_sampling", "ppo", "cispo", "dro"])
def test_each_weighted_policy_loss_with_weight_1_is_the_engines_loss_sum(name) -> None:
    p = torch.tensor([-1.0, -2.0, -0.5, -3.0], dtype=torch.float64)
    inputs = _inputs([-1.3, -1.7, -0.45, -3.5], [1.0, -1.0, 0.5, -0.5], weights=[1.0] * 4)
    old = L.LOSSES[name](p, inputs, {})
    new = L.LOSSES["rl:" + name](p, inputs, {})
    assert float(new) == float(old)  # bitwise: a run that does not change keeps its numbers
    half = L.LOSSES["rl:" + name](p, {**inputs, "weights": torch.full((4,), 0.5).double()}, {})
    assert float(half) == pytest.approx(float(old) / 2)


def test_gspo_gives_every_token_its_sequences_ratio_clipped_as_one() -> None:
    """GSPO-token (arXiv:2507.18071; Tinker's gspo): sequence A's mean log-ratio is
    (0.0002 + 0.0004)/2 = 3e-4, inside [1 − 3e-4, 1 + 4e-4]; sequence B's is 0.01,
    outside: with a positive advantage its tokens' loss is the clipped ratio, with no
    gradient."""
    p = torch.tensor([-1.0, -2.0, -0.5, -3.0], dtype=torch.float64, requires_grad=True)
    q = [-1.0002, -2.0004, -0.51, -3.01]
    s_a, s_b = math.exp(3e-4), math.exp(0.01)
    inputs = _inputs(q, [2.0, 2.0, 1.0, 1.0], sequence_log_ratio=[3e-4, 3e-4, 0.01, 0.01])
    terms = L.policy_token_losses("gspo", p, inputs, {})
    assert terms.tolist() == pytest.approx([-2 * s_a, -2 * s_a, -(1 + 4e-4), -(1 + 4e-4)])
    terms.sum().backward()
    # d/dp of −s·A·exp(p − sg p) is −s·A; the clipped sequence gives 0
    assert p.grad.tolist() == pytest.approx([-2 * s_a, -2 * s_a, 0.0, 0.0])
    assert s_b > L.GSPO_CLIP[1]
    with pytest.raises(KeyError, match="not a policy loss"):
        L.policy_token_losses("grpo", p, inputs, {})


def test_the_aggregation_weights_are_the_hand_computed_ones() -> None:
    # sequences of 1 and 3 tokens: T = 4, S = 2, constant C = 4
    assert L.aggregation_weights([1, 3], "token_mean", 4) == [1.0, 1.0]
    assert L.aggregation_weights([1, 3], "sequence_mean", 4) == pytest.approx([2.0, 2 / 3])
    assert L.aggregation_weights([1, 3], "dr_grpo", 4) == [0.5, 0.5]
    # several ranks: the whole update's tokens and sequences (here 8 and 4)
    assert L.aggregation_weights([1, 3], "sequence_mean", 4, 8, 4) == pytest.approx([2.0, 2 / 3])
    with pytest.raises(ValueError, match="not one of"):
        L.aggregation_weights([1, 3], "seq_mean", 4)


def _drawn(session, shifts: list[list[float]], completions: list[list[int]], version: int = 0):
    """Samples of one group with the given completions whose sampler log-probs are the
    trainer's minus ``shifts`` (so ``log p − log q`` is the shift)."""
    samples = [Sample(0, toks, [0.0] * len(toks), version) for toks in completions]
    passes, _ = rollout_passes([RLPrompt(PROMPT)], samples)
    trainer = session.forward(passes).logprobs
    k = len(PROMPT)
    for s, lp, d in zip(samples, trainer, shifts, strict=True):
        s.logprobs = [float(lp[k + i]) - d[i] for i in range(len(s.tokens))]
    return samples, 1.0


def _first_wins(_prompts, samples) -> None:
    for i, s in enumerate(samples):
        s.reward = 1.0 if i == 0 else 0.0


@pytest.mark.parametrize(
    ("mode", "loss"),
    # sample 1: 1 token, advantage +1; sample 2: 3 tokens, advantage −1; ratio 1:
    # token terms [−1] and [1, 1, 1]
    [("token_mean", 2 / 4), ("sequence_mean", (-1 + 1) / 2), ("dr_grpo", (-1 / 4 + 3 / 4) / 2)],
)
def test_each_aggregation_gives_its_hand_computed_loss(tiny_model_dir, mode, loss) -> None:
    session = TrainingSession(tiny_model_dir, fp32_config())
    drawn = _drawn(session, [[0.0], [0.0, 0.0, 0.0]], [[400], [500, 501, 502]])
    settings = RLSettings(samples_per_prompt=2, max_new_tokens=4, aggregation=mode)
    m, samples = rl_update(session, [RLPrompt(PROMPT)], _first_wins, settings, set(), drawn=drawn)
    assert [s.advantage for s in samples] == [1.0, -1.0]  # population std of [1, 0] is 0.5
    assert m["loss"] == pytest.approx(loss, abs=1e-5)
    assert m["supervisedTokens"] == 4 and m["staleness"] == 0


SHIFTS = [[0.5, -0.25], [1.5, 0.0, -0.1]]
"""log p − log q of each token of two samples (a gap the losses must see)."""


@pytest.mark.parametrize("correction", ["none", "truncated_is", "sequence_mask"])
def test_the_gap_is_logged_and_each_correction_gives_its_hand_computed_loss(
    tiny_model_dir, correction
) -> None:
    """importance_sampling, token mean, cap 2: ratios e^0.5, e^−0.25 (advantage +1) and
    e^1.5, 1, e^−0.1 (advantage −1). truncated_is caps e^1.5 to 2; sequence_mask drops
    sample 2, whose sequence ratio e^1.4 leaves [1/2, 2]."""
    session = TrainingSession(tiny_model_dir, fp32_config())
    drawn = _drawn(session, SHIFTS, [[400, 401], [500, 501, 502]])
    settings = RLSettings(
        samples_per_prompt=2, max_new_tokens=4, correction=correction, correction_cap=2.0
    )
    m, _ = rl_update(session, [RLPrompt(PROMPT)], _first_wins, settings, set(), drawn=drawn)
    first = -(math.exp(0.5) + math.exp(-0.25))
    second = {
        "none": math.exp(1.5) + 1 + math.exp(-0.1),
        "truncated_is": 2 + 1 + math.exp(-0.1),
        "sequence_mask": 0.0,
    }[correction]
    assert m["loss"] == pytest.approx((first + second) / 5, abs=1e-5)
    flat = [d for s in SHIFTS for d in s]
    assert m["logprobDiffMean"] == pytest.approx(sum(map(abs, flat)) / 5, abs=1e-5)
    assert m["logprobDiffMax"] == pytest.approx(1.5, abs=1e-5)
    assert m["approxKl"] == pytest.approx(-sum(flat) / 5, abs=1e-5)
    assert m["samplerKl"] == pytest.approx(sum(math.expm1(d) - d for d in flat) / 5, abs=1e-5)
    assert m["correctedTokenShare"] == (0.2 if correction == "truncated_is" else 0.0)
    assert m["maskedSequenceShare"] == (0.5 if correction == "sequence_mask" else 0.0)


def test_gspo_trains_through_the_loop_with_its_sequence_ratio(tiny_model_dir) -> None:
    """Through :func:`rl_update`: sample 1's sequence ratio e^0.125 leaves GSPO's clip range
    with advantage +1, so its loss is the clipped 1.0004 per token; sample 2's e^0.02 is
    outside with advantage −1 and the unclipped ratio is the larger loss."""
    session = TrainingSession(tiny_model_dir, fp32_config())
    drawn = _drawn(session, [[0.5, -0.25], [0.06, 0.0, 0.0]], [[400, 401], [500, 501, 502]])
    settings = RLSettings(samples_per_prompt=2, max_new_tokens=4, loss_fn="gspo")
    m, _ = rl_update(session, [RLPrompt(PROMPT)], _first_wins, settings, set(), drawn=drawn)
    expected = (-2 * (1 + 4e-4) + 3 * math.exp(0.02)) / 5
    assert m["loss"] == pytest.approx(expected, abs=1e-5)
    assert m["clippedTokenShare"] == 1.0  # both sequences' ratios are outside the range


def test_the_corrections_pure_arithmetic() -> None:
    p, q = [[0.0, 0.0]], [[-1.0, 0.2]]
    lifted, keep, m = correct(p, q, "truncated_is", math.e**0.5)
    assert lifted == [[-0.5, 0.2]] and keep == [1.0] and m["correctedTokenShare"] == 0.5
    assert correct(p, q, "sequence_mask", 2.0)[1] == [0.0]  # ratio e^0.8 > 2
    assert correct(p, q, "sequence_mask", 3.0)[1] == [1.0]
    assert gap_metrics([], [])["logprobDiffMax"] == 0.0
    with pytest.raises(ValueError, match="above 1"):
        correct(p, q, "truncated_is", 1.0)
