"""What an evaluation asks and what its grader receives, from one dataset row.

A row of an evaluation dataset is a conversation row like any other (``data/rows.py``):
it ends with an assistant message. The **prompt** is every message before that last
assistant message (with the row's ``tools``); the model's answer to it is scored. The
grader's arguments follow veRL's reward-function convention
(``compute_score(data_source, solution_str, ground_truth, extra_info)``,
``verl/utils/reward_score/__init__.py``):

- ``solution_str``: the model's answer (text);
- ``ground_truth``: the row's ``ground_truth`` field when it has one (any JSON value),
  else the text of its last assistant message (the reference answer; GSM8K's ends with
  ``#### 42``);
- ``data_source``: the row's ``data_source`` field, else the dataset's name (``gsm8k/val``);
- ``extra_info``: the row's ``extra_info`` object plus ``index`` (the 0-based row number)
  and ``dataset`` (the pinned dataset version).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest


@dataclass(frozen=True)
class EvalRow:
    """One example of an evaluation.

    Attributes:
        index: 0-based row number in the dataset.
        prompt: the messages the model answers (the row without its last assistant message).
        tools: the row's tool definitions, or None.
        ground_truth / data_source / extra_info: the grader's arguments (module docstring).
    """

    index: int
    prompt: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    ground_truth: Any
    data_source: str
    extra_info: dict[str, Any]


def content_text(content: Any) -> str:
    """A message's ``content`` as text: a string as is, text parts joined, else ""."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def eval_rows(rows: list[dict[str, Any]], dataset: str, data_source: str) -> list[EvalRow]:
    """The examples of an evaluation, one per row, in dataset order.

    Args:
        rows: parsed rows (:func:`akka_optimize.data.rows.parse_row` output).
        dataset: the pinned dataset version (``ns/name:vN@sha256:…``), for ``extra_info``.
        data_source: the default ``data_source`` (the dataset's ``ns/name``).

    Raises:
        InvalidRequest: a row has no ground truth (neither a ``ground_truth`` field nor any
            text in its last assistant message), or nothing before it to answer; the message
            names the 1-based row number and the field ``dataset``.
    """
    out: list[EvalRow] = []
    for i, row in enumerate(rows):
        messages = row.get("messages") or []
        answered = bool(messages) and messages[-1].get("role") == "assistant"
        prompt = messages[:-1] if answered else messages  # a prompt row asks its last message
        if not any(m.get("role") == "user" for m in prompt):
            raise InvalidRequest(
                f"Dataset {dataset} row {i + 1}: nothing to answer; an evaluation row needs a "
                "user message before its last assistant message (the reference answer).",
                field="dataset",
            )
        truth = row.get("ground_truth")
        if truth is None:
            truth = content_text(messages[-1].get("content")) if answered else ""
            if not truth.strip():
                raise InvalidRequest(
                    f"Dataset {dataset} row {i + 1} has no ground truth for the grader: give "
                    "the row a ground_truth field or a reference answer as its last assistant "
                    "message.",
                    field="dataset",
                )
        out.append(
            EvalRow(
                index=i,
                prompt=prompt,
                tools=row.get("tools"),
                ground_truth=truth,
                data_source=row.get("data_source") or data_source,
                extra_info={**(row.get("extra_info") or {}), "index": i, "dataset": dataset},
            )
        )
    return out
