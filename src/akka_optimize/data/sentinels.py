"""The sentinel rendering of a row (steps 1–2 of :mod:`akka_optimize.data.render`) and the
chat template's markers around a reply (step 4).

:func:`_sentinel_row` builds the real messages and tools for the template and the same
with every non-empty text field replaced by a unique ASCII sentinel, with the table of
those fields; :func:`_render_all` renders both; :func:`_locate` finds each field's span
in the real text from the sentinels' positions. :func:`template_markers` finds the
template's generation prompt and end-of-turn marker. :class:`RenderError` is the refusal
of a row the template cannot render so that it trains correctly.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from akka_optimize.errors import InvalidRequest

_NONCE = "zqAKKA" + secrets.token_hex(4)
_SENTINEL_RE = re.compile(re.escape(_NONCE) + r"(\d+)qz")


class RenderError(InvalidRequest):
    """The base model's chat template cannot render a row so that it trains correctly.

    Attributes:
        row: 1-based row (line) number.
        dropped: what the template dropped (``["tool calls (messages[1])", ...]``), may be empty.
    """

    code = "row_not_renderable"

    def __init__(self, row: int, message: str, dropped: list[str] | None = None) -> None:
        super().__init__(f"row {row}: {message}", field=f"row {row}")
        self.row = row
        self.dropped = dropped or []


@dataclass(frozen=True)
class TemplateMarkers:
    """What a chat template writes around an assistant reply.

    Attributes:
        generation_prompt: text ``add_generation_prompt=True`` appends (``""`` if none).
        end_of_turn: the first special token written after a reply (``None`` if none).
    """

    generation_prompt: str
    end_of_turn: str | None


@dataclass
class SentinelField:
    msg: int
    kind: str  # content | reasoning | tool_call | tool_decl
    text: str
    parts: list[tuple[int, int, bool | None]]  # (start, end, flag) within text
    start: int = -1
    end: int = -1


def _sentinel(k: int) -> str:
    return f"{_NONCE}{k}qz"


def _flatten(value: str | list[dict[str, Any]]) -> tuple[str, list[tuple[int, int, bool | None]]]:
    if isinstance(value, str):
        return value, [(0, len(value), None)]
    pieces, parts, pos = [], [], 0
    for part in value:
        if part["type"] != "text":
            continue  # images: render_rows refuses rows that have them
        pieces.append(part["text"])
        parts.append((pos, pos + len(part["text"]), part.get("train")))
        pos += len(part["text"])
    return "".join(pieces), parts


def image_fields(row: dict[str, Any]) -> list[str]:
    out = []
    for i, m in enumerate(row["messages"]):
        for key in ("content", "reasoning_content"):
            value = m.get(key)
            if isinstance(value, list) and any(p["type"] != "text" for p in value):
                out.append(f"messages[{i}].{key}")
    return out


def render_messages(tokenizer: Any, messages: list[dict[str, Any]], tools: Any, **kw: Any) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kw)


_MARKERS: dict[tuple[int, str, tuple[str, ...]], TemplateMarkers] = {}


def template_markers(tokenizer: Any) -> TemplateMarkers:
    """Find the generation prompt and end-of-turn marker of ``tokenizer``'s chat template.

    Cached per tokenizer object and template text.
    """
    key = (id(tokenizer), str(tokenizer.chat_template), tuple(tokenizer.all_special_tokens))
    if key in _MARKERS:
        return _MARKERS[key]
    probe = [{"role": "user", "content": _sentinel(0)}]
    without = render_messages(tokenizer, probe, None)
    with_gp = render_messages(tokenizer, probe, None, add_generation_prompt=True)
    gp = with_gp[len(without) :] if with_gp.startswith(without) else ""
    reply = render_messages(
        tokenizer, [*probe, {"role": "assistant", "content": _sentinel(1)}], None
    )
    after = reply[reply.find(_sentinel(1)) + len(_sentinel(1)) :]
    specials = sorted(
        {t for t in tokenizer.all_special_tokens if t}
        | {t.content for t in tokenizer.added_tokens_decoder.values() if t.special and t.content},
        key=len,
        reverse=True,
    )
    eot, best = None, len(after) + 1
    for tok in specials:
        pos = after.find(tok)
        if 0 <= pos < best:
            eot, best = tok, pos
    markers = TemplateMarkers(generation_prompt=gp, end_of_turn=eot)
    _MARKERS[key] = markers
    return markers


def sentinel_row(
    row: dict[str, Any],
) -> tuple[list[dict], list[dict], list[dict] | None, list[dict] | None, list[SentinelField]]:
    """Real messages/tools for the template, the same with sentinels, and the field table."""
    fields: list[SentinelField] = []

    def put(msg: int, kind: str, text: str, parts: list) -> str:
        if not text:
            return text
        fields.append(SentinelField(msg, kind, text, parts))
        return _sentinel(len(fields) - 1)

    real, sent = [], []
    for i, m in enumerate(row["messages"]):
        text, parts = _flatten(m["content"])
        r = {"role": m["role"], "content": text}
        s = {"role": m["role"], "content": put(i, "content", text, parts)}
        for key in ("name", "tool_call_id"):
            if key in m:
                r[key] = s[key] = m[key]
        if "reasoning_content" in m:
            rtext, rparts = _flatten(m["reasoning_content"])
            r["reasoning_content"] = rtext
            s["reasoning_content"] = put(i, "reasoning", rtext, rparts)
        if m.get("tool_calls"):
            r["tool_calls"], s["tool_calls"] = [], []
            for call in m["tool_calls"]:
                fn = call["function"]
                base = {"type": "function"} | ({"id": call["id"]} if call.get("id") else {})
                r["tool_calls"].append(base | {"function": dict(fn)})
                name = put(i, "tool_call", fn["name"], [(0, len(fn["name"]), None)])
                s["tool_calls"].append(
                    base | {"function": {"name": name, "arguments": fn["arguments"]}}
                )
        real.append(r)
        sent.append(s)
    tools = row.get("tools")
    sent_tools = None
    if tools:
        sent_tools = []
        for t in tools:
            fn = t.get("function", t)
            name = put(-1, "tool_decl", fn["name"], [(0, len(fn["name"]), None)])
            new_fn = {**fn, "name": name}
            sent_tools.append({**t, "function": new_fn} if "function" in t else new_fn)
    return real, sent, tools, sent_tools, fields


def locate(sent_text: str, real_text: str, fields: list[SentinelField], row: int) -> None:
    """Set each field's ``start``/``end`` in ``real_text`` (``-1`` when the template dropped it)."""
    found = list(_SENTINEL_RE.finditer(sent_text))
    seen: set[int] = set()
    for m in found:
        k = int(m.group(1))
        if k in seen or k >= len(fields):
            f = fields[k] if k < len(fields) else None
            what = f"messages[{f.msg}] {f.kind}" if f else "a field"
            raise RenderError(
                row,
                f"the chat template writes {what} more than once, so its trained span is ambiguous",
            )
        seen.add(k)
    for transform in (lambda s: s, str.strip):
        pieces, pos, cursor = [], 0, 0
        for m in found:
            f = fields[int(m.group(1))]
            literal = sent_text[cursor : m.start()]
            text = transform(f.text)
            pieces.append(literal)
            pos += len(literal)
            lead = len(f.text) - len(f.text.lstrip()) if transform is str.strip else 0
            f.start, f.end = pos, pos + len(text)
            f.parts = [
                (max(0, min(len(text), a - lead)), max(0, min(len(text), b - lead)), flag)
                for a, b, flag in f.parts
            ]
            pieces.append(text)
            pos += len(text)
            cursor = m.end()
        pieces.append(sent_text[cursor:])
        if "".join(pieces) == real_text:
            return
    raise RenderError(
        row,
        "the base model's chat template changes the text of this row's messages (beyond trimming), "
        "so the spans of its assistant turns cannot be recovered",
    )


def _render_sentinels(tokenizer: Any, messages: list[dict[str, Any]], tools: Any) -> str:
    """Render the sentinel conversation with the compiled template directly (faster).

    Only the real text must be exactly ``apply_chat_template``'s; should this shortcut ever
    differ from it, the sentinel text no longer matches and the row is refused, never
    mis-masked. Falls back to ``apply_chat_template`` when the private helpers move.
    """
    try:
        from transformers.utils.chat_template_utils import (
            _alias_reasoning_fields,
            _compile_jinja_template,
        )
    except ImportError:  # pragma: no cover - other transformers versions
        return render_messages(tokenizer, messages, tools)
    template = tokenizer.get_chat_template(None, tools)
    return _compile_jinja_template(template).render(
        **tokenizer.special_tokens_map,
        messages=_alias_reasoning_fields(messages),
        tools=tools,
        documents=None,
        add_generation_prompt=False,
    )


def render_all(tokenizer: Any, prepared: list[tuple]) -> list[tuple[str, str] | Exception]:
    """Real and sentinel texts of every row; the real texts of rows without tools in one call."""
    out: list[tuple[str, str] | Exception] = [ValueError("not rendered")] * len(prepared)
    plain = [i for i, p in enumerate(prepared) if not p[2]]
    real: dict[int, str] = {}
    if plain:
        try:
            texts = render_messages(tokenizer, [prepared[i][0] for i in plain], None)
            real = dict(zip(plain, texts, strict=True))
        except Exception:  # one row made the template raise: find it below, row by row
            real = {}
    for i, (messages, sent, tools, sent_tools, _) in enumerate(prepared):
        try:
            text = real[i] if i in real else render_messages(tokenizer, messages, tools)
            out[i] = (text, _render_sentinels(tokenizer, sent, sent_tools))
        except Exception as exc:  # the template's own refusal (raise_exception, TypeError…)
            out[i] = exc
    return out
