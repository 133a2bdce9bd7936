"""Saves, kept states and exact resume (behaviours.md 6; seeds/001 keepRecoverable, saveEachEpoch)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from engine_testkit import fp32_config, random_rows
from safetensors.torch import load_file

from akka_optimize.engine.errors import EngineError
from akka_optimize.engine.sft import recoverable_steps, run_sft, state_path

ROWS = random_rows(10, seed=3)
# 10 rows, shuffled, 2 epochs, micro batch 1: 20 updates. Dropout on, so the RNG matters.
CFG = dict(
    epochs=2,
    micro_batch=1,
    shuffle=True,
    lora_dropout=0.1,
    scheduler="cosine",
    warmup_ratio=0.1,
    seed=7,
    keep_recoverable=2,
)


def _metrics(events):
    return [e for e in events if e["type"] == "metrics"]


def _state(folder):
    opt = torch.load(folder / "optimizer.pt", weights_only=False)
    return load_file(folder / "adapter_state.safetensors"), opt


def test_resume_continues_the_same_run_bitwise(tiny_model_dir, tmp_path):
    whole: list[dict] = []
    done = run_sft(fp32_config(**CFG), tiny_model_dir, ROWS, None, tmp_path / "a", whole.append)
    assert done.step == done.total_steps == 20 and not done.stopped

    first: list[dict] = []
    paused = run_sft(
        fp32_config(**CFG),
        tiny_model_dir,
        ROWS,
        None,
        tmp_path / "b",
        first.append,
        stop_after_step=13,
    )
    assert paused.stopped and paused.step == 13 and paused.last_save_step == 13
    assert 13 in recoverable_steps(tmp_path / "b")
    second: list[dict] = []
    resumed = run_sft(
        fp32_config(**CFG),
        tiny_model_dir,
        ROWS,
        None,
        tmp_path / "b",
        second.append,
        resume_step=13,
    )
    assert resumed.step == resumed.total_steps == 20

    after = _metrics(second)
    assert [m["step"] for m in after] == list(range(14, 21))
    keys = (
        "loss",
        "learningRate",
        "gradNorm",
        "adapterNorm",
        "updateRatio",
        "supervisedTokens",
        "epoch",
    )
    for got, want in zip(after, _metrics(whole)[13:], strict=True):
        assert {k: got[k] for k in keys} == {k: want[k] for k in keys}
    # The paused run's updates are the uninterrupted run's first 13, every metric
    # except the wall-clock ones.
    before = _metrics(first)
    assert [m["step"] for m in before] == list(range(1, 14))
    for got, want in zip(before, _metrics(whole)[:13], strict=True):
        assert {k: got[k] for k in keys} == {k: want[k] for k in keys}

    adapter_a, opt_a = _state(state_path(tmp_path / "a", 20) / "state")
    adapter_b, opt_b = _state(state_path(tmp_path / "b", 20) / "state")
    assert adapter_a.keys() == adapter_b.keys()
    assert all(torch.equal(adapter_a[k], adapter_b[k]) for k in adapter_a)
    for i, st in opt_a["state"].items():
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(st[k], opt_b["state"][i][k]), (i, k)
    assert resumed.final_loss == done.final_loss
    assert resumed.mean_loss == pytest.approx(done.mean_loss, abs=1e-12)


def test_saves_keep_the_newest_states_and_each_epoch_adapter(tiny_model_dir, tmp_path):
    events: list[dict] = []
    cfg = fp32_config(
        epochs=2,
        micro_batch=2,
        save_every_steps=2,
        keep_recoverable=2,
        save_each_epoch=True,
        validate_each_epoch=True,
        validation_frequency_steps=4,
    )
    res = run_sft(
        cfg, tiny_model_dir, random_rows(6, seed=4), random_rows(3, seed=9), tmp_path, events.append
    )
    saves = [e for e in events if e["type"] == "save"]
    assert [(s["step"], s["epoch"], s["epochEnd"]) for s in saves] == [
        (2, 1, False),
        (3, 1, True),
        (4, 2, False),
        (6, 2, True),
    ]
    assert recoverable_steps(tmp_path) == [4, 6]  # keepRecoverable 2
    for s in saves:  # every adapter stays, in PEFT format
        names = sorted(p.name for p in (tmp_path / f"step-{s['step']:08d}" / "adapter").iterdir())
        assert {"adapter_config.json", "adapter_model.safetensors"} <= set(names)
        assert (
            json.loads(
                (tmp_path / f"step-{s['step']:08d}" / "adapter" / "adapter_config.json").read_text()
            )["r"]
            == 4
        )
    assert res.epoch_adapters == [
        {"epoch": 1, "step": 3, "adapterDir": saves[1]["adapterDir"]},
        {"epoch": 2, "step": 6, "adapterDir": saves[3]["adapterDir"]},
    ]
    vals = [e for e in events if e["type"] == "validation"]
    assert [v["step"] for v in vals] == [0, 3, 4, 6]  # before training, epoch ends, every 4
    assert all(v["perplexity"] == pytest.approx(math.exp(v["loss"]), rel=1e-9) for v in vals)
    assert res.final_validation_loss == vals[-1]["loss"]
    metrics = _metrics(events)
    for m in metrics:
        for key in (
            "loss",
            "learningRate",
            "gradNorm",
            "gradClipFactor",
            "adapterNorm",
            "updateRatio",
            "supervisedTokens",
            "totalTokens",
            "tokensPerSecond",
            "stepTimeSeconds",
        ):
            assert isinstance(m[key], (int, float)), key
        assert 0 < m["gradClipFactor"] <= 1
        assert (m["updateRatio"] > 0) == (m["learningRate"] > 0)  # linear to 0: the last is 0
    assert res.final_loss == metrics[-1]["loss"]
    assert res.mean_loss == pytest.approx(sum(m["loss"] for m in metrics) / 6)
    json.dumps(events)  # plain, serialisable events


def test_resume_refuses_other_order_settings(tiny_model_dir, tmp_path):
    cfg = fp32_config(**CFG)
    run_sft(cfg, tiny_model_dir, ROWS, None, tmp_path, lambda e: None, stop_after_step=2)
    with pytest.raises(EngineError, match="seed"):
        run_sft(
            fp32_config(**{**CFG, "seed": 8}),
            tiny_model_dir,
            ROWS,
            None,
            tmp_path,
            lambda e: None,
            resume_step=2,
        )
    with pytest.raises(EngineError, match="no training state"):
        run_sft(cfg, tiny_model_dir, ROWS, None, tmp_path, lambda e: None, resume_step=5)


def test_a_branch_continues_a_state_under_its_own_plan(tiny_model_dir, tmp_path):
    """seeds/000 "Parameter sweeps": a branch starts from another run's saved state and
    trains only the extra updates, under its own learning rate, weight decay and length."""
    source: list[dict] = []
    src_cfg = dict(CFG, epochs=1, keep_recoverable=20, save_every_steps=1)
    run_sft(fp32_config(**src_cfg), tiny_model_dir, ROWS, None, tmp_path / "src", source.append)
    branch_dir = tmp_path / "branch"
    (branch_dir / "step-00000004").mkdir(parents=True)
    import shutil

    shutil.copytree(state_path(tmp_path / "src", 4) / "state", state_path(branch_dir, 4) / "state")
    events: list[dict] = []
    cfg = fp32_config(**dict(src_cfg, epochs=2, learning_rate=3e-3, weight_decay=0.1))
    res = run_sft(
        cfg, tiny_model_dir, ROWS, None, branch_dir, events.append, resume_step=4, branch=True
    )
    got = _metrics(events)
    assert [m["step"] for m in got] == list(range(5, 21)) and res.step == 20
    want = _metrics(source)
    # The same state and rows: update 5 scores the same loss before the branch's own step.
    assert got[0]["loss"] == want[4]["loss"] and got[0]["gradNorm"] == want[4]["gradNorm"]
    assert got[0]["learningRate"] != want[4]["learningRate"]
    # Its own cosine schedule over its 16 updates, warm-up 10%: 2 warm-up updates, then
    # the peak, not the tail of a 20-update schedule.
    assert got[1]["learningRate"] == pytest.approx(3e-3)
    assert got[-1]["learningRate"] < got[1]["learningRate"] / 10
    assert got[1]["loss"] != want[5]["loss"]
    assert res.mean_loss == pytest.approx(sum(m["loss"] for m in got) / 16)
    saved = torch.load(state_path(branch_dir, 20) / "state" / "optimizer.pt", weights_only=False)
    assert saved["param_groups"][0]["weight_decay"] == 0.1

    refusals = [
        (
            dict(src_cfg, micro_batch=2, epochs=2),
            r"\(micro_batch 1 → 2\); a branch keeps which rows",
        ),
        (dict(src_cfg, max_steps=4), "trains no update after step 4"),
    ]
    for settings, message in refusals:
        with pytest.raises(EngineError, match=message):
            run_sft(
                fp32_config(**settings),
                tiny_model_dir,
                ROWS,
                None,
                branch_dir,
                events.append,
                resume_step=4,
                branch=True,
            )


def test_a_warm_start_loads_a_saved_adapter_exactly_and_refuses_another_shape(
    tiny_model_dir, tmp_path
):
    """``warmStartModelId``: a run starts from a trained adapter's weights (fresh
    optimizer); an adapter of another rank is refused with the counts."""
    from akka_optimize.data.types import pack_examples
    from akka_optimize.engine.session.training import TrainingSession

    trained = TrainingSession(tiny_model_dir, fp32_config(seed=1))
    trained.forward_backward([pack_examples(ROWS[:4])])
    trained.optim_step()
    folder = trained.save_adapter(tmp_path / "adapter")

    fresh = TrainingSession(tiny_model_dir, fp32_config(seed=2))
    assert not all(torch.equal(fresh.params[n], trained.params[n]) for n in fresh.params)
    fresh.load_adapter_weights(folder)
    for name, p in fresh.params.items():
        assert torch.equal(p, trained.params[name]), name
    assert fresh.step == 0

    other = TrainingSession(tiny_model_dir, fp32_config(lora_rank=8, lora_alpha=16))
    with pytest.raises(EngineError, match=r"rank 4 .* rank 8"):
        other.load_adapter_weights(folder)
