"""Preference rows (issue 50 item 2): both shapes normalise to one canonical pair; other
shapes, empty sides and identical sides are refused naming the line; only the answer is
scored, masked from the chat template; the prompt-prefix rule holds on both sides."""

from __future__ import annotations

from typing import Any

import pytest

from akka_optimize.data.jsonl import validate_jsonl_bytes
from akka_optimize.data.masks import prepare_examples
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.preference import pair_findings, prepare_pairs
from akka_optimize.data.render import RenderError
from akka_optimize.data.row_fields import DataFileError, RowError
from akka_optimize.data.rows import parse_row
from akka_optimize.errors import InvalidRequest

USER = {"role": "user", "content": "What is 2+2?"}
GOOD = {"role": "assistant", "content": "2+2 is 4."}
BAD = {"role": "assistant", "content": "2+2 is 5."}
OPENAI = {"input": {"messages": [USER]}, "preferred_output": [GOOD], "non_preferred_output": [BAD]}
TRL = {"prompt": [USER], "chosen": [GOOD], "rejected": [BAD]}


def test_both_shapes_normalise_to_the_same_canonical_pair() -> None:
    a, b = parse_row(OPENAI, 1), parse_row(TRL, 1)
    assert a == b
    assert a["prompt"] == [{"role": "user", "content": "What is 2+2?"}]
    assert a["chosen"][0]["content"] == "2+2 is 4." and a["rejected"][0]["content"] == "2+2 is 5."


def test_tools_of_an_openai_row_are_kept() -> None:
    tool = {"type": "function", "function": {"name": "add", "parameters": {}}}
    row = {**OPENAI, "input": {"messages": [USER], "tools": [tool]}}
    assert parse_row(row, 3)["tools"] == [tool]


@pytest.mark.parametrize(
    ("row", "field", "mention"),
    [
        ({**TRL, "chosen": []}, "chosen", "is empty"),
        ({**OPENAI, "non_preferred_output": []}, "non_preferred_output", "is empty"),
        ({**TRL, "chosen": [{"role": "assistant", "content": "  "}]}, "chosen", "is empty"),
        ({**TRL, "rejected": [GOOD]}, "rejected", "identical to chosen"),
        ({**OPENAI, "non_preferred_output": [GOOD]}, "non_preferred_output", "identical"),
        ({"prompt": "2+2?", "chosen": "4", "rejected": "5"}, "prompt", "list of messages"),
        ({**TRL, "chosen": [USER]}, "chosen", "role assistant"),
        ({"chosen": [GOOD], "rejected": [BAD]}, "", "keys found: chosen, rejected"),
        ({**OPENAI, "prompt": [USER]}, "", "keys found"),
        ({**OPENAI, "input": [USER]}, "input", "messages"),
        ({**TRL, "prompt": [{"role": "user"}]}, "prompt[0]", ""),
    ],
)
def test_a_row_of_another_shape_is_refused_naming_its_line(
    row: dict[str, Any], field: str, mention: str
) -> None:
    with pytest.raises(RowError) as info:
        parse_row(row, 7)
    assert info.value.message.startswith("line 7: ")
    assert (info.value.field or "").startswith(field) and mention in info.value.message


def test_a_file_of_pairs_registers_and_a_bad_line_is_named() -> None:
    import json

    good = (json.dumps(TRL) + "\n" + json.dumps(OPENAI) + "\n").encode()
    assert len(validate_jsonl_bytes(good, "pairs.jsonl")) == 2
    bad = good + json.dumps({**TRL, "rejected": [GOOD]}).encode() + b"\n"
    with pytest.raises(DataFileError) as info:
        validate_jsonl_bytes(bad, "pairs.jsonl")
    assert "line 3: rejected: is identical to chosen" in info.value.message


def test_only_the_answer_is_scored_on_both_sides(smollm2_tokenizer: Any) -> None:
    rows = [parse_row(TRL, 1)]
    pairs = prepare_pairs(smollm2_tokenizer, rows, 512).pairs
    assert len(pairs) == 1
    for ex, text in ((pairs[0].chosen, "2+2 is 4."), (pairs[0].rejected, "2+2 is 5.")):
        scored = [t for t, w in zip(ex.input_ids, ex.weights, strict=True) if w]
        decoded = smollm2_tokenizer.decode(scored)
        assert decoded.startswith(text) and "What is" not in decoded  # answer + end of turn
        text_p = smollm2_tokenizer.apply_chat_template(
            [USER], add_generation_prompt=True, tokenize=False
        )
        prompt = smollm2_tokenizer(text_p, add_special_tokens=False)["input_ids"]
        assert ex.input_ids[: len(prompt)] == list(prompt)  # prompt-prefix rule
        assert not any(ex.weights[: len(prompt)])


def test_findings_count_trainable_pairs_and_name_rows_that_do_not_fit(
    smollm2_tokenizer: Any,
) -> None:
    long_answer = {"role": "assistant", "content": "four " * 300}
    rows = [parse_row(TRL, 1), parse_row({**TRL, "chosen": [long_answer]}, 2), parse_row(TRL, 3)]
    f = pair_findings(smollm2_tokenizer, rows, 128, [1, 2, 3])
    assert f["rows"] == 3 and f["trainable_pairs"] == 2 and f["truncated_rows"] == [2]
    prepared = prepare_pairs(smollm2_tokenizer, rows, 128)
    assert [p.row for p in prepared.pairs] == [1, 3]
    assert prepared.report["pairs"] == 2 and prepared.report["dropped_too_long"] == [2]
    with pytest.raises(InvalidRequest) as info:
        prepare_pairs(smollm2_tokenizer, rows, 128, "refuse")
    assert "row 2" in info.value.message and info.value.field == "config.maxSeqLength"


def test_a_completion_that_merges_with_the_generation_prompt_is_refused_naming_the_side(
    smollm2_tokenizer: Any,
) -> None:
    merged = {"role": "assistant", "content": "\n\n4"}  # whitespace merges with the prompt
    rows = [parse_row({**TRL, "rejected": [merged]}, 5)]
    with pytest.raises(RenderError) as info:
        prepare_pairs(smollm2_tokenizer, rows, 512, row_numbers=[5])
    assert info.value.row == 5 and "non-preferred answer" in info.value.message


def test_a_supervised_run_refuses_pairs_and_a_preference_run_refuses_conversations(
    smollm2_tokenizer: Any,
) -> None:
    with pytest.raises(InvalidRequest) as info:
        prepare_examples(smollm2_tokenizer, [parse_row(TRL, 1)], LossPolicy(), 512)
    assert "row 1 is a preference pair" in info.value.message and "dpo" in info.value.message
    convo = parse_row({"messages": [USER, GOOD]}, 4)
    with pytest.raises(RowError) as info2:
        prepare_pairs(smollm2_tokenizer, [parse_row(TRL, 1), convo], 512, row_numbers=[1, 4])
    assert info2.value.line == 4 and "not a preference pair" in info2.value.message
