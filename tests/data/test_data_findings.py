"""Findings (counts, tokens, truncation, empty masks, duplicates) and the preview's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from akka_optimize.data.findings import duplicates, findings
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.preview import preview
from akka_optimize.data.rows import parse_row

CASES = Path(__file__).resolve().parents[1] / "cases"
GOOD = [
    json.loads(x) for x in (CASES / "conversations.jsonl").read_text().splitlines() if x.strip()
]


def conv(user: str, assistant: str) -> dict:
    return parse_row(
        {
            "messages": [
                {"role": "user", "content": user},
                {"role": "assistant", "content": assistant},
            ]
        },
        1,
    )


def test_findings_list_duplicates_truncation_and_counts(smollm2_tokenizer):
    long_prompt = " ".join(["word"] * 40)
    rows = [
        conv("Payment failed twice, card declined.", "Category: billing."),  # 1
        conv("App crashes on login after the update to version 2.", "Category: bug."),  # 2
        conv("Payment failed twice, card declined.", "Category: billing."),  # 3 = 1
        conv("app crashes on login after the update to version 2!", "Category: bug."),  # 4 ~ 2
        conv(long_prompt, "one two three four five six"),  # 5 too long
        conv("Refund please, the item arrived broken and useless.", "Category: refund."),  # 6
    ]
    f = findings(smollm2_tokenizer, rows, LossPolicy(), 48)
    assert f["rows"] == 6
    assert f["truncated_rows"] == [5] and f["truncated_rows_count"] == 1
    assert f["exact_duplicates"] == [[1, 3]]
    assert f["near_duplicates"] == [[2, 4]]
    assert f["trainable_rows"] == 5
    assert f["no_supervised_rows"] == [] and f["refused_rows"] == []
    assert f["supervised_tokens"]["min"] >= 4  # "Category: bug." + <|im_end|>
    assert f["total_tokens"]["max"] <= 48


def test_findings_name_rows_the_template_cannot_render(smollm2_tokenizer):
    tool_row = parse_row(next(c for c in GOOD if c["name"] == "tool-call-trained")["row"], 1)
    f = findings(
        smollm2_tokenizer, [conv("a b c", "d"), tool_row], LossPolicy(), 512, row_numbers=[3, 4]
    )
    assert [r["row"] for r in f["refused_rows"]] == [4]
    assert "tool calls" in f["refused_rows"][0]["message"]
    assert f["trainable_rows"] == 1


def test_distinct_rows_are_not_duplicates():
    rows = [conv(f"question number {i} about topic {i * 7}", f"answer {i}") for i in range(30)]
    assert duplicates(rows, list(range(1, 31))) == {"exact_duplicates": [], "near_duplicates": []}


@pytest.mark.parametrize("case", GOOD, ids=[c["name"] for c in GOOD])
def test_preview_json_marks_the_supervised_spans(tools_tokenizer, case):
    row = parse_row(case["row"], 1)
    (p,) = preview(tools_tokenizer, [row], LossPolicy.from_config(case["loss"]), 5)
    text = "".join(s["text"] for s in p["segments"])
    assert text == tools_tokenizer.apply_chat_template(
        [
            m
            | {
                "content": m["content"]
                if isinstance(m["content"], str)
                else "".join(x["text"] for x in m["content"])
            }
            for m in row["messages"]
        ],
        tools=row.get("tools"),
        tokenize=False,
    )
    supervised = "".join(s["text"] for s in p["segments"] if s["supervised"])
    for s in case["supervised"]:
        assert s in supervised
    for s in case["not_supervised"]:
        assert s not in supervised
    assert p["tokens"] > p["supervised_tokens"] > 0


def test_preview_reports_a_refused_row_and_keeps_going(smollm2_tokenizer):
    tool_row = parse_row(next(c for c in GOOD if c["name"] == "tool-call-trained")["row"], 1)
    out = preview(
        smollm2_tokenizer, [conv("Hi", "Hello"), tool_row, conv("x", "y")], LossPolicy(), 2
    )
    assert [p["row"] for p in out] == [1, 2]
    assert [s for s in out[0]["segments"] if s["supervised"]] == [
        {"text": "Hello<|im_end|>", "supervised": True}
    ]
    assert out[1]["error"].startswith("row 2: the base model's chat template drops tool calls")
