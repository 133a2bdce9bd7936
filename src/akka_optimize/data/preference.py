"""Preference rows: a prompt with a preferred and a non-preferred answer (issue 50 item 2).

Two shapes are accepted, each normalised to one canonical form:

* OpenAI's preference fine-tuning rows::

    {"input": {"messages": [{"role": "user", "content": "2+2?"}], "tools": [...]},
     "preferred_output": [{"role": "assistant", "content": "4"}],
     "non_preferred_output": [{"role": "assistant", "content": "5"}]}

* TRL's conversational preference rows::

    {"prompt": [{"role": "user", "content": "2+2?"}],
     "chosen": [{"role": "assistant", "content": "4"}],
     "rejected": [{"role": "assistant", "content": "5"}]}

The canonical row (what the registry stores and :func:`pair_rows` reads) is TRL's, with
``tools`` beside it when the row declares tools::

    {"prompt": [messages], "chosen": [assistant message], "rejected": [assistant message],
     "tools"?: [...]}

Each side is one assistant message (text and/or tool calls). A row of another shape (TRL's
plain-text ``prompt``/``chosen``/``rejected`` strings, a side that is not a list of one
assistant message, unknown keys), an empty side, or two identical sides is refused naming
its line. Each message is checked as a training row's message is
(:func:`akka_optimize.data.rows.parse_row`).

Tokens and masks (:func:`prepare_pairs`): each side is rendered as the conversation
``prompt + [answer]`` by the base model's chat template and masked from character offsets as
a supervised row whose last assistant turn alone trains (:mod:`akka_optimize.data.masks`),
so only the answer is scored. The prompt-prefix rule of DATA-AND-TRAINING-RULES.md §2
(serving = training: the prompt rendered with the generation prompt is a token prefix of
the row) is checked on both sides, by :func:`akka_optimize.data.masks.encode_rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .masks import encode_rows, examples_report, length_stats, refuse_untrainable, trains
from .policy import LossPolicy
from .preference_rows import parse_preference_row as parse_preference_row
from .render import RenderError
from .row_fields import RowError
from .types import PreferencePair

SIDE_NAMES = {"chosen": "preferred answer", "rejected": "non-preferred answer"}

ANSWER_POLICY = LossPolicy(
    assistant_turns="last", train_on_tool_calls=True, train_on_tool_results=False
)
"""Only the answer (the last assistant message of each side) is scored."""


def pair_rows(row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two conversations of a canonical preference row, as normalised training rows:
    ``prompt + chosen`` and ``prompt + rejected`` (with the row's ``tools``)."""
    extra = {"tools": row["tools"]} if row.get("tools") else {}
    return (
        {"messages": [*row["prompt"], *row["chosen"]], **extra},
        {"messages": [*row["prompt"], *row["rejected"]], **extra},
    )


@dataclass
class PreparedPairs:
    """Pairs ready to train and what happened to the rows: ``report`` is
    :func:`akka_optimize.data.masks.examples_report`'s over both sides' conversations, with
    ``pairs`` (kept pairs) added; a pair is dropped when either side is too long."""

    pairs: list[PreferencePair]
    report: dict[str, Any] = field(default_factory=dict)


def refuse_other_shapes(rows: Sequence[dict[str, Any]], numbers: Sequence[int]) -> None:
    """Raise naming the first row of ``rows`` that is not a canonical preference row.

    Raises:
        RowError: (code ``invalid_row``) a conversation row where a pair is expected."""
    for row, n in zip(rows, numbers, strict=True):
        if "chosen" not in row or "rejected" not in row:
            raise RowError(
                n,
                "",
                "is not a preference pair: a preference run (config.method dpo) trains rows "
                "of OpenAI's {input, preferred_output, non_preferred_output} or TRL's "
                "{prompt, chosen, rejected} shape",
            )


def encode_pairs(
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    numbers: Sequence[int],
    errors: list[RenderError] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[PreferencePair]:
    """Tokenize and mask both sides of each canonical row (module docstring). A row either
    side of which cannot be rendered, or breaks the prompt-prefix rule, is left out and
    named in ``errors`` (or raised when ``errors`` is None).

    Raises:
        RowError: a row that is not a preference pair.
        RenderError: the first row refused, naming the side, unless ``errors`` collects it.
    """
    rows, numbers = list(rows), list(numbers)
    refuse_other_shapes(rows, numbers)
    sides = [pair_rows(r) for r in rows]
    found: list[RenderError] = []
    encoded = {}
    for i, key in enumerate(("chosen", "rejected")):
        side_errors: list[RenderError] = []
        done = encode_rows(tokenizer, [s[i] for s in sides], ANSWER_POLICY, numbers, side_errors)
        encoded[key] = {e.example.row: e.example for e in done}
        found += [RenderError(e.row, f"{SIDE_NAMES[key]}: {_reason(e)}") for e in side_errors]
        if progress is not None:
            progress(len(rows) * (i + 1) // 2)
    if found and errors is None:
        raise min(found, key=lambda e: e.row)
    if errors is not None:
        errors += sorted(found, key=lambda e: e.row)
    return [
        PreferencePair(encoded["chosen"][n], encoded["rejected"][n], n)
        for n in numbers
        if n in encoded["chosen"] and n in encoded["rejected"]
    ]


def _reason(err: RenderError) -> str:
    return err.message.split(": ", 1)[1] if ": " in err.message else err.message


def prepare_pairs(
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    max_seq_length: int,
    on_too_long: Literal["drop", "refuse"] = "drop",
    row_numbers: Sequence[int] | None = None,
    progress: Callable[[int], None] | None = None,
) -> PreparedPairs:
    """The pairs of a preference dataset, as :func:`akka_optimize.data.masks.prepare_examples`
    prepares a supervised one: a pair either side of which is longer than
    ``max_seq_length`` tokens is dropped (or refused), one whose side scores no token is
    listed and left out; nothing is truncated.

    Raises:
        RowError: a row that is not a preference pair. RenderError: a side the template
            cannot render, or one that breaks the prompt-prefix rule (naming row and side).
        InvalidRequest: a pair too long under ``"refuse"``, or no pair left to train.
    """
    numbers = list(row_numbers or range(1, len(rows) + 1))
    pairs = encode_pairs(tokenizer, rows, numbers, progress=progress)
    kept: list[PreferencePair] = []
    too_long: list[tuple[int, int]] = []
    empty: list[int] = []
    for p in pairs:
        long_before, empty_before = len(too_long), len(empty)
        ok = [trains(ex, max_seq_length, too_long, empty) for ex in (p.chosen, p.rejected)]
        del too_long[long_before + 1 :], empty[empty_before + 1 :]  # a pair is named once
        if all(ok):
            kept.append(p)
    examples = [ex for p in kept for ex in (p.chosen, p.rejected)]
    report = examples_report(len(rows), examples, max_seq_length, [r for r, _ in too_long], empty)
    report["pairs"] = len(kept)
    refuse_untrainable(len(rows), too_long, empty, len(kept), max_seq_length, on_too_long)
    return PreparedPairs(kept, report)


def pair_findings(
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    max_seq_length: int,
    numbers: Sequence[int],
) -> dict[str, Any]:
    """The token findings of a preference run's dry run: ``rows``, ``trainable_pairs`` (and
    ``trainable_rows``, the same count), ``truncated_rows`` (a side longer than
    ``max_seq_length``), ``no_supervised_rows`` and ``refused_rows`` (``{"row", "message"}``,
    the message naming the side), with supervised and total tokens over both sides.

    Raises:
        RowError: a row that is not a preference pair (named)."""

    errors: list[RenderError] = []
    pairs = encode_pairs(tokenizer, rows, numbers, errors)
    truncated = [p.row for p in pairs if max(map(len, (p.chosen.input_ids, p.rejected.input_ids))) > max_seq_length]  # fmt: skip
    fits = [p for p in pairs if p.row not in set(truncated)]
    empty = [p.row for p in fits if not (p.chosen.supervised_tokens and p.rejected.supervised_tokens)]  # fmt: skip
    kept = [p for p in fits if p.row not in set(empty)]
    sup = [ex.supervised_tokens for p in kept for ex in (p.chosen, p.rejected)]
    total = [len(ex.input_ids) for p in kept for ex in (p.chosen, p.rejected)]
    return {
        "rows": len(rows),
        "trainable_pairs": len(kept),
        "trainable_rows": len(kept),
        "max_seq_length": max_seq_length,
        "supervised_tokens": length_stats(sup) | {"total": sum(sup)},
        "total_tokens": length_stats(total) | {"total": sum(total)},
        "truncated_rows": truncated,
        "no_supervised_rows": empty,
        "refused_rows": [{"row": e.row, "message": e.message} for e in errors],
    }
