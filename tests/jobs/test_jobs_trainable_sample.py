"""Admission's rows check above the dry run's stated bound (issue 47 item 4 with issue 48
item 8): it checks the findings' seeded sample, naming the dataset's row numbers, so a
dry run and a start answer within seconds at the upload limit; a bad row outside the
sample is the preparing worker's to refuse."""

from __future__ import annotations

import pytest

from akka_optimize.data import findings as F
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.render import RenderError
from akka_optimize.data.rows import parse_row
from akka_optimize.jobs.trainable import check_rows

CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def _plain(i: int) -> dict:
    return {
        "messages": [
            {"role": "user", "content": f"What is {i} + 1?"},
            {"role": "assistant", "content": str(i + 1)},
        ]
    }


def _tool_row() -> dict:
    """A row SmolLM2's template cannot render (it drops tool calls): the worker refuses it."""
    return {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Where is order 7?"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
            {"role": "assistant", "content": "It has shipped."},
        ],
    }


def _rows(bad_at: int, n: int = 40) -> list[dict]:
    raw = [_tool_row() if i == bad_at else _plain(i) for i in range(n)]
    return [parse_row(r, i + 1) for i, r in enumerate(raw)]


def test_above_the_bound_the_sample_is_checked_with_the_datasets_row_numbers(
    smollm2_tokenizer, monkeypatch
) -> None:
    monkeypatch.setattr(F, "FINDINGS_SAMPLE_ROWS", 8)
    picked = F.sample(_rows(-1))
    assert picked is not None and len(picked.indices) == 8
    inside = picked.indices[-1]
    outside = next(i for i in range(40) if i not in picked.indices)
    with pytest.raises(RenderError) as err:
        check_rows(smollm2_tokenizer, _rows(inside), LossPolicy(), 512, "drop")
    assert err.value.row == inside + 1  # the dataset's row number, not the sample's
    # a bad row the sample does not hold: left to the preparing worker, as `sampled` says
    check_rows(smollm2_tokenizer, _rows(outside), LossPolicy(), 512, "drop")
    # at or below the bound every row is checked
    monkeypatch.setattr(F, "FINDINGS_SAMPLE_ROWS", 40)
    with pytest.raises(RenderError) as err:
        check_rows(smollm2_tokenizer, _rows(outside), LossPolicy(), 512, "drop")
    assert err.value.row == outside + 1
