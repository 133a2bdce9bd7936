"""GSM8K scoring bundle: the exact final answer after ``####``, and a format check.

veRL's reward-function convention (``verl/utils/reward_score/gsm8k.py`` scores the same
way): ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``.
``ground_truth`` is the row's reference answer (its last assistant message, a worked
solution ending ``#### 72``); the score is 1.0 when the answer's last ``#### N`` line
holds the same number, else 0.0. ``formatted`` tells whether the answer ended with a
``#### N`` line at all.

Register it with ``akka registry bundles register gsm8k/scoring -f examples/gsm8k/scoring``
and grade with ``bundle:gsm8k/scoring#reward``.
"""

import re

ANSWER = re.compile(r"####\s*\$?(-?[\d,]*\.?\d+)")


def final_number(text):
    """The number of the last ``#### N`` in ``text``, without commas; None if absent."""
    found = ANSWER.findall(str(text))
    return found[-1].replace(",", "").rstrip(".") if found else None


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """1.0 for the reference's final number after ``####``, else 0.0 (with details)."""
    got, want = final_number(solution_str), final_number(ground_truth)
    return {
        "score": float(got is not None and got == want),
        "formatted": got is not None,
        "final": got,
        "expected": want,
    }


def format_score(data_source, solution_str, ground_truth, extra_info=None):
    """1.0 when the answer ends with a ``#### N`` line (the format the model was taught)."""
    return float(final_number(solution_str) is not None)
