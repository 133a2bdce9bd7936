"""The checks before the first update (F096, F097; issue 23 item 5): each passes at its
default bound, and each fails the run before it trains when its bound is 0 and its value is
positive, naming the check, the value and the bound."""

from __future__ import annotations

import pytest
import torch
from engine_testkit import fp32_config, random_rows

from akka_optimize.engine.sft import CHECKING, recoverable_steps, run_sft
from akka_optimize.engine.start_checks import StartCheckFailed, packing_bound

DEFAULTS = {"head": 1e-3, "isolation": 1e-3, "packing": None, "reference": 5e-2}
ROWS = random_rows(8, seed=1)


def test_the_checks_pass_at_their_defaults_and_are_reported(tiny_model_dir, tmp_path):
    events: list[dict] = []
    cfg = fp32_config(micro_batch=4, head_chunk_tokens=3, start_checks=DEFAULTS)
    result = run_sft(cfg, tiny_model_dir, ROWS, None, tmp_path, events.append)
    assert [c["name"] for c in result.checks] == ["head", "isolation", "packing", "reference"]
    assert all(c["passed"] and 0 <= c["value"] <= c["bound"] for c in result.checks)
    positions = result.checks[0]["positions"]
    assert positions > 0
    assert result.checks[2]["bound"] == packing_bound(positions, torch.float32)
    checking = {"type": "phase", "phase": "checking", "step": 0, "detail": CHECKING}
    first_update = next(i for i, e in enumerate(events) if e["type"] == "metrics")
    assert checking in events[:first_update]


# (check, bounds, extra settings): the check's bound is 0 and something makes its value positive
FAILING = [
    ("head", dict(DEFAULTS, head=0.0), dict(head_chunk_tokens=3), {}),
    ("isolation", dict(DEFAULTS, isolation=0.0), {}, {"perturb_isolation": True}),
    ("packing", dict(DEFAULTS, isolation=10.0, packing=0.0), {}, {"perturb_isolation": True}),
    ("reference", dict(DEFAULTS, reference=0.0), dict(head_chunk_tokens=3), {}),
]


@pytest.mark.parametrize(
    ("check", "bounds", "settings", "extra"), FAILING, ids=[f[0] for f in FAILING]
)
def test_a_check_past_its_bound_fails_before_training(
    tiny_model_dir, tmp_path, check, bounds, settings, extra
):
    events: list[dict] = []
    cfg = fp32_config(micro_batch=4, start_checks=bounds, extra=extra, **settings)
    with pytest.raises(StartCheckFailed) as info:
        run_sft(cfg, tiny_model_dir, ROWS, None, tmp_path, events.append)
    message = info.value.message
    assert message.startswith(f"The {check} check before the first update measured ")
    assert "past its bound 0 " in message and info.value.field.endswith(
        {"packing": "max_mean_loss_difference"}.get(check, "max_logprob_error")
    )
    assert f"checks.{check}." in info.value.field
    # every value measured reaches the run before the failure, the failing one first among
    # those past their bounds
    (sent,) = [e["checks"] for e in events if e["type"] == "checks"]
    assert sent == info.value.checks
    assert [c["name"] for c in sent] == ["head", "isolation", "packing", "reference"]
    assert [c["name"] for c in sent if not c["passed"]][0] == check
    assert all(c["passed"] == (c["value"] <= c["bound"]) for c in sent)
    assert not [e for e in events if e["type"] == "metrics"] and recoverable_steps(tmp_path) == []
