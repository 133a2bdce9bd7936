"""The fields a training row may have (:mod:`akka_optimize.data.rows`), the errors that name
a bad one (:class:`RowError`, :class:`DataFileError`), and the checks every part of a row
shares: a value's kind in words (:func:`_kind`), refusing an undeclared field
(:func:`_refuse_unknown`) and a list or object given as a JSON string (:func:`_maybe_json`).
"""

from __future__ import annotations

import json
from typing import Any

from akka_optimize.errors import InvalidRequest, excerpt

from . import strictjson

ROLES = ("system", "user", "assistant", "tool")
ROW_FIELDS = (
    "messages",
    "tools",
    "prompt",
    "completion",
    "ground_truth",
    "data_source",
    "extra_info",
)
MESSAGE_FIELDS = ("role", "content", "name", "reasoning_content", "tool_calls", "tool_call_id")
TEXT_PART_FIELDS = ("type", "text", "content", "value", "train", "weight")
TOOL_CALL_FIELDS = ("id", "type", "function")
"""The fields a row, a message, a text part and a tool call may have. Any other field is
refused naming the line and the field (as a plan refuses one it does not declare), rather
than dropped: nothing in a row is silently ignored. ``tools`` entries are kept as given.
``ground_truth``, ``data_source`` and ``extra_info`` are what a grader receives for the row
(veRL's reward-function arguments; :mod:`akka_optimize.evals.rows`); supervised training
does not read them."""
MAX_LISTED_ERRORS = 10


class RowError(InvalidRequest):
    """One row is malformed.

    Attributes:
        line: 1-based line number of the row in its file (0 when unknown).
        field: path inside the row, such as ``messages[1].tool_calls[0].function.arguments``
            (``""`` for the row as a whole).
        reason: what is wrong, without the line and field.
        message: ``"line N: FIELD: REASON"``.
    """

    code = "invalid_row"

    def __init__(self, line: int, field: str, message: str) -> None:
        where = f"line {line}: " + (f"{field}: " if field else "")
        super().__init__(where + message, field=field or None)
        self.line = line
        self.reason = message


class DataFileError(InvalidRequest):
    """A data file has bad lines. ``message`` lists ``line N: …`` for the first ones.

    ``field`` is ``"SOURCE:line N"`` for the first bad line; ``details`` is a list of
    ``{"line", "field", "message"}`` for every listed line.
    """

    code = "invalid_data_file"


def value_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"a number ({excerpt(value, 40)})"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def refuse_unknown(obj: dict[str, Any], allowed: tuple[str, ...], line: int, field: str) -> None:
    """Refuse the first key of ``obj`` not in ``allowed`` (see ``ROW_FIELDS``)."""
    for key in obj:
        if key not in allowed:
            where = f"{field}.{key}" if field else str(key)
            raise RowError(
                line,
                excerpt(where, 120).strip("'\""),
                f"unknown field {excerpt(key, 80)}; a field a row does not declare is refused "
                f"(the fields here are: {', '.join(allowed)})",
            )


def maybe_json(value: Any, line: int, field: str, want: type) -> Any:
    """Parse ``value`` when it is a JSON string holding a ``want`` (list or dict)."""
    if isinstance(value, str):
        try:
            value = strictjson.loads(value)
        except json.JSONDecodeError as exc:
            raise RowError(
                line, field, f"is a string that is not valid JSON ({exc.msg} at char {exc.pos})"
            ) from None
        except ValueError as exc:
            raise RowError(line, field, f"is a JSON string with {exc}") from None
    if not isinstance(value, want):
        name = "an array" if want is list else "an object"
        raise RowError(
            line, field, f"must be {name} (or a JSON string of one), not {value_kind(value)}"
        )
    return value
