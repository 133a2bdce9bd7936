"""Passes hold what data.use_dynamic_bsz says, and the loss does not depend on it
(issue 15; seeds/001 "Set the training engine's settings directly"; behaviours.md 1, 2)."""

from __future__ import annotations

import pytest
from engine_testkit import fp32_config, random_rows
from families import FAMILIES, VOCAB, build

from akka_optimize.engine.errors import EngineError
from akka_optimize.engine.session.training import TrainingSession
from akka_optimize.engine.sft import update_passes

ROWS = random_rows(8, seed=11, vocab=VOCAB - 10)  # 6–21 tokens each


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return build(FAMILIES[0], tmp_path_factory.mktemp("packing") / "llama")


def test_dynamic_batches_pack_whole_conversations_up_to_the_budget() -> None:
    cfg = fp32_config(micro_batch=4, gradient_accumulation=2, token_budget=40, shuffle=False)
    _, _, passes = update_passes(ROWS, cfg, 1)
    lengths = {ex.row: len(ex.input_ids) for ex in ROWS}
    assert sorted(r for p in passes for r in p.rows) == [ex.row for ex in ROWS]  # all, once
    for p in passes:
        assert p.num_tokens == sum(lengths[r] for r in p.rows) <= 40  # whole conversations
    # best-fit decreasing: no two passes could be merged within the budget
    sizes = sorted(p.num_tokens for p in passes)
    assert sizes[0] + sizes[1] > 40
    assert len(passes) < len(ROWS)


def test_one_conversation_per_pass_when_dynamic_batches_are_off() -> None:
    cfg = fp32_config(gradient_accumulation=8, dynamic_batches=False, shuffle=False)
    _, _, passes = update_passes(ROWS, cfg, 1)
    assert [p.rows for p in passes] == [[ex.row] for ex in ROWS]
    with pytest.raises(EngineError) as err:
        fp32_config(micro_batch=4, dynamic_batches=False)
    assert err.value.field == "config.hyperparams.training.microBatchPerGpu"
    assert "use_dynamic_bsz false" in err.value.message


def test_loss_is_the_same_packed_or_one_per_pass(llama_dir) -> None:
    losses = []
    for kw in (
        dict(micro_batch=4, gradient_accumulation=2, token_budget=40),
        dict(micro_batch=1, gradient_accumulation=8, dynamic_batches=False),
    ):
        cfg = fp32_config(shuffle=False, **kw)
        session = TrainingSession(llama_dir, cfg)
        _, _, passes = update_passes(ROWS, cfg, 1)
        session.forward_backward(passes)
        losses.append(session.optim_step()["loss"])
    assert losses[0] == pytest.approx(losses[1], abs=1e-6)
