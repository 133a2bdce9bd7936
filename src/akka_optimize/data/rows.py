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
_SINGLE_TURN_KEYS = ("prompt", "completion")


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


def _kind(value: Any) -> str:
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


def _refuse_unknown(obj: dict[str, Any], allowed: tuple[str, ...], line: int, field: str) -> None:
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


def _maybe_json(value: Any, line: int, field: str, want: type) -> Any:
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
        raise RowError(line, field, f"must be {name} (or a JSON string of one), not {_kind(value)}")
    return value


def _image_part(part: dict[str, Any], line: int, where: str) -> dict[str, Any]:
    """``{"type": "image", "image": str}`` or ``{"type": "image_url", "image_url": {"url": str}}``.

    Kept for the registry (which uploads local images, F031); a text-only chat template
    cannot render them, so ``data.render`` refuses a row that has one.
    """
    _refuse_unknown(part, ("type", part["type"]), line, where)
    if part["type"] == "image":
        if not isinstance(part.get("image"), str) or not part["image"]:
            raise RowError(
                line, f"{where}.image", "an image part needs an image path, URL or digest"
            )
        return {"type": "image", "image": part["image"]}
    url = part.get("image_url")
    if not isinstance(url, dict) or not isinstance(url.get("url"), str) or not url["url"]:
        raise RowError(line, f"{where}.image_url", "an image_url part needs image_url.url")
    _refuse_unknown(url, ("url",), line, f"{where}.image_url")
    return {"type": "image_url", "image_url": {"url": url["url"]}}


def _parse_parts(value: Any, line: int, field: str) -> str | list[dict[str, Any]]:
    """A string, or a list of ``{"type": "text", text|content|value, train?, weight?}`` parts."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise RowError(line, field, f"must be a string or a list of text parts, not {_kind(value)}")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(value):
        where = f"{field}[{j}]"
        if isinstance(part, str):
            parts.append({"type": "text", "text": part, "train": None})
            continue
        if not isinstance(part, dict):
            raise RowError(line, where, f"a content part must be an object, not {_kind(part)}")
        if part.get("type") in ("image", "image_url"):
            parts.append(_image_part(part, line, where))
            continue
        if part.get("type") != "text":
            raise RowError(
                line,
                f"{where}.type",
                f'must be "text", "image" or "image_url" (got {excerpt(part.get("type"))})',
            )
        _refuse_unknown(part, TEXT_PART_FIELDS, line, where)
        texts = [k for k in ("text", "content", "value") if k in part]
        if len(texts) != 1:
            raise RowError(line, where, "a text part needs exactly one of text, content or value")
        text = part[texts[0]]
        if not isinstance(text, str):
            raise RowError(line, f"{where}.{texts[0]}", f"must be a string, not {_kind(text)}")
        train = part.get("train")
        if train is not None and not isinstance(train, bool):
            raise RowError(line, f"{where}.train", f"must be true or false, not {_kind(train)}")
        if "weight" in part and part["weight"] is not None:
            weight = part["weight"]
            if isinstance(weight, bool) or weight not in (0, 1):
                raise RowError(line, f"{where}.weight", f"must be 0 or 1, not {excerpt(weight)}")
            if train is not None and train != bool(weight):
                raise RowError(line, where, f"train {train} and weight {weight} disagree")
            train = bool(weight)
        parts.append({"type": "text", "text": text, "train": train})
    return parts


def _parse_tool_calls(value: Any, line: int, field: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise RowError(line, field, f"must be an array of tool calls, not {_kind(value)}")
    calls = []
    for k, call in enumerate(value):
        where = f"{field}[{k}]"
        if not isinstance(call, dict):
            raise RowError(line, where, f"a tool call must be an object, not {_kind(call)}")
        _refuse_unknown(call, TOOL_CALL_FIELDS, line, where)
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise RowError(line, f"{where}.id", f"must be a string, not {_kind(call_id)}")
        if call.get("type", "function") != "function":
            raise RowError(
                line, f"{where}.type", f'must be "function", not {excerpt(call.get("type"))}'
            )
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise RowError(
                line,
                f"{where}.function",
                f"must be an object with name and arguments, not {_kind(fn)}",
            )
        _refuse_unknown(fn, ("name", "arguments"), line, f"{where}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise RowError(line, f"{where}.function.name", "must be a non-empty string")
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = strictjson.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                raise RowError(
                    line,
                    f"{where}.function.arguments",
                    f"is not valid JSON ({exc.msg} at char {exc.pos})",
                ) from None
            except ValueError as exc:
                raise RowError(line, f"{where}.function.arguments", str(exc)) from None
        if not isinstance(args, dict):
            raise RowError(
                line,
                f"{where}.function.arguments",
                f"must be a JSON object (or a string of one), not {_kind(args)}",
            )
        calls.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        )
    return calls


def _parse_message(msg: Any, i: int, line: int, call_ids: set[str]) -> dict[str, Any]:
    field = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise RowError(line, field, f"a message must be an object, not {_kind(msg)}")
    _refuse_unknown(msg, MESSAGE_FIELDS, line, field)
    role = msg.get("role")
    if role not in ROLES:
        raise RowError(
            line,
            f"{field}.role",
            f"unknown role {excerpt(role)}; expected one of {', '.join(ROLES)}",
        )
    out: dict[str, Any] = {"role": role}
    content = msg.get("content")
    if content is None and role == "assistant" and msg.get("tool_calls"):
        content = ""
    if content is None:
        raise RowError(line, f"{field}.content", f"a {role} message needs content")
    out["content"] = _parse_parts(content, line, f"{field}.content")
    if isinstance(msg.get("name"), str):
        out["name"] = msg["name"]
    for key in ("reasoning_content", "tool_calls"):
        if msg.get(key) is not None and role != "assistant":
            raise RowError(
                line, f"{field}.{key}", f"only assistant messages carry {key}, not {role}"
            )
    if msg.get("reasoning_content") is not None:
        out["reasoning_content"] = _parse_parts(
            msg["reasoning_content"], line, f"{field}.reasoning_content"
        )
    if msg.get("tool_calls"):
        out["tool_calls"] = _parse_tool_calls(msg["tool_calls"], line, f"{field}.tool_calls")
        call_ids.update(c["id"] for c in out["tool_calls"] if c["id"] is not None)
    if role == "tool":
        call_id = msg.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise RowError(
                line, f"{field}.tool_call_id", "a tool message must name the call it answers"
            )
        if call_id not in call_ids:
            raise RowError(
                line,
                f"{field}.tool_call_id",
                f"{excerpt(call_id)} answers no earlier tool call in this row"
                + (f" (earlier calls: {', '.join(sorted(call_ids))})" if call_ids else ""),
            )
        out["tool_call_id"] = call_id
    return out


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
            raise RowError(line, "prompt", f"must be a string, not {_kind(obj['prompt'])}")
        return [{"role": "user", "content": obj["prompt"]}]
    if single:
        for key in _SINGLE_TURN_KEYS:
            if not isinstance(obj.get(key), str):
                raise RowError(
                    line,
                    key,
                    f"a single-turn row needs prompt and completion strings ({key} is {_kind(obj.get(key))})",
                )
        return [
            {"role": "user", "content": obj["prompt"]},
            {"role": "assistant", "content": obj["completion"]},
        ]
    from .shapes import foreign_shape

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
        "extra_info"?}``, a new object (``obj`` is not changed).

    Raises:
        RowError: the first thing wrong with the row, naming the line and field.
    """
    if not isinstance(obj, dict):
        raise RowError(line, "", f"a row must be a JSON object, not {_kind(obj)}")
    if "messages" not in obj and "prompt" not in obj:
        from .shapes import foreign_shape

        # a ShareGPT or Alpaca row is named as such (with its messages form), not as
        # carrying unknown fields
        if (hint := foreign_shape(obj)) is not None:
            raise RowError(line, "messages", hint)
    _refuse_unknown(obj, ROW_FIELDS, line, "")
    messages = _maybe_json(_messages_of(obj, line), line, "messages", list)
    if not messages:
        raise RowError(
            line, "messages", "is empty; a row needs at least a user and an assistant message"
        )
    call_ids: set[str] = set()
    out_messages = [_parse_message(m, i, line, call_ids) for i, m in enumerate(messages)]
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
        tools = _maybe_json(obj["tools"], line, "tools", list)
        for t, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise RowError(line, f"tools[{t}]", f"a tool must be an object, not {_kind(tool)}")
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
                line, "data_source", f"must be a string, not {_kind(obj['data_source'])}"
            )
        row["data_source"] = obj["data_source"]
    if obj.get("extra_info") is not None:
        if not isinstance(obj["extra_info"], dict):
            raise RowError(line, "extra_info", f"must be an object, not {_kind(obj['extra_info'])}")
        row["extra_info"] = obj["extra_info"]
    return row
