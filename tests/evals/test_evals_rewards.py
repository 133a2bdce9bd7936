"""The built-in reward ``builtin:math`` (issue 18 item 2): the final answer against the
gold answer, and what counts as a final answer."""

from __future__ import annotations

import pytest

from akka_optimize.reinforcement.rewards import final_answer, math_reward

GOLD = "Natalia sold 48/2 = 24 clips in May.\n#### 72"


@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        ("So the answer is #### 72", 1.0),
        ("She sold 72 clips.\n#### 72.", 1.0),
        ("The total is \\boxed{72}", 1.0),
        ("\\boxed{\\frac{1}{2}} no, \\boxed{72.0}", 1.0),  # the last box; numbers by value
        ("#### $1,072", 0.0),
        ("#### 71", 0.0),
        ("72", 0.0),  # no marker: no final answer
        ("####", 0.0),
    ],
)
def test_the_completions_final_answer_is_compared_with_the_gold_answer(completion, reward) -> None:
    assert math_reward(completion, GOLD) == reward


def test_gold_without_a_marker_is_the_whole_ground_truth_and_text_compares_case_blind() -> None:
    assert math_reward("#### 1,000", "1000") == 1.0
    assert math_reward("\\boxed{Paris}", "paris") == 1.0
    assert final_answer("a \\boxed{x^{2}} b") == "x^{2}"  # braces balanced
    assert final_answer("no answer here") is None
