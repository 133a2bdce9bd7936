"""Row validation: every bad case is refused with its line and field; good rows normalise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from akka_optimize.data.jsonl import validate_jsonl_bytes
from akka_optimize.data.rows import DataFileError, RowError, parse_row
from akka_optimize.errors import InvalidRequest

CASES = Path(__file__).resolve().parents[1] / "cases"
BAD = [
    json.loads(x) for x in (CASES / "conversations-bad.jsonl").read_text().splitlines() if x.strip()
]
GOOD = [
    json.loads(x) for x in (CASES / "conversations.jsonl").read_text().splitlines() if x.strip()
]


@pytest.mark.parametrize("case", BAD, ids=[c["name"] for c in BAD])
def test_bad_row_is_refused_naming_line_and_what_is_wrong(case):
    with pytest.raises(RowError) as info:
        parse_row(case["row"], 7)
    err = info.value
    assert err.line == 7
    assert err.message.startswith("line 7: ")
    for needle in case["error_mentions"]:
        assert needle in err.message or needle in (err.field or "")


@pytest.mark.parametrize("case", BAD, ids=[c["name"] for c in BAD])
def test_bad_row_in_a_file_is_refused_with_its_line_number(case):
    good = json.dumps(GOOD[0]["row"])
    data = "\n".join([good, good, json.dumps(case["row"]), good]).encode()
    with pytest.raises(DataFileError) as info:
        validate_jsonl_bytes(data, "train.jsonl")
    assert info.value.field == "train.jsonl:line 3"
    assert "line 3: " in info.value.message
    assert isinstance(info.value, InvalidRequest) and info.value.status == 400


@pytest.mark.parametrize("case", GOOD, ids=[c["name"] for c in GOOD])
def test_good_rows_are_accepted(case):
    row = parse_row(case["row"], 1)
    assert row["messages"][-1]["role"] == "assistant"


def test_broken_json_on_line_3_and_mixed_formats_on_line_5_are_both_named():
    """behaviours.md 9."""
    good = json.dumps(GOOD[0]["row"])
    mixed = json.dumps({"messages": GOOD[0]["row"]["messages"], "prompt": "p", "completion": "c"})
    data = "\n".join([good, good, '{"messages": [', good, mixed, good]).encode()
    with pytest.raises(DataFileError) as info:
        validate_jsonl_bytes(data, "train.jsonl")
    msg = info.value.message
    assert "train.jsonl has 2 bad lines" in msg
    assert "line 3: not valid JSON" in msg
    assert "line 5: the row mixes formats" in msg
    assert [d["line"] for d in info.value.details] == [3, 5]


def test_at_most_ten_bad_lines_are_listed():
    data = "\n".join(["nope"] * 14).encode()
    with pytest.raises(DataFileError) as info:
        validate_jsonl_bytes(data, "x.jsonl")
    assert info.value.message.count("not valid JSON") == 10
    assert "and 4 more bad lines" in info.value.message


def test_empty_file_and_non_utf8_are_refused():
    with pytest.raises(DataFileError, match="holds no rows"):
        validate_jsonl_bytes(b"\n\n", "x.jsonl")
    with pytest.raises(DataFileError, match="line 2"):
        validate_jsonl_bytes(b'{"a": 1}\n\xff\n', "x.jsonl")


def test_messages_and_tools_as_json_strings_equal_native_lists():
    native = GOOD[4]["row"]
    as_strings = {"messages": json.dumps(native["messages"]), "tools": json.dumps(native["tools"])}
    assert parse_row(as_strings, 1) == parse_row(native, 1)


def test_tool_call_arguments_string_and_object_normalise_to_the_same_object():
    """behaviours.md 8 (data side): arguments end up as one object, encoded once later."""
    row = json.loads(json.dumps(GOOD[4]["row"]))
    as_string = parse_row(row, 1)
    row["messages"][1]["tool_calls"][0]["function"]["arguments"] = {"order_id": "A-1042"}
    as_object = parse_row(row, 1)
    assert as_string == as_object
    assert as_string["messages"][1]["tool_calls"][0]["function"]["arguments"] == {
        "order_id": "A-1042"
    }


def test_single_turn_prompt_completion_becomes_two_messages():
    row = parse_row({"prompt": "Hi", "completion": "Hello"}, 1)
    assert row == {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    }


def test_content_parts_normalise_flags():
    row = parse_row(GOOD[10]["row"], 1)
    parts = row["messages"][1]["content"]
    assert parts == [
        {"type": "text", "text": "Draft.", "train": False},
        {"type": "text", "text": " Final answer.", "train": True},
    ]


@pytest.mark.parametrize(
    ("part", "mention"),
    [
        ({"type": "audio", "text": "x"}, "type"),
        ({"type": "image"}, "image"),
        ({"type": "image_url", "image_url": "x"}, "image_url"),
        ({"type": "text"}, "exactly one of text"),
        ({"type": "text", "text": "x", "weight": 2}, "weight"),
        ({"type": "text", "text": "x", "train": True, "weight": 0}, "disagree"),
        ({"type": "text", "text": "x", "train": "yes"}, "train"),
    ],
)
def test_bad_content_parts_are_refused(part, mention):
    row = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [part]}]}
    with pytest.raises(RowError, match=mention) as info:
        parse_row(row, 2)
    assert info.value.field.startswith("messages[1].content[0]")


def test_reasoning_and_tool_calls_only_on_assistant_messages():
    row = {
        "messages": [
            {"role": "user", "content": "q", "reasoning_content": "r"},
            {"role": "assistant", "content": "a"},
        ]
    }
    with pytest.raises(RowError, match="only assistant messages carry reasoning_content"):
        parse_row(row, 1)


def test_image_parts_are_kept_for_the_registry():
    row = parse_row(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": "./img.png"},
                        {"type": "text", "text": "What?"},
                    ],
                },
                {"role": "assistant", "content": "A cat."},
            ]
        },
        1,
    )
    assert row["messages"][0]["content"][0] == {"type": "image", "image": "./img.png"}
