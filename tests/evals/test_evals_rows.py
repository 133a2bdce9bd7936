"""What a grader receives from a row (evals/rows.py) and the row fields that carry it
(data/rows.py: ``ground_truth``, ``data_source``, ``extra_info``)."""

from __future__ import annotations

import pytest

from akka_optimize.data.rows import RowError, parse_row
from akka_optimize.errors import InvalidRequest
from akka_optimize.evals.rows import eval_rows
from akka_optimize.evals.worker import summary

DS = "proj/val:v1@sha256:" + "0" * 64


def _row(**extra):
    msgs = [
        {"role": "system", "content": "Answer with #### N."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "It is 4.\n#### 4"},
    ]
    return {"messages": msgs, **extra}


def test_the_reference_answer_is_the_ground_truth_and_the_prompt_is_what_precedes_it():
    (ex,) = eval_rows([parse_row(_row(), 1)], DS, "proj/val")
    assert ex.ground_truth == "It is 4.\n#### 4"
    assert [m["role"] for m in ex.prompt] == ["system", "user"]
    assert ex.data_source == "proj/val"
    assert ex.extra_info == {"index": 0, "dataset": DS}


def test_row_fields_override_the_defaults_and_are_kept_by_parsing():
    row = parse_row(_row(ground_truth=4, data_source="gsm8k", extra_info={"split": "test"}), 1)
    assert (row["ground_truth"], row["data_source"], row["extra_info"]) == (
        4,
        "gsm8k",
        {"split": "test"},
    )
    (ex,) = eval_rows([row], DS, "proj/val")
    assert ex.ground_truth == 4 and ex.data_source == "gsm8k"
    assert ex.extra_info == {"split": "test", "index": 0, "dataset": DS}


@pytest.mark.parametrize(
    "extra, field",
    [({"data_source": 3}, "data_source"), ({"extra_info": [1]}, "extra_info")],
)
def test_grader_fields_of_the_wrong_type_are_refused_naming_line_and_field(extra, field):
    with pytest.raises(RowError) as e:
        parse_row(_row(**extra), 7)
    assert e.value.field.endswith(field) and "7" in e.value.message


def test_a_row_without_ground_truth_or_question_is_refused_naming_it():
    empty = parse_row(
        {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": " "}]},
        1,
    )
    with pytest.raises(InvalidRequest, match="row 2 has no ground truth"):
        eval_rows([parse_row(_row(), 1), empty], DS, "proj/val")


def test_summary_is_the_mean_and_its_standard_error_over_scored_examples():
    got = summary([1.0, 0.0, None, 1.0, 0.0])
    assert got["mean"] == 0.5 and got["count"] == 5 and got["errors"] == 1
    assert got["stderr"] == pytest.approx((1 / 3) ** 0.5 / 2)  # sd 0.577 / sqrt(4)
    assert summary([None])["mean"] is None and summary([None])["errorShare"] == 1.0


def test_paired_statistics_leave_out_pairs_with_an_error():
    from akka_optimize.evals.stats import paired

    got = paired([1.0, 0.5, 0.0, None, 1.0], [0.0, 0.5, 1.0, 1.0, 0.0])
    assert (got["wins"], got["losses"], got["ties"], got["pairs"], got["errors"]) == (2, 1, 1, 4, 1)
    d = [1.0, 0.0, -1.0, 1.0]
    mean = sum(d) / 4
    sd = (sum((x - mean) ** 2 for x in d) / 3) ** 0.5
    assert got["meanDifference"] == pytest.approx(0.25)
    assert got["ci95"] == pytest.approx(
        [mean - 3.182 * sd / 2, mean + 3.182 * sd / 2]
    )  # t(0.975, 3)
    assert paired([None], [1.0])["meanDifference"] is None
    with pytest.raises(ValueError, match="2 candidate scores but 1"):
        paired([1.0, 1.0], [1.0])


def test_a_prompt_row_is_asked_whole_and_graded_against_its_ground_truth():
    """A prompt row (issue 18 item 1): a conversation ending with a user message, or a
    prompt without a completion, with its reference answer in ground_truth."""
    chat = parse_row({"messages": _row()["messages"][:2], "ground_truth": "4"}, 1)
    single = parse_row({"prompt": "2+2?", "ground_truth": 4}, 2)
    a, b = eval_rows([chat, single], DS, "proj/val")
    assert [m["role"] for m in a.prompt] == ["system", "user"] and a.ground_truth == "4"
    assert b.prompt == [{"role": "user", "content": "2+2?"}] and b.ground_truth == 4
    for row, field in (
        ({"messages": _row()["messages"][:2]}, "messages[1]"),  # no ground_truth: refused
        ({"prompt": "2+2?"}, "completion"),
    ):
        with pytest.raises(RowError) as info:
            parse_row(row, 3)
        assert info.value.field == field, info.value
