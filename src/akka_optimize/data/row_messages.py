"""One message of a training row (:mod:`akka_optimize.data.rows`), validated and normalised:
its role, its content and reasoning as a string or a list of text (and image) parts with
their train flags, its tool calls with their arguments as an object, and the tool call a
``tool`` message answers (:func:`_parse_message`).
"""

from __future__ import annotations

import json
from typing import Any

from akka_optimize.errors import excerpt

from . import strictjson
from .row_fields import (
    MESSAGE_FIELDS,
    ROLES,
    TEXT_PART_FIELDS,
    TOOL_CALL_FIELDS,
    RowError,
    refuse_unknown,
    value_kind,
)


def _image_part(part: dict[str, Any], line: int, where: str) -> dict[str, Any]:
    """``{"type": "image", "image": str}`` or ``{"type": "image_url", "image_url": {"url": str}}``.

    Kept for the registry (which uploads local images, F031); a text-only chat template
    cannot render them, so ``data.render`` refuses a row that has one.
    """
    refuse_unknown(part, ("type", part["type"]), line, where)
    if part["type"] == "image":
        if not isinstance(part.get("image"), str) or not part["image"]:
            raise RowError(
                line, f"{where}.image", "an image part needs an image path, URL or digest"
            )
        return {"type": "image", "image": part["image"]}
    url = part.get("image_url")
    if not isinstance(url, dict) or not isinstance(url.get("url"), str) or not url["url"]:
        raise RowError(line, f"{where}.image_url", "an image_url part needs image_url.url")
    refuse_unknown(url, ("url",), line, f"{where}.image_url")
    return {"type": "image_url", "image_url": {"url": url["url"]}}


def _parse_parts(value: Any, line: int, field: str) -> str | list[dict[str, Any]]:
    """A string, or a list of ``{"type": "text", text|content|value, train?, weight?}`` parts."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise RowError(
            line, field, f"must be a string or a list of text parts, not {value_kind(value)}"
        )
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(value):
        where = f"{field}[{j}]"
        if isinstance(part, str):
            parts.append({"type": "text", "text": part, "train": None})
            continue
        if not isinstance(part, dict):
            raise RowError(line, where, f"a content part must be an object, not {value_kind(part)}")
        if part.get("type") in ("image", "image_url"):
            parts.append(_image_part(part, line, where))
            continue
        if part.get("type") != "text":
            raise RowError(
                line,
                f"{where}.type",
                f'must be "text", "image" or "image_url" (got {excerpt(part.get("type"))})',
            )
        refuse_unknown(part, TEXT_PART_FIELDS, line, where)
        texts = [k for k in ("text", "content", "value") if k in part]
        if len(texts) != 1:
            raise RowError(line, where, "a text part needs exactly one of text, content or value")
        text = part[texts[0]]
        if not isinstance(text, str):
            raise RowError(line, f"{where}.{texts[0]}", f"must be a string, not {value_kind(text)}")
        train = part.get("train")
        if train is not None and not isinstance(train, bool):
            raise RowError(
                line, f"{where}.train", f"must be true or false, not {value_kind(train)}"
            )
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
        raise RowError(line, field, f"must be an array of tool calls, not {value_kind(value)}")
    calls = []
    for k, call in enumerate(value):
        where = f"{field}[{k}]"
        if not isinstance(call, dict):
            raise RowError(line, where, f"a tool call must be an object, not {value_kind(call)}")
        refuse_unknown(call, TOOL_CALL_FIELDS, line, where)
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise RowError(line, f"{where}.id", f"must be a string, not {value_kind(call_id)}")
        if call.get("type", "function") != "function":
            raise RowError(
                line, f"{where}.type", f'must be "function", not {excerpt(call.get("type"))}'
            )
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise RowError(
                line,
                f"{where}.function",
                f"must be an object with name and arguments, not {value_kind(fn)}",
            )
        refuse_unknown(fn, ("name", "arguments"), line, f"{where}.function")
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
                f"must be a JSON object (or a string of one), not {value_kind(args)}",
            )
        calls.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        )
    return calls


def parse_message(msg: Any, i: int, line: int, call_ids: set[str]) -> dict[str, Any]:
    field = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise RowError(line, field, f"a message must be an object, not {value_kind(msg)}")
    refuse_unknown(msg, MESSAGE_FIELDS, line, field)
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
