"""Preference rows as JSONL lines: which rows are pairs and their canonical form (issue 50
item 2). The shapes, the canonical form and what is refused are described in
:mod:`akka_optimize.data.preference`, which tokenizes the pairs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .row_fields import RowError, value_kind

OPENAI_KEYS = ("input", "preferred_output", "non_preferred_output")
TRL_KEYS = ("prompt", "chosen", "rejected")


def is_preference_row(obj: Any) -> bool:
    """Whether ``obj`` (a decoded JSONL row) claims to be a preference pair: it has one of
    ``preferred_output``, ``non_preferred_output``, ``chosen`` or ``rejected``."""
    return isinstance(obj, dict) and any(
        k in obj for k in ("preferred_output", "non_preferred_output", "chosen", "rejected")
    )


def _shape(obj: dict[str, Any], line: int) -> tuple[Any, Any, Any, Any, dict[str, str]]:
    """``(prompt, tools, chosen, rejected, field names)`` of either shape.

    Raises:
        RowError: a mixed or incomplete shape, naming the keys found."""
    keys = sorted(obj)
    if set(obj) == set(OPENAI_KEYS):
        inp = obj["input"]
        if not isinstance(inp, dict) or "messages" not in inp:
            raise RowError(line, "input", 'must be {"messages": [...], "tools"?: [...]}')
        extra = sorted(set(inp) - {"messages", "tools"})
        if extra:
            raise RowError(line, f"input.{extra[0]}", "unknown field (messages, tools)")
        names = {"prompt": "input.messages", "chosen": "preferred_output"}
        names["rejected"] = "non_preferred_output"
        return inp["messages"], inp.get("tools"), obj[OPENAI_KEYS[1]], obj[OPENAI_KEYS[2]], names
    if set(obj) - {"tools"} == set(TRL_KEYS):
        names = {k: k for k in TRL_KEYS}
        return obj["prompt"], obj.get("tools"), obj["chosen"], obj["rejected"], names
    raise RowError(
        line,
        "",
        "a preference row is OpenAI's {input: {messages, tools?}, preferred_output: "
        "[assistant message], non_preferred_output: [assistant message]} or TRL's "
        "conversational {prompt: [messages], chosen: [assistant message], rejected: "
        "[assistant message]}"
        f" (keys found: {', '.join(keys)})",
    )


def _side(value: Any, line: int, name: str) -> None:
    if not isinstance(value, list):
        raise RowError(
            line, name, f"must be a list holding one assistant message, not {value_kind(value)}"
        )
    if not value:
        raise RowError(line, name, "is empty; each side of a pair needs an assistant answer")
    if len(value) != 1 or not isinstance(value[0], dict) or value[0].get("role") != "assistant":
        raise RowError(line, name, "must hold exactly one message, with role assistant")


def _empty(msg: dict[str, Any]) -> bool:
    content = msg.get("content")
    text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    return not text.strip() and not msg.get("tool_calls")


def parse_preference_row(
    obj: dict[str, Any], line: int, parse_row: Callable[[Any, int], dict[str, Any]]
) -> dict[str, Any]:
    """Validate one preference row of either shape; return its canonical form (module
    docstring of :mod:`akka_optimize.data.preference`), a new object. ``parse_row`` is
    :func:`akka_optimize.data.rows.parse_row`, which checks each side's conversation.

    Raises:
        RowError: the first thing wrong, naming the line and the field (``preferred_output``,
            ``chosen[0].content``…): another shape, an empty side, identical sides, or a
            message a training row would refuse.
    """
    prompt, tools, chosen, rejected, names = _shape(obj, line)
    if not isinstance(prompt, list) or not prompt:
        raise RowError(line, names["prompt"], "must be a non-empty list of messages")
    out: dict[str, Any] = {}
    for key, side in (("chosen", chosen), ("rejected", rejected)):
        _side(side, line, names[key])
        body: dict[str, Any] = {"messages": [*prompt, *side]}
        if tools is not None:
            body["tools"] = tools
        try:
            row = parse_row(body, line)
        except RowError as err:
            where = err.field or ""
            if where.startswith(f"messages[{len(prompt)}]"):
                where = names[key] + "[0]" + where.removeprefix(f"messages[{len(prompt)}]")
            elif where.startswith("messages"):
                where = names["prompt"] + where.removeprefix("messages")
            raise RowError(line, where, err.reason) from None
        if _empty(row["messages"][-1]):
            raise RowError(line, names[key], "is empty; each side of a pair needs an answer")
        out["prompt"] = row["messages"][:-1]
        out[key] = row["messages"][-1:]
        if "tools" in row:
            out["tools"] = row["tools"]
    if out["chosen"] == out["rejected"]:
        raise RowError(
            line,
            names["rejected"],
            f"is identical to {names['chosen']}; a pair needs two different answers",
        )
    return out
