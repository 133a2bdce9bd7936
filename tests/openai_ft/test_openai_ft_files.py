"""OpenAI's JSONL formats converted to this platform's rows (issue 51 item 1), without a
service: supervised (with ``weight``), reinforcement (reference fields kept for graders)
and preference rows; a bad line refused with its number and what is wrong."""

from __future__ import annotations

import json

import pytest

from akka_optimize.core.openai_ft.errors import OpenAIError
from akka_optimize.core.openai_ft.files import convert_file
from akka_optimize.data.rows import parse_row


def _jsonl(*rows: object) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


U = {"role": "user", "content": "Capital of France?"}
A = {"role": "assistant", "content": "Paris"}


def test_supervised_rows_keep_messages_and_weight_zero_turns_are_not_trained() -> None:
    kind, rows = convert_file(
        _jsonl({"messages": [{"role": "developer", "content": "Be brief."}, U,
                             {**A, "weight": 0}, U, {**A, "weight": 1}]})
    )  # fmt: skip
    assert kind == "supervised"
    msgs = rows[0]["messages"]
    assert msgs[0]["role"] == "system"
    assert msgs[2]["content"] == [{"type": "text", "text": "Paris", "train": False}]
    assert msgs[4] == A


def test_reinforcement_rows_keep_their_reference_fields_as_ground_truth() -> None:
    kind, rows = convert_file(_jsonl({"messages": [U], "answer": "Paris", "tags": ["geo"]}))
    assert kind == "reinforcement"
    assert rows[0] == {"messages": [U], "ground_truth": {"answer": "Paris", "tags": ["geo"]}}


def test_preference_rows_are_kept_as_pairs_the_data_layer_reads() -> None:
    other = {"role": "assistant", "content": "Rome"}
    dev = {"role": "developer", "content": "Answer briefly."}
    kind, rows = convert_file(
        _jsonl(
            {
                "input": {"messages": [dev, U]},
                "preferred_output": [A],
                "non_preferred_output": [other],
            }
        )
    )
    assert kind == "dpo"
    sys_msg = {"role": "system", "content": "Answer briefly."}
    assert rows[0] == {
        "input": {"messages": [sys_msg, U]},
        "preferred_output": [A],
        "non_preferred_output": [other],
    }
    assert parse_row(rows[0], 1) == {"prompt": [sys_msg, U], "chosen": [A], "rejected": [other]}


@pytest.mark.parametrize(
    ("pair", "words"),
    [({"preferred_output": [A], "non_preferred_output": [A]}, "Line 2: non_preferred_output: is identical"),
     ({"preferred_output": [A, A], "non_preferred_output": [U]}, "Line 2: preferred_output and non_preferred_output hold assistant"),
     ({"preferred_output": [A, A], "non_preferred_output": [A]}, "Line 2: preferred_output: must hold exactly one message"),
     ({"preferred_output": [A]}, "Line 2: non_preferred_output must be a non-empty list")],
)  # fmt: skip
def test_a_bad_pair_is_refused_with_its_line(pair: dict, words: str) -> None:
    good = {"input": {"messages": [U]}, "preferred_output": [A], "non_preferred_output": [U | {"role": "assistant"}]}  # fmt: skip
    with pytest.raises(OpenAIError) as e:
        convert_file(_jsonl(good, {"input": {"messages": [U]}, **pair}))
    assert e.value.code == "invalid_file_format" and words in e.value.message, e.value.message


@pytest.mark.parametrize(
    ("data", "words"),
    [(_jsonl({"messages": [U, A]}) + b"{not json\n", "Line 2: not valid JSON"),
     (_jsonl({"messages": [U, A]}, {"messages": [U]}), "Line 2: a reinforcement row in a file of supervised"),
     (_jsonl({"messages": [{"role": "robot", "content": "x"}, A]}), "Line 1: messages[0].role 'robot'"),
     (_jsonl({"messages": [U, A], "extra": 1}), "Line 1: unknown field 'extra'"),
     (_jsonl({"messages": [U, {**A, "weight": 2}]}), "Line 1: messages[1].weight must be 0 or 1"),
     (_jsonl({"prompt": "x"}), "Line 1: missing messages"),
     (b"\n\n", "holds no rows"),
     (b"\xff\xfe", "not UTF-8")],
)  # fmt: skip
def test_a_bad_line_is_refused_with_its_number_and_what_is_wrong(data: bytes, words: str) -> None:
    with pytest.raises(OpenAIError) as e:
        convert_file(data)
    assert e.value.param == "file" and e.value.code == "invalid_file_format"
    assert words in e.value.message, e.value.message
    assert e.value.body()["error"]["type"] == "invalid_request_error"
