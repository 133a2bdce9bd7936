"""Training rows: validation and normalisation of one conversation per JSONL line.

A row is a whole conversation (seeds/000 "Conversations and tool calls as training
data"): ``system``, ``user``, ``assistant`` and ``tool`` messages ending with an
assistant message. The system message is optional; an assistant message may carry
OpenAI-shaped ``tool_calls``; a ``tool`` message answers an earlier call by
``tool_call_id``; a row may declare the ``tools`` it can call. ``messages`` and
``tools`` may be JSON strings (DATA-AND-TRAINING-RULES.md §1.1 D). ``content`` and
``reasoning_content`` may be lists of text parts with ``train`` (bool) or ``weight``
(0/1) flags (§1.1 A, B). A single-turn row may also be written
``{"prompt": ..., "completion": ...}``; a row that mixes the two formats is refused.

A **prompt row** (for evaluations and reinforcement runs: issue 18 item 1) ends with a
user message, or is ``{"prompt": ...}`` without a completion, and gives its reference
answer as ``ground_truth``; it has nothing to supervise, so a supervised run lists it
among the rows with no supervised token and leaves it out (:mod:`akka_optimize.data.masks`).

The normalised row (what :func:`parse_row` returns and the rest of ``data/`` reads)::

    {"messages": [
        {"role": "system" | "user" | "assistant" | "tool",
         "content": str | [{"type": "text", "text": str, "train": bool | None}
                           | {"type": "image", "image": str}
                           | {"type": "image_url", "image_url": {"url": str}}, ...],
         # assistant only, when present:
         "reasoning_content": str | [parts as above],
         "tool_calls": [{"id": str | None, "type": "function",
                         "function": {"name": str, "arguments": dict}}],
         # tool only:
         "tool_call_id": str,
         # any role, when present:
         "name": str}],
     "tools": [dict, ...]}            # only when the row declares tools

Tool-call ``arguments`` are always an object after normalisation, so a chat template
renders them once (``| tojson``), never a JSON string encoded a second time
(behaviours.md 8).

This module owns the row as a whole (:func:`parse_row`); one message is
:mod:`akka_optimize.data.row_messages`, and the fields, errors and shared checks
:mod:`akka_optimize.data.row_fields`.
"""

from __future__ import annotations

from typing import Any

from .preference_rows import is_preference_row, parse_preference_row
from .row_fields import MAX_LISTED_ERRORS as MAX_LISTED_ERRORS
from .row_fields import ROW_FIELDS, maybe_json, refuse_unknown, value_kind
from .row_fields import DataFileError as DataFileError
from .row_fields import RowError as RowError
from .row_messages import parse_message
from .shapes import foreign_shape

_SINGLE_TURN_KEYS = ("prompt", "completion")


def _messages_of(obj: dict[str, Any], line: int) -> Any:
    has_messages = "messages" in obj
    single = [k for k in _SINGLE_TURN_KEYS if k in obj]
    if has_messages and single:
        raise RowError(
            line,
            "",
            f"the row mixes formats: it has messages and {' and '.join(single)}; "
            'write either a conversation {"messages": [...]} or a single turn '
            '{"prompt": ..., "completion": ...}',
        )
    if has_messages:
        return obj["messages"]
    if single == ["prompt"] and obj.get("ground_truth") is not None:  # a prompt row
        if not isinstance(obj["prompt"], str):
            raise RowError(line, "prompt", f"must be a string, not {value_kind(obj['prompt'])}")
        return [{"role": "user", "content": obj["prompt"]}]
    if single:
        for key in _SINGLE_TURN_KEYS:
            if not isinstance(obj.get(key), str):
                raise RowError(
                    line,
                    key,
                    f"a single-turn row needs prompt and completion strings ({key} is {value_kind(obj.get(key))})",
                )
        return [
            {"role": "user", "content": obj["prompt"]},
            {"role": "assistant", "content": obj["completion"]},
        ]

    hint = foreign_shape(obj)
    if hint is not None:
        raise RowError(line, "messages", hint)
    raise RowError(
        line,
        "messages",
        "the row has no messages field; a training row is a conversation "
        '{"messages": [{"role": "user", ...}, {"role": "assistant", ...}]} or a single '
        'turn {"prompt": ..., "completion": ...}'
        f" (keys found: {', '.join(sorted(obj)) or 'none'})",
    )


def parse_row(obj: Any, line: int) -> dict[str, Any]:
    """Validate one decoded JSONL row and return its normalised form (module docstring).

    Args:
        obj: the decoded JSON value of the line.
        line: its 1-based line number, used in every error.

    Returns:
        ``{"messages": [...], "tools"?: [...], "ground_truth"?, "data_source"?,
        "extra_info"?}``, a new object (``obj`` is not changed); for a preference row
        (OpenAI's or TRL's pair shape) the canonical pair of
        :func:`akka_optimize.data.preference.parse_preference_row`.

    Raises:
        RowError: the first thing wrong with the row, naming the line and field.
    """
    if not isinstance(obj, dict):
        raise RowError(line, "", f"a row must be a JSON object, not {value_kind(obj)}")
    if is_preference_row(obj):  # a preference pair (config.method dpo; data/preference.py)
        return parse_preference_row(obj, line, parse_row)
    if "messages" not in obj and "prompt" not in obj:
        from .shapes import foreign_shape  # lazy: guarded

        # a ShareGPT or Alpaca row is named as such (with its messages form), not as
        # carrying unknown fields
        if (hint := foreign_shape(obj)) is not None:
            raise RowError(line, "messages", hint)
    refuse_unknown(obj, ROW_FIELDS, line, "")
    messages = maybe_json(_messages_of(obj, line), line, "messages", list)
    if not messages:
        raise RowError(
            line, "messages", "is empty; a row needs at least a user and an assistant message"
        )
    call_ids: set[str] = set()
    out_messages = [parse_message(m, i, line, call_ids) for i, m in enumerate(messages)]
    last = out_messages[-1]["role"]
    prompt_row = last == "user" and obj.get("ground_truth") is not None
    if last != "assistant" and not prompt_row:
        raise RowError(
            line,
            f"messages[{len(out_messages) - 1}]",
            f"the conversation must end with an assistant message, but it ends with a {last} "
            "message (a prompt row for evaluations and reinforcement runs ends with a user "
            "message and gives its reference answer as ground_truth)",
        )
    row: dict[str, Any] = {"messages": out_messages}
    if obj.get("tools") is not None:
        tools = maybe_json(obj["tools"], line, "tools", list)
        for t, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise RowError(
                    line, f"tools[{t}]", f"a tool must be an object, not {value_kind(tool)}"
                )
            fn = tool.get("function", tool)
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise RowError(line, f"tools[{t}]", "a tool needs a function with a name")
        if tools:
            row["tools"] = tools
    if obj.get("ground_truth") is not None:
        row["ground_truth"] = obj["ground_truth"]
    if obj.get("data_source") is not None:
        if not isinstance(obj["data_source"], str):
            raise RowError(
                line, "data_source", f"must be a string, not {value_kind(obj['data_source'])}"
            )
        row["data_source"] = obj["data_source"]
    if obj.get("extra_info") is not None:
        if not isinstance(obj["extra_info"], dict):
            raise RowError(
                line, "extra_info", f"must be an object, not {value_kind(obj['extra_info'])}"
            )
        row["extra_info"] = obj["extra_info"]
    return row
