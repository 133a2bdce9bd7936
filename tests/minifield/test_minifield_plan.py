"""The packing plan: layout, capacity refusal, seeded shuffle, and the generation record."""

from __future__ import annotations

import pytest

from akka_optimize.minifield.plan import build_plan, plan_record
from akka_optimize.minifield.recipe import PackedTraining
from akka_optimize.minifield.registry import RecipeError
from akka_optimize.minifield.rows import ARGUMENTS, PROMPT, ROUTING, ActionExample


def _ex(row: int, prompt: int, routing: int, arguments: int) -> ActionExample:
    stage = [PROMPT] * prompt + [ROUTING] * routing + [ARGUMENTS] * arguments
    return ActionExample(row, list(range(100 + row, 100 + row + len(stage))), stage)


def _training(**kw) -> PackedTraining:
    base = {"sequence_length": 32, "projection_chunk_size": 4, "max_projection_chunks": 4}
    return PackedTraining(**(base | kw))


def test_layout_rows_microbatches_updates():
    examples = [_ex(i, 5, 2, 3) for i in range(1, 9)]  # 10 tokens each, 5 supervised
    t = _training(rows_per_microbatch=1, gradient_accumulation_steps=2, max_projection_chunks=8)
    plan = build_plan(examples, t, None, None)
    assert len(plan.rows) == 3  # 30 + 30 + 20 tokens under a 32-token budget
    assert all(len(r.input_ids) <= 32 for r in plan.rows)
    assert sorted(r for p in plan.rows for r in p.dataset_rows) == list(range(1, 9))
    assert [len(u) for u in plan.updates] == [2, 1]  # 3 microbatches, 2 per update
    assert all(len(mb) == 1 for u in plan.updates for mb in u)


def test_capacity_overflow_refused_naming_the_row():
    examples = [_ex(1, 3, 1, 2), _ex(7, 3, 2, 15)]  # row 7 has 17 targets > 4 × 4
    t = _training(sequence_length=24)
    with pytest.raises(RecipeError) as err:
        build_plan(examples, t, None, None)
    msg = str(err.value)
    assert "holds dataset rows row 7 with 17 supervised target positions" in msg
    assert "4 × 4 = 16" in msg
    assert err.value.details["rows"] == [7]


def test_no_microbatch_over_capacity_when_accepted():
    examples = [_ex(i, 4, 2, 2) for i in range(1, 21)]
    t = _training(rows_per_microbatch=2, max_projection_chunks=16)
    plan = build_plan(examples, t, None, None)
    assert max(plan.microbatch_tokens(mb)[1] for u in plan.updates for mb in u) <= 64


def test_seed_fixes_the_shuffle():
    examples = [_ex(i, 4, 1, 1) for i in range(1, 13)]
    t = _training(sequence_length=6)  # one conversation per packed row
    a = build_plan(examples, t, None, None).updates
    assert a == build_plan(examples, t, None, None).updates
    other = build_plan(examples, _training(sequence_length=6, seed=7), None, None).updates
    assert other != a and sorted(map(str, other)) == sorted(map(str, a))


def test_updates_cycle_epochs_and_cap():
    examples = [_ex(i, 4, 1, 1) for i in range(1, 4)]
    t = _training(sequence_length=6)
    plan = build_plan(examples, t, 7, None)
    assert len(plan.updates) == 7 and plan.epoch_updates == 3
    assert len(build_plan(examples, t, None, 2).updates) == 2


def test_generation_record_totals():
    examples = [_ex(i, 5, 2, 3) for i in range(1, 6)]
    t = _training(gradient_accumulation_steps=2, max_projection_chunks=8)
    plan = build_plan(examples, t, None, None)
    rec = plan_record(plan, t, {"format": "x"})
    assert rec["totals"]["input_tokens"] == 50 and rec["totals"]["supervised_tokens"] == 25
    assert sum(r["routing_tokens"] for r in rec["packed_rows"]) == 10
    assert rec["layout"]["target_capacity"] == 32
    assert sum(u["input_tokens"] for u in rec["updates"]) == 50
