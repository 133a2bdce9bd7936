"""The plan's batching fields reach the engine (issue 15 item 4): ``jobs/mapping.py``.

``config.data.use_dynamic_bsz`` decides whether a pass packs conversations, and
``config.maxSeqLength`` is the token budget a packed pass fills on one device; the
engine's own tests (tests/engine/test_engine_packing.py) show what each setting trains.
"""

from __future__ import annotations

import sys
from pathlib import Path

from akka_optimize.engine.config import EngineConfig
from akka_optimize.jobs.mapping import engine_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plan"))
from plan_fakes import resolved_plan  # noqa: E402

TARGETS = ["q_proj", "v_proj"]
AUTO = "AutoModelForCausalLM"


def _plan(**config: object) -> dict:
    over = {"maxSeqLength": 768, "hyperparams": {"training": {"microBatchPerGpu": 4}}}
    return resolved_plan(over={"config": {**over, **config}})


def test_dynamic_batches_pack_up_to_max_seq_length() -> None:
    kw = engine_settings(_plan(), TARGETS, AUTO, "cpu")
    assert kw["dynamic_batches"] is True and kw["token_budget"] == 768
    assert kw["micro_batch"] == 4
    EngineConfig(**kw).validate()


def test_use_dynamic_bsz_false_reaches_the_engine_as_one_conversation_per_pass() -> None:
    plan = _plan(data={"use_dynamic_bsz": False})
    plan["config"]["hyperparams"]["training"]["microBatchPerGpu"] = 1
    kw = engine_settings(plan, TARGETS, AUTO, "cpu")
    assert kw["dynamic_batches"] is False and kw["micro_batch"] == 1
    EngineConfig(**kw).validate()


def test_use_dynamic_bsz_false_with_a_micro_batch_above_one_is_refused_naming_both() -> None:
    import pytest

    from akka_optimize.engine.errors import EngineError

    kw = engine_settings(_plan(data={"use_dynamic_bsz": False}), TARGETS, AUTO, "cpu")
    with pytest.raises(EngineError) as err:
        EngineConfig(**kw).validate()
    assert "microBatchPerGpu" in str(err.value) and "use_dynamic_bsz" in str(err.value)
