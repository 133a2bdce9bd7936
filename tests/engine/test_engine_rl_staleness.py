"""Off-policy rollouts with a staleness bound (issue 52 item 3): the rollout side samples
each update with the adapter version the bound names, its weights follow the trainer's
after every update, each sample records its version, and ``maxStaleness: 0`` is the
on-policy loop exactly."""

from __future__ import annotations

import pytest
import torch
from engine_testkit import fp32_config

from akka_optimize.engine.losses import LOSSES
from akka_optimize.engine.rl.loop import (
    RLPrompt,
    RLSettings,
    group_advantages,
    rl_update,
    rollout_passes,
    run_rl,
    update_prompts,
)
from akka_optimize.engine.rl.offpolicy import RolloutSide, rollout_version
from akka_optimize.engine.rollout import per_sample, sample_rollouts
from akka_optimize.engine.session.training import TrainingSession

PROMPTS = [RLPrompt([1, 2045, 314, 1930, 28, 17, 1789, 5]), RLPrompt([1, 45, 14, 190, 28])]


def _score(_prompts, samples) -> None:
    for s in samples:
        s.reward = sum(s.tokens) % 5 / 5


def test_the_version_that_samples_each_update_lags_by_at_most_the_bound() -> None:
    assert [rollout_version(u, 0, 0) for u in range(1, 5)] == [0, 1, 2, 3]
    assert [rollout_version(u, 1, 0) for u in range(1, 5)] == [0, 0, 1, 2]
    assert [rollout_version(u, 2, 0) for u in range(1, 6)] == [0, 0, 0, 1, 2]
    assert [rollout_version(u, 2, 3) for u in range(4, 7)] == [3, 3, 3]  # a resume at 3


def test_the_rollout_sides_weights_follow_the_trainer_after_every_update(tiny_model_dir) -> None:
    """maxStaleness 1 over 5 updates: update u is drawn by version max(0, u − 2); each
    sample's sampler log-probs are the trainer's own log-probs under that version's
    adapter (so the rollout side held exactly those weights), versions increment after
    the second update, and the samples of successive versions differ."""
    session = TrainingSession(tiny_model_dir, fp32_config(learning_rate=2e-2))
    settings = RLSettings(samples_per_prompt=3, max_new_tokens=4, seed=7, max_staleness=1)
    versions = {0: {n: p.detach().clone() for n, p in session.params.items()}}

    def prompts_for(u: int) -> list[RLPrompt]:
        return update_prompts(PROMPTS, u, 2)

    side = RolloutSide(session, settings, prompts_for, set(), 5)
    drawn_versions, tokens = [], []
    try:
        for u in range(1, 6):
            samples, seconds = side.take(u)
            assert seconds > 0
            (version,) = {s.weight_version for s in samples}
            drawn_versions.append(version)
            tokens.append([s.tokens for s in samples])
            now = {n: p.detach().clone() for n, p in session.params.items()}
            with torch.no_grad():  # the trainer under the version that drew them
                for n, p in session.params.items():
                    p.copy_(versions[version][n])
                passes, _ = rollout_passes(prompts_for(u), samples)
                trainer = per_sample(session.forward(passes).logprobs, passes)
                for n, p in session.params.items():
                    p.copy_(now[n])
            for s, lp in zip(samples, trainer, strict=True):
                assert lp == pytest.approx(s.logprobs, abs=1e-4)
            m, _ = rl_update(session, prompts_for(u), _score, settings, set(), drawn=(samples, 1))
            assert m["weightVersion"] == version and m["staleness"] == u - 1 - version
            assert not m["skipped"]
            side.publish(session)
            versions[session.step] = {n: p.detach().clone() for n, p in session.params.items()}
            assert not all(torch.equal(versions[u][n], versions[u - 1][n]) for n in now)
    finally:
        side.close()
    assert drawn_versions == [0, 0, 1, 2, 3]
    assert tokens[2] != tokens[0] and tokens[3] != tokens[1]  # same prompts, newer weights


def _today(session: TrainingSession, settings: RLSettings, steps: int) -> list[float]:
    """The on-policy loop as it was before maxStaleness: draw with the session, score,
    group advantages, the engine's own loss (unweighted) over the signal groups,
    optim_step. Returns each update's loss."""
    losses = []
    for u in range(1, steps + 1):
        batch = update_prompts(PROMPTS, u, 2)
        gen = torch.Generator().manual_seed(settings.seed * 1_000_003 + u)
        samples = sample_rollouts(session, batch, settings, set(), [gen] * 2, session.step)
        _score(batch, samples)
        for g in range(len(batch)):
            group = [s for s in samples if s.group == g]
            for s, a in zip(group, group_advantages([s.reward for s in group]), strict=True):
                s.advantage = a
        trained = [s for s in samples if any(x.advantage for x in samples if x.group == s.group)]
        passes, inputs = rollout_passes(batch, trained, pack=bool(session._packed_attention))
        assert settings.loss_fn in LOSSES
        session.forward_backward(passes, settings.loss_fn, loss_inputs=inputs)
        losses.append(session.optim_step()["loss"])
    return losses


def test_max_staleness_0_is_the_on_policy_run_exactly(tiny_model_dir, tmp_path) -> None:
    settings = RLSettings(samples_per_prompt=4, max_new_tokens=4, seed=5, loss_fn="ppo")
    cfg = fp32_config(learning_rate=1e-2)
    events: list[dict] = []
    run_rl(
        cfg, settings, tiny_model_dir, PROMPTS, steps=3, prompts_per_step=2, score=_score,
        stop_ids=set(), state_dir=tmp_path / "s", emit=events.append,
    )  # fmt: skip
    rows = [e for e in events if e["type"] == "metrics"]
    reference = TrainingSession(tiny_model_dir, cfg, total_updates=3)
    assert [r["loss"] for r in rows] == _today(reference, settings, 3)  # bitwise
    assert [(r["weightVersion"], r["staleness"]) for r in rows] == [(0, 0), (1, 0), (2, 0)]
    shown = [e for e in events if e["type"] == "samples"][0]["samples"][0]
    assert shown["weightVersion"] == 0 and len(shown["logprobs"]) == len(shown["tokens"])


def test_a_run_with_max_staleness_1_logs_each_updates_staleness(tiny_model_dir, tmp_path) -> None:
    settings = RLSettings(samples_per_prompt=4, max_new_tokens=4, seed=5, max_staleness=1)
    events: list[dict] = []
    result = run_rl(
        fp32_config(learning_rate=1e-2), settings, tiny_model_dir, PROMPTS, steps=4,
        prompts_per_step=2, score=_score, stop_ids=set(), state_dir=tmp_path / "s",
        emit=events.append,
    )  # fmt: skip
    rows = [e for e in events if e["type"] == "metrics"]
    assert [(r["weightVersion"], r["staleness"]) for r in rows] == [(0, 0), (0, 1), (1, 1), (2, 1)]
    assert rows[0]["logprobDiffMax"] < 1e-4  # the sampler's weights are the trainer's
    assert rows[2]["logprobDiffMean"] > 1e-4  # one update behind: the gap shows it
    assert result.step == 4 and result.adapter_dir is not None
