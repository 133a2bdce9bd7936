"""Rows of the ``minifield.action.v1`` serialization → tokens with their supervision.

A data file is JSONL (read strictly by :func:`akka_optimize.data.jsonl.decode_line`), one
row per line::

    {"messages": [{"role": "user", "content": "Weather in Oslo?"}],
     "action": {"name": "get_weather", "arguments": {"city": "Oslo"}}}

A row serializes as three token pieces, each tokenized on its own (no special tokens
added), so the boundaries between them are exact:

1. the prompt: ``apply_chat_template(messages, add_generation_prompt=True)`` — not trained;
2. the **routing target**: the action's ``name`` — stage 1;
3. the **argument target**: ``"\\n"`` + the arguments as compact JSON with sorted keys,
   then the tokenizer's EOS token id — stage 2.

Packed SFT (12.0.0) and packed QAT (13.0.0) train the complete action target (stages 1
and 2 with one token-weighted loss); two-stage training supervises the two stages
separately (each normalised by its own token count; README "minifield-worker").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from akka_optimize.data.jsonl import decode_line
from akka_optimize.data.row_fields import RowError
from akka_optimize.data.types import Example

from .recipe import Strict, validation_sentences
from .registry import RecipeError

PROMPT, ROUTING, ARGUMENTS = 0, 1, 2
"""Stage labels of a token: not trained, routing target, argument target."""


class Message(Strict):
    """One prompt message."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str


class Action(Strict):
    """The action a row teaches: a name (routing) and its arguments."""

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class ActionRow(Strict):
    """One ``minifield.action.v1`` row."""

    messages: list[Message] = Field(min_length=1)
    action: Action


@dataclass(frozen=True)
class ActionExample:
    """A serialized row.

    Attributes:
        row: 1-based line number in the data file.
        input_ids: prompt + routing + argument tokens.
        stage: one label per token (:data:`PROMPT`, :data:`ROUTING`, :data:`ARGUMENTS`),
            aligned like ``Example.weights``: ``stage[t]`` is the supervision of
            predicting ``input_ids[t]``.
    """

    row: int
    input_ids: list[int]
    stage: list[int]

    def example(self) -> Example:
        """The data package's :class:`Example` (weight 1.0 on every action target)."""
        return Example(list(self.input_ids), [1.0 if s else 0.0 for s in self.stage], self.row)

    def count(self, stage: int) -> int:
        """How many tokens carry ``stage``."""
        return sum(1 for s in self.stage if s == stage)


def _tokens(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def serialize(tokenizer: Any, row: ActionRow, line: int) -> ActionExample:
    """Tokenize one validated row (module docstring). Pure: same row, same tokens."""
    messages = [m.model_dump() for m in row.messages]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    args = json.dumps(row.action.arguments, sort_keys=True, separators=(",", ":"))
    p = _tokens(tokenizer, prompt)
    r = _tokens(tokenizer, row.action.name)
    a = _tokens(tokenizer, "\n" + args) + [int(tokenizer.eos_token_id)]
    return ActionExample(
        line, p + r + a, [PROMPT] * len(p) + [ROUTING] * len(r) + [ARGUMENTS] * len(a)
    )


def read_rows(path: Path) -> list[tuple[int, ActionRow]]:
    """Read and validate every row of a data file.

    Raises:
        RecipeError: unreadable file, bad JSON or a row that is not ``minifield.action.v1``
            (names the file, line and field), or a file without rows.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"data.path {path} cannot be read: {exc}", field="data.path") from None
    rows: list[tuple[int, ActionRow]] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            rows.append((number, ActionRow.model_validate(decode_line(raw, number))))
        except ValidationError as exc:
            where, sentence = validation_sentences(exc)[0]
            raise RecipeError(
                f"{path.name} line {number}: {sentence} (a minifield.action.v1 row is "
                '{"messages": [{"role", "content"}...], "action": {"name", "arguments"}})',
                field=f"{path.name}:line {number}",
            ) from None
        except RowError as exc:  # not JSON, NaN, a number out of range
            raise RecipeError(f"{path.name}: {exc}", field=f"{path.name}:line {number}") from None
    if not rows:
        raise RecipeError(f"data.path {path} holds no rows.", field="data.path")
    return rows


def load_examples(path: Path, tokenizer: Any, sequence_length: int) -> list[ActionExample]:
    """Serialize every row; a row longer than ``sequence_length`` is refused, never cut.

    Raises:
        RecipeError: see :func:`read_rows`; or rows longer than ``training.sequence_length``
            (names the first few with their lengths).
    """
    examples = [serialize(tokenizer, row, n) for n, row in read_rows(path)]
    long = [e for e in examples if len(e.input_ids) > sequence_length]
    if long:
        listed = ", ".join(f"row {e.row} ({len(e.input_ids)} tokens)" for e in long[:5])
        raise RecipeError(
            f"{len(long)} rows are longer than training.sequence_length {sequence_length}: "
            f"{listed}; raise training.sequence_length or shorten them.",
            field="training.sequence_length",
        )
    return examples
