"""Learning-rate schedules (hyperparams.scheduler: constant, linear, cosine)."""

from __future__ import annotations

import pytest

from akka_optimize.engine.config import EngineConfig
from akka_optimize.engine.errors import EngineError
from akka_optimize.engine.schedule import lr_factor, warmup_updates


def test_cosine_with_warmup_and_minimum_hits_its_values():
    # 12 updates, warmup 0.25 → 3 warmup updates; then p = (k - 4) / 8.
    f = [lr_factor("cosine", k, 12, 0.25, 0.1) for k in range(1, 13)]
    assert warmup_updates(12, 0.25) == 3
    assert f[:4] == pytest.approx([1 / 3, 2 / 3, 1.0, 1.0])
    assert f[-1] == pytest.approx(0.1)  # the last update runs at the minimum ratio
    # k = 8: p = 1/2 → 0.1 + 0.9 · ½(1 + cos(π/2)) = 0.55; k = 10: p = 3/4
    assert f[7] == pytest.approx(0.55)
    assert f[9] == pytest.approx(0.1 + 0.9 * 0.5 * (1 - 0.5**0.5))
    assert all(a >= b for a, b in zip(f[3:], f[4:], strict=False))


def test_linear_and_constant():
    assert [lr_factor("linear", k, 5, 0.0, 0.0) for k in range(1, 6)] == pytest.approx(
        [1.0, 0.75, 0.5, 0.25, 0.0]
    )
    assert [lr_factor("constant", k, 4, 0.5) for k in range(1, 5)] == pytest.approx([0.5, 1, 1, 1])
    assert lr_factor("cosine", 1, 1) == 1.0


def test_bad_settings_are_refused_with_their_field():
    with pytest.raises(EngineError) as e:
        EngineConfig(scheduler="step")
    assert e.value.field == "config.hyperparams.scheduler.kind"
    with pytest.raises(EngineError, match="microBatchPerGpu"):
        EngineConfig(micro_batch=0)
    with pytest.raises(ValueError, match="outside"):
        lr_factor("linear", 0, 3)


def test_max_steps_caps_the_run_and_the_schedule(tiny_model_dir, tmp_path):
    from engine_testkit import fp32_config, random_rows

    from akka_optimize.engine.sft import run_sft

    events: list[dict] = []
    cfg = fp32_config(epochs=3, micro_batch=1, max_steps=4, scheduler="linear")
    res = run_sft(cfg, tiny_model_dir, random_rows(5), None, tmp_path, events.append)
    steps = [e["step"] for e in events if e["type"] == "metrics"]
    assert steps == [1, 2, 3, 4] and res.total_steps == 4 and res.step == 4
    assert [e for e in events if e["type"] == "save"][-1]["step"] == 4


@pytest.mark.parametrize(
    ("micro_batch", "advice"),
    [
        (4, "set config.hyperparams.training.microBatchPerGpu to 2"),
        (1, "lower config.maxSeqLength below the longest pass"),
    ],
)
def test_out_of_memory_names_the_setting_to_lower(tiny_model_dir, monkeypatch, micro_batch, advice):
    """Issue 7: an out-of-memory pass fails with a sentence naming a smaller
    ``microBatchPerGpu`` (or ``maxSeqLength`` at one conversation per pass)."""
    from engine_testkit import fp32_config, random_rows

    from akka_optimize.data.types import pack_examples
    from akka_optimize.engine.errors import EngineOutOfMemory
    from akka_optimize.engine.session.training import TrainingSession

    session = TrainingSession(tiny_model_dir, fp32_config(micro_batch=micro_batch))

    def allocator_fails(*args, **kwargs):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 68719476736 bytes."
        )

    monkeypatch.setattr(session, "_body", allocator_fails)
    rows = random_rows(micro_batch)
    with pytest.raises(EngineOutOfMemory) as e:
        session.forward_backward([pack_examples(rows)])
    tokens = sum(len(r.input_ids) for r in rows)
    assert str(e.value).startswith(
        f"The cpu device ran out of memory at update 1 with {micro_batch} conversation(s) "
        f"per pass ({tokens} tokens); {advice}"
    )
    assert e.value.field == (
        "config.hyperparams.training.microBatchPerGpu" if micro_batch > 1 else "config.maxSeqLength"
    )


def test_a_validation_set_alone_is_measured_after_the_last_update(tiny_model_dir, tmp_path):
    """With neither validationFrequencySteps nor validateEachEpoch, a run given a
    validation set still reports its validation loss once, at the end."""
    from engine_testkit import fp32_config, random_rows

    from akka_optimize.engine.sft import run_sft

    events: list[dict] = []
    cfg = fp32_config(epochs=1, micro_batch=2)
    res = run_sft(
        cfg, tiny_model_dir, random_rows(6), random_rows(3, seed=5), tmp_path, events.append
    )
    vals = [e for e in events if e["type"] == "validation"]
    assert [v["step"] for v in vals] == [3] and res.final_validation_loss == vals[0]["loss"]
