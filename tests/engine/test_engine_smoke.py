"""The supervised smoke check (F076): it trains its slice until the model reproduces it,
and an early stop below the threshold reports UNSTABLE_READING."""

from __future__ import annotations

from engine_testkit import fp32_config, row

from akka_optimize.engine.sampling import generate
from akka_optimize.engine.session.training import TrainingSession
from akka_optimize.engine.sft import run_sft, state_path
from akka_optimize.engine.smoke import (
    REPRODUCED,
    UNSTABLE_READING,
    SmokeCheck,
    SmokeMeter,
    reproduction,
    smoke_config,
    smoke_slice,
)

# The tiny model's frozen tied embedding keeps its logits small; an adapter on the head
# lets it become confident within tens of updates (as in test_engine_overfit.py).
TARGETS = ("q_proj", "v_proj", "o_proj", "down_proj", "lm_head")


def _smoke(tiny_model_dir, tmp_path, check: SmokeCheck):
    rows = [row([5, 17, 230, 41], [88, 9, 2], 1), row([6, 301, 12], [77, 2], 2),
            row([7, 44, 19, 500], [61, 3, 2], 3), row([8, 8], [90, 2], 4)]  # fmt: skip
    part = smoke_slice(rows, check)
    cfg = smoke_config(
        fp32_config(learning_rate=1e-2, scheduler="constant", micro_batch=2,
                    lora_rank=8, lora_alpha=16, target_modules=TARGETS),
        len(part),
        check,
    )  # fmt: skip
    events: list[dict] = []
    meter = SmokeMeter(part, check, events.append)
    res = run_sft(cfg, tiny_model_dir, part, None, tmp_path, events.append, until=meter)
    return part, cfg, res, events, meter.reading()


def test_the_check_stops_once_greedy_decoding_reproduces_the_whole_slice(
    tiny_model_dir, tmp_path
) -> None:
    check = SmokeCheck(rows=3, threshold=1.0, max_steps=200, measure_every_steps=5)
    part, cfg, res, events, reading = _smoke(tiny_model_dir, tmp_path, check)
    assert [e.row for e in part] == [1, 2, 3]  # the dataset's first rows, in order
    measured = [e for e in events if e["type"] == "smoke"]
    assert reading["reading"] == REPRODUCED and reading["reproduction"] == 1.0, measured
    # it stopped at the first measurement that reached the threshold, never before
    assert res.step == reading["step"] == measured[-1]["step"] < check.max_steps
    assert res.step % check.measure_every_steps == 0 and not res.stopped
    assert all(m["reproduction"] < 1.0 for m in measured[:-1]) and len(measured) > 1
    assert reading["supervisedTokens"] == sum(e.supervised_tokens for e in part)
    assert [e["step"] for e in events if e["type"] == "save"][-1] == res.step
    # Reproduced means it: greedy decoding from each prompt writes the answer.
    session = TrainingSession(tiny_model_dir, cfg)
    session.load_state(state_path(tmp_path, res.step) / "state")
    assert reproduction(session, part) == (1.0, reading["supervisedTokens"])
    for ex in part:
        start = ex.weights.index(1.0)
        answer = ex.input_ids[start:]
        got = generate(session.model, None, ex.input_ids[:start], len(answer), stop_ids=set())
        assert got == answer, ex.row


def test_an_early_stop_below_the_threshold_reports_unstable_reading(
    tiny_model_dir, tmp_path
) -> None:
    check = SmokeCheck(rows=3, threshold=1.0, max_steps=3, measure_every_steps=5)
    _, _, res, events, reading = _smoke(tiny_model_dir, tmp_path, check)
    assert res.step == res.total_steps == 3  # measured at the last update, not only every 5
    assert [e["step"] for e in events if e["type"] == "smoke"] == [3]
    assert reading["reading"] == UNSTABLE_READING
    assert reading["reproduction"] < check.threshold and reading["step"] == 3
