"""``model:`` judges without a service (issue 17 item 1; FEATURES F124, F125): where the
instructions come from, what the judge is asked, and how its reply becomes a score."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from akka_optimize.evals.graders import judges

ROWS = [
    {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
    {
        "messages": [
            {"role": "system", "content": "Answer with #### N."},
            {"role": "user", "content": "3+3?"},
            {"role": "assistant", "content": "#### 6"},
        ]
    },
]


def _model(**meta):
    return SimpleNamespace(metadata=meta)


def test_given_instructions_come_first_then_the_judges_then_the_built_in() -> None:
    trained = _model(instructions="Grade like a teacher.")
    assert judges.judge_instructions("Be strict.", trained, ROWS) == ("Be strict.", "given")
    assert judges.judge_instructions(None, trained, ROWS) == (
        "Grade like a teacher.",
        "judge-training",
    )
    annotated = _model(annotations={"instructions": "From an annotation."})
    assert judges.judge_instructions(None, annotated, ROWS)[1] == "judge-training"
    text, source = judges.judge_instructions("  ", _model(), ROWS)
    assert source == "built-in" and text.startswith(judges.BUILT_IN)
    # the scored dataset's first system message (row 2's: row 1 has none) is the context
    assert text.endswith("Answer with #### N.")
    plain = [ROWS[0]]
    assert judges.judge_instructions(None, _model(), plain) == (judges.BUILT_IN, "built-in")


def test_the_judge_sees_the_task_the_reference_and_the_answer() -> None:
    msgs = judges.judge_messages("Be strict.", ROWS[1]["messages"][:-1], "#### 6", "It is 6.")
    assert msgs[0] == {"role": "system", "content": "Be strict."}
    user = msgs[1]["content"]
    assert "user: 3+3?" in user and "#### 6" in user and "It is 6." in user
    assert "Answer with" not in user  # the model's system message is not the task
    body = judges.judge_request(msgs)
    assert body["guided_choice"] == [str(i) for i in range(11)] and body["temperature"] == 0
    pair = judges.pair_messages("Be strict.", ROWS[0]["messages"][:-1], "4", "four", "5")
    assert "Answer A:\nfour" in pair[1]["content"] and "Answer B:\n5" in pair[1]["content"]
    assert pair[0]["content"].startswith("Be strict.") and "A or B" in pair[0]["content"]


@pytest.mark.parametrize(
    ("reply", "score"),
    [("7", 0.7), ("10", 1.0), ("0", 0.0), ("Score: 8", 0.8), ("I'd say 3 then 9.5", 0.95)],
)
def test_a_reply_scores_its_last_number_over_ten(reply: str, score: float) -> None:
    assert judges.parse_score(reply) == pytest.approx(score)


@pytest.mark.parametrize(("reply", "words"), [("", "no score"), ("great", "no score"),
                                              ("11", "outside"), ("-", "no score")])  # fmt: skip
def test_a_reply_without_a_score_from_0_to_10_is_refused_quoting_it(reply, words) -> None:
    with pytest.raises(ValueError, match=words) as err:
        judges.parse_score(reply)
    assert repr(reply)[1:-1] in str(err.value) or reply == ""


def test_a_pair_reply_names_a_b_or_tie() -> None:
    assert judges.parse_preference("A") == "A"
    assert judges.parse_preference(" b. because") == "B"
    assert judges.parse_preference("Tie") == "tie"
    with pytest.raises(ValueError, match="neither A, B nor tie"):
        judges.parse_preference("C")
