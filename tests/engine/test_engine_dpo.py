"""Preference updates on the tiny model (issue 50 item 3): the reference is the base with
the adapter off, a pair's loss and gradient match a direct autograd computation whatever
the packing, and the reward accuracy rises on a toy preference set."""

from __future__ import annotations

import random

import pytest
import torch
from engine_testkit import adapter_grads, fp32_config, row

from akka_optimize.data.types import PreferencePair
from akka_optimize.engine.dpo.loop import run_dpo
from akka_optimize.engine.dpo.loss import DpoSettings, pair_losses
from akka_optimize.engine.dpo.update import REWARD_KEYS, run_pairs, train_update
from akka_optimize.engine.session.training import TrainingSession

TARGETS = ("q_proj", "v_proj", "o_proj", "down_proj")


def toy_pairs(n: int, seed: int = 0) -> list[PreferencePair]:
    """Pairs whose preferred answer is always 11 12 13 and the other 21 22 23 24, after a
    random prompt of 4–9 tokens."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = [rng.randrange(30, 2000) for _ in range(rng.randint(4, 9))]
        out.append(PreferencePair(row(prompt, [11, 12, 13]), row(prompt, [21, 22, 23, 24]), i + 1))
    return out


def direct_loss(session: TrainingSession, pairs: list[PreferencePair], s: DpoSettings):
    """The mean pair loss through the whole model's logits, one conversation at a time,
    with autograd through everything (the definition, no packing, no chunking)."""

    def seq_logp(ex) -> torch.Tensor:
        ids = torch.tensor(ex.input_ids)[None]
        logits = session.model(input_ids=ids, use_cache=False).logits[0, :-1].float()
        lp = torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None]).squeeze(1)
        return (lp.double() * torch.tensor(ex.weights[1:], dtype=torch.float64)).sum()

    pol, ref, n = [], [], []
    for p in pairs:
        pol.append(torch.stack([seq_logp(p.chosen), seq_logp(p.rejected)]))
        with torch.no_grad(), session.model.disable_adapter():
            ref.append(torch.stack([seq_logp(p.chosen), seq_logp(p.rejected)]))
        n.append([p.chosen.supervised_tokens, p.rejected.supervised_tokens])
    losses = pair_losses(torch.stack(pol), torch.stack(ref), torch.tensor(n).double(), s)
    return losses.mean()


@pytest.mark.parametrize(
    "settings",
    [
        DpoSettings(0.2, ("sigmoid", "ipo"), (1.0, 0.5)),
        DpoSettings(0.1, label_smoothing=0.2),
    ],
    ids=["sigmoid+ipo", "label-smoothing"],
)
def test_packed_chunked_update_equals_the_direct_loss_and_gradient(
    tiny_model_dir, settings: DpoSettings
) -> None:
    cfg = fp32_config(target_modules=TARGETS, head_chunk_tokens=3, lora_rank=4)
    session = TrainingSession(tiny_model_dir, cfg)
    with torch.no_grad():  # move the adapter off its zero start so policy != reference
        for p in session.params.values():
            p.add_(torch.randn_like(p) * 0.05)
    pairs = toy_pairs(5, seed=3)
    session.model.eval()
    direct = direct_loss(session, pairs, settings)
    direct.backward()
    want = adapter_grads(session)
    session._reset()
    total = sum(run_pairs(session, g, settings, True).loss for g in (pairs[:2], pairs[2:]))
    got = adapter_grads(session)
    assert total / 5 == pytest.approx(float(direct.detach()), rel=1e-6, abs=1e-9)
    for name, g in want.items():  # fp32 sums in another order (a 49,152-entry softmax)
        assert float((got[name] / 5 - g).abs().max()) <= 1e-4 * float(g.abs().max()), name


def test_the_reference_is_the_base_model_and_a_fresh_adapter_starts_at_loss_log2(
    tiny_model_dir,
) -> None:
    cfg = fp32_config(target_modules=TARGETS, micro_batch=2, gradient_accumulation=2)
    session = TrainingSession(tiny_model_dir, cfg)
    m = train_update(session, [toy_pairs(4)[:2], toy_pairs(4)[2:]], DpoSettings(0.1))
    # a fresh LoRA adapter (B = 0) is the base model: every log-ratio is 0
    assert m["loss"] == pytest.approx(0.6931471805599453, abs=1e-9)
    assert m["rewards/chosen"] == m["rewards/rejected"] == m["rewards/margin"] == 0.0
    assert m["pairs"] == 4 and m["supervisedTokens"] == 4 * (3 + 4)
    assert m["gradNorm"] > 0 and m["updateRatio"] > 0 and m["step"] == 1


def test_reward_accuracy_rises_above_0_9_on_a_toy_preference_set(tiny_model_dir, tmp_path):
    cfg = fp32_config(
        target_modules=TARGETS,
        lora_rank=8,
        lora_alpha=16,
        learning_rate=5e-3,
        scheduler="constant",
        micro_batch=4,
        epochs=2,
        seed=1,
    )
    events: list[dict] = []
    train, val = toy_pairs(24, seed=1), toy_pairs(8, seed=2)
    res = run_dpo(cfg, DpoSettings(0.1), tiny_model_dir, train, val, tmp_path, events.append)
    metrics = [e for e in events if e["type"] == "metrics"]
    assert len(metrics) == res.step == 12 and not res.stopped  # 24 pairs, 4 per update
    assert metrics[0]["rewards/accuracy"] < 0.9 <= metrics[-1]["rewards/accuracy"]
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    assert metrics[-1]["rewards/margin"] > 0 and set(REWARD_KEYS) <= set(metrics[-1])
    val_events = [e for e in events if e["type"] == "validation"]
    assert val_events[-1]["pairs"] == 8 and val_events[-1]["rewards/accuracy"] >= 0.9
    assert res.adapter_dir is not None and (res.adapter_dir / "adapter_config.json").exists()


def test_two_gloo_ranks_train_the_pairs_one_device_trains(tiny_model_dir, tmp_path) -> None:
    """Pairs dealt whole to two ranks (2 pairs each per update) train what one device trains
    with gradient accumulation (two passes of 2 pairs): the same loss, rewards and adapter."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), *sys.path]))
    common = dict(target_modules=list(TARGETS), learning_rate=5e-3, scheduler="constant")
    runs = {}
    for name, ranks, extra in (("one", 1, {"gradient_accumulation": 2}), ("two", 2, {"ranks": 2, "sharding": "none"})):  # fmt: skip
        config = tmp_path / f"{name}.config.json"
        config.write_text(json.dumps({**common, "micro_batch": 2, **extra}))
        out = tmp_path / f"{name}.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += [f"--nproc-per-node={ranks}", str(here / "dpo_ranks_script.py")]
        proc = subprocess.run(
            [*cmd, str(tiny_model_dir), str(out), str(config)],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
        runs[name] = json.loads(out.read_text())
    one, two = runs["one"]["metrics"], runs["two"]["metrics"]
    assert [m["pairs"] for m in two] == [4, 4] == [m["pairs"] for m in one]
    for a, b in zip(one, two, strict=True):
        for key in ("loss", "rewards/margin", "rewards/accuracy", "gradNorm"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), key
        assert a["supervisedTokens"] == b["supervisedTokens"]
    for name, values in runs["one"]["adapter"].items():
        diff = max(abs(x - y) for x, y in zip(values, runs["two"]["adapter"][name], strict=True))
        assert diff < 1e-5, name
