"""Rows are read as JSON reads them (issue 14 item 7): lines end at ``\\n`` only, NaN and
Infinity are refused with the row number, unknown row fields are refused naming them."""

from __future__ import annotations

import json

import pytest

from akka_optimize.data.jsonl import iter_jsonl_rows, validate_jsonl_bytes
from akka_optimize.data.rows import DataFileError


def _row(answer: str = "four") -> dict:
    return {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": answer},
        ]
    }


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085", "\x0b", "\x1c"])
def test_unicode_line_breaks_inside_a_string_stay_in_the_row(char):
    text = f"before{char}after"
    lines = [json.dumps(_row(text), ensure_ascii=False), json.dumps(_row())]
    data = "\n".join(lines).encode()
    pairs = iter_jsonl_rows(data, "train.jsonl")
    assert [n for n, _ in pairs] == [1, 2]
    assert pairs[0][1]["messages"][1]["content"] == text


def test_crlf_line_ends_are_read_as_json_whitespace():
    data = (json.dumps(_row("a")) + "\r\n" + json.dumps(_row("b")) + "\r\n").encode()
    rows = validate_jsonl_bytes(data, "train.jsonl")
    assert [r["messages"][1]["content"] for r in rows] == ["a", "b"]


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_refused_with_the_row_number(bad):
    good = json.dumps(_row())
    row = '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": '
    row += f'[{{"type": "text", "text": "a", "weight": {bad}}}]}}]}}'
    data = "\n".join([good, good, row]).encode()
    with pytest.raises(DataFileError) as info:
        validate_jsonl_bytes(data, "train.jsonl")
    assert info.value.field == "train.jsonl:line 3"
    assert "line 3: " in info.value.message
    assert ("not a JSON number" in info.value.message) or ("too large" in info.value.message)


def test_nan_inside_tool_call_arguments_string_is_refused():
    row = {
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "f", "arguments": '{"x": NaN}'}}],
            },
        ]
    }
    with pytest.raises(DataFileError) as info:
        validate_jsonl_bytes(json.dumps(row).encode(), "t.jsonl")
    assert "line 1: messages[1].tool_calls[0].function.arguments: NaN" in info.value.message


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({**_row(), "id": 7}, "id"),
        (
            {"messages": [{"role": "user", "content": "q", "weight": 0}, _row()["messages"][1]]},
            "messages[0].weight",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": [{"type": "text", "text": "a", "mask": 1}]},
                ]
            },
            "messages[1].content[0].mask",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"function": {"name": "f"}, "index": 0}],
                    },
                ]
            },
            "messages[1].tool_calls[0].index",
        ),
    ],
)
def test_unknown_row_fields_are_refused_with_row_number_and_field(row, field):
    data = (json.dumps(_row()) + "\n\n" + json.dumps(row)).encode()
    with pytest.raises(DataFileError) as info:
        validate_jsonl_bytes(data, "train.jsonl")
    assert f"line 3: {field}: unknown field" in info.value.message
    assert info.value.details[0]["field"] == field


def test_a_huge_bad_value_gives_a_short_refusal():
    huge = "r" * 5_000_000
    row = {"messages": [{"role": huge, "content": "q"}, _row()["messages"][1]]}
    with pytest.raises(DataFileError) as info:
        validate_jsonl_bytes(json.dumps(row).encode(), "train.jsonl")
    assert "line 1: messages[0].role: unknown role 'rrrr" in info.value.message
    assert len(info.value.message) < 600
    assert "more characters" in info.value.message
