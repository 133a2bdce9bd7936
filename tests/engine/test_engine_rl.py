"""The reinforcement loop on the engine (issue 18 item 1; DATA-AND-TRAINING-RULES.md rules
17–21): group-relative advantages, each policy loss against a hand computation, zero
gradient from a group with equal rewards, the sampler's log-probs against the trainer's,
a toy reward that the loop learns, and a bitwise resume."""

from __future__ import annotations

import math

import pytest
import torch
from engine_testkit import TINY_LLAMA, fp32_config

from akka_optimize.engine.rl.loop import (
    RLPrompt,
    RLSettings,
    Sample,
    group_advantages,
    rl_update,
    rollout_passes,
    sample_group,
)
from akka_optimize.engine.session.training import TrainingSession

PROMPT = [1, 2045, 314, 1930, 28, 17, 1789, 5]
TOY_PROMPT = [1, 45, 14, 190, 28, 17, 178, 5]
START = 0.3
"""The fixed token's probability at the start of the toy reward's run."""


def test_advantages_are_reward_minus_the_group_mean_over_its_std() -> None:
    """Rule 19 and seeds/004 §1.2 AT 7: population std by default; the sample std and no
    division are options (issue 52 item 5)."""
    third = math.sqrt(3)  # population std of [1, 0, 0, 0] is sqrt(3)/4
    assert group_advantages([1.0, 0.0, 0.0, 0.0]) == pytest.approx(
        [third, -1 / third, -1 / third, -1 / third]
    )
    assert group_advantages([1.0, 0.0, 0.0, 0.0]) == pytest.approx(
        [1.732, -0.577, -0.577, -0.577], abs=5e-4
    )
    assert group_advantages([1.0, 0.0, 0.0, 0.0], "sample_std") == pytest.approx(
        [1.5, -0.5, -0.5, -0.5]
    )
    assert group_advantages([1.0, 0.0, 0.0, 0.0], "none") == [0.75, -0.25, -0.25, -0.25]
    for norm in ("population_std", "sample_std", "none"):
        assert group_advantages([1.0, 1.0, 1.0, 1.0], norm) == [0.0] * 4
    # a variance at most 1e-8 divides by 1, not by a tiny std
    assert group_advantages([1e-5, 0.0], "population_std") == pytest.approx([5e-6, -5e-6])
    with pytest.raises(ValueError, match="at least 2"):
        group_advantages([1.0])
    with pytest.raises(ValueError, match="not one of"):
        group_advantages([1.0, 0.0], "std")


def _hand_loss(fn: str, p: list[float], q: list[float], a: list[float]) -> float:
    total = 0.0
    for lp, lq, adv in zip(p, q, a, strict=True):
        r = math.exp(lp - lq)
        if fn == "importance_sampling":
            total -= r * adv
        elif fn == "ppo":
            total -= min(r * adv, min(max(r, 0.8), 1.2) * adv)
        elif fn == "cispo":
            total -= min(max(r, 0.0), 1.28) * lp * adv
        else:  # dro, beta 0.05
            total -= lp * adv - 0.025 * (lp - lq) ** 2
    return total


@pytest.mark.parametrize("fn", ["importance_sampling", "ppo", "cispo", "dro"])
def test_each_policy_loss_of_a_hand_built_group_is_the_hand_computed_sum(
    tiny_model_dir, fn
) -> None:
    session = TrainingSession(tiny_model_dir, fp32_config())
    prompts = [RLPrompt(PROMPT)]
    completions = [[400, 401, 402], [500, 501], [600, 601, 602, 603]]
    samples = [Sample(0, toks, [0.0] * len(toks), 0) for toks in completions]
    passes, _ = rollout_passes(prompts, samples)
    trainer = session.forward(passes).logprobs
    shifts = [
        0.3,
        -0.25,
        0.05,
        0.0,
        -0.4,
        0.1,
        0.2,
        -0.05,
        0.35,
    ]  # ratios inside and outside the clips
    k, flat = len(PROMPT), iter(shifts)
    for s, adv, lp in zip(samples, group_advantages([1.0, 0.0, 0.5]), trainer, strict=True):
        s.advantage = adv
        s.logprobs = [float(lp[k + i]) - next(flat) for i in range(len(s.tokens))]
    passes, inputs = rollout_passes(prompts, samples)
    got = session.forward_backward(passes, fn, loss_inputs=inputs).loss_sum
    p = [
        float(lp[k + i])
        for s, lp in zip(samples, trainer, strict=True)
        for i in range(len(s.tokens))
    ]
    q = [x for s in samples for x in s.logprobs]
    a = [s.advantage for s in samples for _ in s.tokens]
    assert got == pytest.approx(_hand_loss(fn, p, q, a), rel=1e-5, abs=1e-6)


def _reward_first(token: int):
    def score(_prompts, samples):
        for s in samples:
            s.reward = float(bool(s.tokens) and s.tokens[0] == token)

    return score


def test_a_group_with_equal_rewards_is_left_out_and_an_update_without_signal_trains_nothing(
    tiny_model_dir,
) -> None:
    session = TrainingSession(tiny_model_dir, fp32_config())
    settings = RLSettings(samples_per_prompt=4, max_new_tokens=3, temperature=1.0)
    prompts = [RLPrompt(PROMPT), RLPrompt(PROMPT[:5])]

    def score(_prompts, samples):  # group 0 all 1.0; group 1 by position
        for i, s in enumerate(samples):
            s.reward = 1.0 if s.group == 0 else float(i % 2)

    m, samples = rl_update(session, prompts, score, settings, stop_ids={2})
    assert m["zeroAdvantageGroupShare"] == 0.5 and not m["skipped"]
    assert all(s.advantage == 0.0 for s in samples if s.group == 0)
    assert m["supervisedTokens"] == sum(len(s.tokens) for s in samples if s.group == 1)
    before = {n: p.detach().clone() for n, p in session.params.items()}
    m2, _ = rl_update(session, prompts, lambda _p, ss: None, settings, stop_ids={2})
    assert m2["skipped"] and m2["zeroAdvantageGroupShare"] == 1.0 and m2["step"] == 2
    assert all(torch.equal(before[n], p) for n, p in session.params.items())  # nothing moved
    assert session.step == 2


def test_the_samplers_logprobs_are_the_trainers_and_the_weight_version_counts_updates(
    tiny_model_dir,
) -> None:
    session = TrainingSession(tiny_model_dir, fp32_config(learning_rate=5e-3))
    settings = RLSettings(samples_per_prompt=4, max_new_tokens=5, temperature=1.0, seed=3)
    prompts = [RLPrompt(PROMPT), RLPrompt(PROMPT[2:])]

    def score(_prompts, samples):
        for i, s in enumerate(samples):
            s.reward = float(i % 3 == 0)

    for update in range(1, 4):
        m, samples = rl_update(session, prompts, score, settings, stop_ids={2})
        assert m["weightVersion"] == update - 1 and {s.weight_version for s in samples} == {
            update - 1
        }
        # the next update's sampler uses the weights after this one's optim_step
        fresh = sample_group(session, PROMPT, 3, 5, 1.0, {2}, torch.Generator().manual_seed(update))
        got = [Sample(0, toks, lps, session.step) for toks, lps in fresh]
        passes, _ = rollout_passes([RLPrompt(PROMPT)], got)
        trainer = session.forward(passes).logprobs
        k = len(PROMPT)
        for s, lp in zip(got, trainer, strict=True):
            assert [float(lp[k + i]) for i in range(len(s.tokens))] == pytest.approx(
                s.logprobs, abs=1e-4
            )


def _toy_model(dest):
    """A random Llama of 256 tokens with an untied output head, its final norm's weight
    scaled so that the prompt's most likely first token has probability :data:`START`;
    returns the folder and that token.

    Not the tiny test model: its tied embeddings make it predict the prompt's last token,
    and a bounded final hidden state caps how sharp LoRA can make it (0.7 at most from
    0.2), so no loop could reach 0.9 on it. Scaling the final norm scales every logit."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, tie_word_embeddings=False, **TINY_LLAMA)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([TOY_PROMPT])).logits[0, -1].float()
    token = int(logits.argmax())
    lo, hi = 1.0, 1000.0
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        p = float(torch.softmax(logits * mid, -1)[token])
        lo, hi = (lo, mid) if p > START else (mid, hi)
    with torch.no_grad():
        model.model.norm.weight.mul_(lo)
    model.save_pretrained(dest)
    return dest, token


def test_a_toy_reward_rises_from_its_start_to_at_least_0_9(tmp_path) -> None:
    """Reward 1 when the completion starts with a fixed token (probability 0.3 at the
    start), else 0: the mean reward of an update rises from its start to at least 0.9
    for three updates in a row, within 20 updates."""
    folder, token = _toy_model(tmp_path / "toy")
    session = TrainingSession(folder, fp32_config(learning_rate=1e-2))
    passes, _ = rollout_passes([RLPrompt(TOY_PROMPT)], [Sample(0, [token], [0.0], 0)])
    start = math.exp(float(session.forward(passes).logprobs[0][len(TOY_PROMPT)]))
    assert start == pytest.approx(START, abs=1e-3)
    settings = RLSettings(samples_per_prompt=8, max_new_tokens=2, temperature=1.0, seed=1)
    prompts = [RLPrompt(TOY_PROMPT), RLPrompt(TOY_PROMPT)]
    means = []
    for _ in range(20):
        m, _samples = rl_update(session, prompts, _reward_first(token), settings, stop_ids=set())
        means.append(m["rewardMean"])
        if len(means) >= 3 and min(means[-3:]) >= 0.9:
            break
    assert means[0] <= 0.5, means
    assert min(means[-3:]) >= 0.9, means
    after = math.exp(float(session.forward(passes).logprobs[0][len(TOY_PROMPT)]))
    assert after > 0.9, after  # the policy itself, not only its samples


def test_a_resumed_loop_draws_and_trains_exactly_as_an_uninterrupted_one(
    tiny_model_dir, tmp_path
) -> None:
    settings = RLSettings(
        samples_per_prompt=4, max_new_tokens=4, temperature=1.0, seed=5, loss_fn="ppo"
    )
    prompts = [RLPrompt(PROMPT), RLPrompt(PROMPT[1:])]

    def score(_p, samples):
        for s in samples:
            s.reward = sum(s.tokens) % 7 / 7

    def run(session, n):
        return [rl_update(session, prompts, score, settings, stop_ids={2}) for _ in range(n)]

    whole = run(TrainingSession(tiny_model_dir, fp32_config(learning_rate=1e-2)), 5)
    first = TrainingSession(tiny_model_dir, fp32_config(learning_rate=1e-2))
    run(first, 3)
    first.save_state(tmp_path / "state")
    second = TrainingSession(tiny_model_dir, fp32_config(learning_rate=1e-2))
    second.load_state(tmp_path / "state")
    rest = run(second, 2)
    for (m_a, s_a), (m_b, s_b) in zip(whole[3:], rest, strict=True):
        assert [s.tokens for s in s_a] == [s.tokens for s in s_b]
        assert [s.logprobs for s in s_a] == [s.logprobs for s in s_b]
        assert m_a["loss"] == m_b["loss"] and m_a["gradNorm"] == m_b["gradNorm"]


def test_a_groups_samples_packed_in_one_pass_score_as_they_do_alone(tiny_model_dir) -> None:
    """With packed attention the update trains each group as one pass; every sample's
    loss and log-probs equal its own pass's (no attention across samples)."""
    session = TrainingSession(tiny_model_dir, fp32_config())
    assert session._packed_attention
    prompts = [RLPrompt(PROMPT), RLPrompt(PROMPT[3:])]
    samples = [
        Sample(0, [400, 401, 402], [-9.0, -9.5, -10.0], 0, advantage=1.0),
        Sample(0, [500, 501], [-9.0, -9.2], 0, advantage=-1.0),
        Sample(1, [600, 601, 602, 603], [-8.0, -9.0, -10.0, -11.0], 0, advantage=0.5),
    ]
    alone, a_in = rollout_passes(prompts, samples)
    packed, p_in = rollout_passes(prompts, samples, pack=True)
    assert (
        len(alone) == 3
        and len(packed) == 2
        and packed[0].cu_seqlens[-1] == (alone[0].num_tokens + alone[1].num_tokens)
    )
    one = session.forward(alone, "ppo", loss_inputs=a_in)
    two = session.forward(packed, "ppo", loss_inputs=p_in)
    assert two.loss_sum == pytest.approx(one.loss_sum, rel=1e-5)
    flat_one = torch.cat(one.logprobs[:2]).tolist() + one.logprobs[2].tolist()
    flat_two = torch.cat(two.logprobs).tolist()
    assert flat_two == pytest.approx(flat_one, abs=1e-5)


def _sampler_passes(session, seen: list, monkeypatch):
    """Record ``(rows, tokens)`` of each of the sampler's passes in ``seen``: the model's
    forward passes with a KV cache (the prompt) and the lean decoding steps (one token per
    row, :class:`~akka_optimize.engine.lean_decode.LeanDecoder`). Returns the forward hook
    (remove it when done)."""
    from akka_optimize.engine.lean_decode import LeanDecoder

    step = LeanDecoder.step

    def lean_step(self, ids, *a, **kw):
        seen.append((*tuple(ids.shape), "lean"))
        return step(self, ids, *a, **kw)

    monkeypatch.setattr(LeanDecoder, "step", lean_step)
    return session.model.register_forward_pre_hook(
        lambda _m, _a, kw: (
            seen.append(tuple(kw["input_ids"].shape)) if kw.get("use_cache") else None
        ),
        with_kwargs=True,
    )


def test_the_rollout_settings_bound_each_forward_pass_and_keep_the_logprobs(
    tiny_model_dir, monkeypatch
) -> None:
    """``rollout.max_num_seqs``, ``max_num_batched_tokens`` and ``enable_prefix_caching``
    take effect: no sampler forward pass reads more rows or tokens than they allow, a long
    prompt is read in pieces, and the sampled log-probs are still the trainer's."""
    session = TrainingSession(tiny_model_dir, fp32_config())
    seen: list[tuple[int, int]] = []
    hook = _sampler_passes(session, seen, monkeypatch)

    def score(_prompts, samples):  # equal rewards: no update, so the weights stay the sampler's
        for s in samples:
            s.reward = 1.0

    prompts = [RLPrompt(PROMPT), RLPrompt(PROMPT[2:])]
    cases = (  # (settings, most rows in a pass, most tokens in a pass, prompt reads)
        (dict(max_num_seqs=2, max_num_batched_tokens=8192), 2, len(PROMPT), 1),
        (dict(max_num_seqs=8, max_num_batched_tokens=3), 3, 3, 1),
        (dict(max_num_seqs=4, max_num_batched_tokens=8192, prefix_caching=False), 4, 32, 4),
    )
    try:
        for extra, rows, tokens, reads in cases:
            settings = RLSettings(samples_per_prompt=4, max_new_tokens=3, seed=5, **extra)
            seen.clear()
            _m, samples = rl_update(session, prompts, score, settings, stop_ids=set())
            sampler = list(seen)
            assert max(p[0] for p in sampler) == rows, (extra, sampler)
            assert max(p[0] * p[1] for p in sampler) <= tokens, (extra, sampler)
            assert sampler[0][0] == reads  # the first prompt's first piece: 1 row or every row
            assert sum(p[-1] == "lean" for p in sampler) > 0  # the steps after the prompt
            passes, _ = rollout_passes(prompts, samples)
            trainer = session.forward(passes).logprobs
            for s, lp in zip(samples, trainer, strict=True):
                k = len(prompts[s.group].prompt_ids)
                got = [float(lp[k + i]) for i in range(len(s.tokens))]
                assert got == pytest.approx(s.logprobs, abs=1e-4), extra
    finally:
        hook.remove()


def _cache_bytes(cache) -> int:
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return sum(x.keys.nbytes + x.values.nbytes for x in layers)
    return sum(k.nbytes + v.nbytes for k, v in zip(cache.key_cache, cache.value_cache, strict=True))


def test_the_memory_share_bounds_the_rows_the_sampler_decodes_at_once(
    tiny_model_dir, monkeypatch
) -> None:
    """``execution.rollout.memoryShare`` takes effect as the sampler's KV-cache budget: the
    bytes per token are the model's own cache's, a group is decoded in batches of the rows
    that fit, and a budget below one row is refused naming memoryShare."""
    from akka_optimize.engine.errors import EngineError
    from akka_optimize.engine.rl.loop import kv_bytes_per_token, rows_that_fit
    from akka_optimize.engine.sampling import kv_cache

    session = TrainingSession(tiny_model_dir, fp32_config())
    per = kv_bytes_per_token(session.model.config, torch.float32)
    with torch.no_grad():
        out = session.model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)
    assert _cache_bytes(next(iter(kv_cache(out).values()))) == 3 * per  # the real cache

    budget = per * (len(PROMPT) + 3) * 2  # two rows of the longer prompt fit
    settings = RLSettings(samples_per_prompt=4, max_new_tokens=3, seed=5, kv_cache_bytes=budget)
    assert rows_that_fit(settings, per, len(PROMPT)) == 2
    assert rows_that_fit(settings, per, 1) == budget // (per * 4)  # a short prompt: more fit
    seen: list[tuple] = []
    hook = _sampler_passes(session, seen, monkeypatch)
    try:
        rl_update(session, [RLPrompt(PROMPT)], lambda _p, ss: None, settings, stop_ids=set())
    finally:
        hook.remove()
    assert max(p[0] for p in seen) == 2
    with pytest.raises(EngineError, match="memoryShare leaves"):
        rows_that_fit(RLSettings(samples_per_prompt=4, max_new_tokens=3, kv_cache_bytes=per),
                      per, len(PROMPT))  # fmt: skip


def test_a_run_whose_last_update_trains_nothing_reports_that_update_as_its_final_loss(
    tiny_model_dir, tmp_path
) -> None:
    """seeds/000 "A completed run's finalLoss is the last loss the training loop logged.
    The mean over the run is reported beside it as meanLoss" (issue 47 break 8): update 3
    has equal rewards in every group, so it trains nothing and logs loss 0; finalLoss is
    that row's loss, meanLoss the mean over every row, and the row says why it trained
    nothing and how many groups it left out."""
    from akka_optimize.engine.rl.loop import run_rl

    settings = RLSettings(samples_per_prompt=4, max_new_tokens=3, temperature=1.0, seed=3)
    prompts = [RLPrompt(PROMPT), RLPrompt(PROMPT[:5])]
    events: list[dict] = []
    calls: list[int] = []

    def score(_prompts, samples):  # a signal in updates 1 and 2; none in update 3
        calls.append(1)
        for i, s in enumerate(samples):
            s.reward = 0.0 if len(calls) == 3 else float(i % 2)

    result = run_rl(
        fp32_config(),
        settings,
        tiny_model_dir,
        prompts,
        steps=3,
        prompts_per_step=2,
        score=score,
        stop_ids={2},
        state_dir=tmp_path / "state",
        emit=events.append,
    )
    rows = [e for e in events if e["type"] == "metrics"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["skipped"] for r in rows] == [False, False, True]
    assert rows[0]["loss"] != 0.0 and rows[2]["loss"] == 0.0
    assert result.final_loss == rows[-1]["loss"]
    assert result.mean_loss == pytest.approx(sum(r["loss"] for r in rows) / 3)
    assert rows[2]["skipReason"].startswith("all advantages are zero")
    assert [r["groupsLeftOut"] for r in rows] == [0, 0, 2]
    assert rows[0]["skipReason"] is None
