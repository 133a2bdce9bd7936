"""``model:`` judges: the instructions a judge gets, what it is asked, and how its reply
becomes a score (seeds/001 "A base instruct model can be a model: judge", "The judge's
instructions"; FEATURES F124, F125).

**Instructions**, the first available of (:func:`judge_instructions`):

1. ``given``: ``graderInstructions`` given beside the grader (``--grader-instructions``);
2. ``judge-training``: the judge model's own training instructions (the system message
   its run trained with, or an ``instructions`` annotation on its registry version);
3. ``built-in``: :data:`BUILT_IN`, which carries the scored dataset's first system
   message, where it has one, as context.

**What the judge is asked** (:func:`judge_messages`): the instructions as the system
message, then one user message holding the conversation the model answered, the row's
reference answer (its ground truth, as a bundle grader gets it: :mod:`.rows`) and the
answer to grade, asking for a whole number from 0 (wrong) to 10 (fully correct).

**The score** (:func:`parse_score`): the judge's reply is its score N, read as ``N / 10``
(a score in [0, 1], like a bundle grader's). The request limits the reply to the strings
``0`` … ``10`` with ``guided_choice`` (:mod:`akka_optimize.serving.batching`), so any
model, a base instruct model too, replies in the format; a reply that still holds no
number from 0 to 10 (an engine that ignored the limit, an empty reply) is an example
error with the reply quoted.

**In a comparison** the judge picks the better answer of each pair
(:func:`pair_messages`): it sees both answers, labelled ``A`` and ``B``, and replies
``A``, ``B`` or ``tie`` (limited to :data:`PAIR_CHOICES`). The candidate is ``A`` on even
rows and ``B`` on odd ones, so a judge that prefers a position favours neither model. The
preferred answer scores 1 and the other 0; a tie scores 0.5 each, so the comparison's wins,
losses, ties and paired difference read as for a bundle grader.

The judge is served through its own endpoint, in the evaluation's project (the same
endpoint machinery and worker as ``training endpoints create``); the evaluation's worker
reaches it through the service (``POST /v1/training/runs/ID/attempts/N/judge/chat/completions``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..rows import content_text

SCORE_CHOICES = [str(i) for i in range(11)]
"""What a judge may reply: a whole number from 0 to 10."""

MAX_SCORE = 10
"""The largest score a judge gives; its reply N scores ``N / MAX_SCORE``."""

SOURCES = ("given", "judge-training", "built-in")
"""Where a judge's instructions came from, in the order they are looked for."""

BUILT_IN = (
    "You are a strict grader. You are shown a task an assistant was given, the reference "
    "answer, and the assistant's answer. Judge whether the assistant's answer is correct "
    "and complete against the reference answer: its final result matters more than its "
    "wording. Reply with the score only: a whole number from 0 (wrong) to 10 (fully "
    "correct)."
)
"""The built-in judge instructions (the dataset's first system message is appended)."""

_CONTEXT = "\n\nThe assistant was given these instructions, for context:\n"

_NUMBER_RE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)(?![\d.])")


def first_system_message(rows: list[dict[str, Any]]) -> str | None:
    """The text of the first system message of the first row that has one, or None."""
    for row in rows:
        for m in row.get("messages") or []:
            if m.get("role") == "system" and content_text(m.get("content")).strip():
                return content_text(m.get("content"))
    return None


def training_instructions(judge: Any) -> str | None:
    """A judge model version's own training instructions (its registry metadata's
    ``instructions``, or an ``instructions`` annotation), or None."""
    meta = getattr(judge, "metadata", None) or {}
    text = meta.get("instructions") or (meta.get("annotations") or {}).get("instructions")
    return text if isinstance(text, str) and text.strip() else None


def judge_instructions(
    given: str | None, judge: Any, rows: list[dict[str, Any]], built_in: str = BUILT_IN
) -> tuple[str, str]:
    """The instructions a judge gets and their source (one of :data:`SOURCES`).

    Args:
        given: ``graderInstructions`` from the request (or project settings), or None.
        judge: the judge's resolved model version (:class:`akka_optimize.registry.ResolvedVersion`).
        rows: the scored dataset's rows (for the built-in instructions' context).
        built_in: the last resort's text (:data:`BUILT_IN` for an evaluation; a curation
            has its own, :data:`akka_optimize.evals.curation.kind.BUILT_IN`).
    """
    if given is not None and given.strip():
        return given, "given"
    own = training_instructions(judge)
    if own is not None:
        return own, "judge-training"
    system = first_system_message(rows)
    return (built_in + (_CONTEXT + system if system else "")), "built-in"


def conversation_text(prompt: list[dict[str, Any]]) -> str:
    lines = []
    for m in prompt:
        if m.get("role") == "system":
            continue
        lines.append(f"{m.get('role', 'user')}: {content_text(m.get('content'))}")
    return "\n".join(lines)


def judge_messages(
    instructions: str, prompt: list[dict[str, Any]], ground_truth: Any, answer: str
) -> list[dict[str, str]]:
    """The chat messages that ask a judge to score one answer (module docstring).

    Args:
        instructions: from :func:`judge_instructions`.
        prompt: the messages the model answered (:attr:`akka_optimize.evals.rows.EvalRow.prompt`).
        ground_truth: the row's reference answer (a JSON value; text is quoted as is).
        answer: the model's answer.
    """
    truth = ground_truth if isinstance(ground_truth, str) else json.dumps(ground_truth)
    user = (
        f"Task:\n{conversation_text(prompt)}\n\nReference answer:\n{truth}\n\n"
        f"Answer to grade:\n{answer}\n\n"
        f"Score the answer from 0 to {MAX_SCORE}; reply with the number only."
    )
    return [{"role": "system", "content": instructions}, {"role": "user", "content": user}]


def judge_request(
    messages: list[dict[str, str]], choices: list[str] | None = None, seed: int = 0
) -> dict[str, Any]:
    """The chat completion body sent to the judge's endpoint: greedy, a few tokens, the
    reply limited to ``choices`` (:data:`SCORE_CHOICES` unless given)."""
    return {
        "messages": messages,
        "temperature": 0,
        "max_tokens": 4,
        "seed": seed,
        "guided_choice": list(choices or SCORE_CHOICES),
    }


def parse_score(reply: str) -> float:
    """A judge's reply as a score in [0, 1]: its last number N, read as ``N / 10``.

    Raises:
        ValueError: the reply holds no number, or its last number is outside 0…10 (the
            message quotes the reply, cut to 80 characters).
    """
    found = _NUMBER_RE.findall(reply or "")
    quoted = json.dumps((reply or "")[:80])
    if not found:
        raise ValueError(f"the judge's reply {quoted} holds no score from 0 to {MAX_SCORE}")
    value = float(found[-1])
    if not 0 <= value <= MAX_SCORE:
        raise ValueError(f"the judge's reply {quoted} scores {value:g}, outside 0 to {MAX_SCORE}")
    return value / MAX_SCORE


PAIR_CHOICES = ["A", "B", "tie"]
"""What a judge may reply when it picks the better of two answers."""

PAIR_INSTRUCTIONS = (
    " You are shown two answers, A and B, to the same task: reply with the letter of the "
    "better answer, A or B, or tie when neither is better."
)
"""Appended to the instructions when the judge compares two answers."""


def pair_messages(
    instructions: str, prompt: list[dict[str, Any]], ground_truth: Any, a: str, b: str
) -> list[dict[str, str]]:
    """The chat messages that ask a judge which of answers ``a`` and ``b`` is better."""
    truth = ground_truth if isinstance(ground_truth, str) else json.dumps(ground_truth)
    user = (
        f"Task:\n{conversation_text(prompt)}\n\nReference answer:\n{truth}\n\n"
        f"Answer A:\n{a}\n\nAnswer B:\n{b}\n\n"
        "Which answer is better? Reply A, B or tie."
    )
    return [
        {"role": "system", "content": instructions + PAIR_INSTRUCTIONS},
        {"role": "user", "content": user},
    ]


def parse_preference(reply: str) -> str:
    """``A``, ``B`` or ``tie`` from a judge's reply (its first word, any case).

    Raises:
        ValueError: the reply names none of them (quoted, cut to 80 characters).
    """
    word = (reply or "").strip().split()
    first = word[0].strip(".,:;!*\"'()").lower() if word else ""
    for choice in PAIR_CHOICES:
        if first == choice.lower():
            return choice
    raise ValueError(
        f"the judge's reply {json.dumps((reply or '')[:80])} picks neither A, B nor tie"
    )
