"""Render a row with the base model's own chat template and find what trains, by character.

The plan cannot choose another template (seeds/000 "Not in this release"), so the text
rendered here is exactly ``tokenizer.apply_chat_template(messages, tools=tools,
tokenize=False)``. Where each message sits in that text is found without searching token
ids and without guessing from the text (DATA-AND-TRAINING-RULES.md §1.1 A: "the flags are
applied at tokenization time by mapping character spans to tokens"):

1. The row is rendered a second time with every non-empty text field (content, reasoning,
   tool-call names, declared tool names) replaced by a unique ASCII sentinel.
2. The sentinels' positions in that text, with each sentinel replaced back by its real text,
   give the span of every field. The result must equal the real rendering character for
   character (a second try strips each field, for templates that ``| trim``); otherwise the
   spans cannot be recovered and the row is refused (behaviours.md 4).
3. A sentinel missing from the text means the template dropped that field: a row whose tool
   calls, tool results, declared tools or trained reasoning the template drops is refused
   with its row number and what was dropped, rather than trained on nothing.
4. An assistant turn runs from the end of the template's generation prompt (the header it
   writes before a reply, e.g. ``<|im_start|>assistant\\n``) through its end-of-turn marker
   (the first special token the template writes after a reply, e.g. ``<|im_end|>``).

The result is a list of trained character intervals; ``data.masks`` maps them to tokens.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from akka_optimize import cancel
from akka_optimize.data.policy import LossPolicy
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
class Rendered:
    """A rendered row and the character intervals that train.

    Attributes:
        text: exactly ``apply_chat_template(messages, tools=tools, tokenize=False)``.
        trained: sorted, disjoint, merged ``(start, end)`` character intervals of ``text``
            whose tokens train (a token trains only if it lies wholly inside one interval).
        warnings: sentences about the row (trailing whitespace at a flag boundary, reasoning
            the template drops from an untrained turn).
    """

    text: str
    trained: list[tuple[int, int]]
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Field:
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


def _image_fields(row: dict[str, Any]) -> list[str]:
    out = []
    for i, m in enumerate(row["messages"]):
        for key in ("content", "reasoning_content"):
            value = m.get(key)
            if isinstance(value, list) and any(p["type"] != "text" for p in value):
                out.append(f"messages[{i}].{key}")
    return out


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: Any, **kw: Any) -> str:
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
    without = _render(tokenizer, probe, None)
    with_gp = _render(tokenizer, probe, None, add_generation_prompt=True)
    gp = with_gp[len(without) :] if with_gp.startswith(without) else ""
    reply = _render(tokenizer, [*probe, {"role": "assistant", "content": _sentinel(1)}], None)
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


def _sentinel_row(
    row: dict[str, Any],
) -> tuple[list[dict], list[dict], list[dict] | None, list[dict] | None, list[_Field]]:
    """Real messages/tools for the template, the same with sentinels, and the field table."""
    fields: list[_Field] = []

    def put(msg: int, kind: str, text: str, parts: list) -> str:
        if not text:
            return text
        fields.append(_Field(msg, kind, text, parts))
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


def _locate(sent_text: str, real_text: str, fields: list[_Field], row: int) -> None:
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


def _dropped(
    row: dict[str, Any], fields: list[_Field], trained_turn: set[int]
) -> tuple[list[str], list[str]]:
    dropped, warnings = [], []
    roles = [m["role"] for m in row["messages"]]
    for f in fields:
        if f.start >= 0:
            continue
        where = f"messages[{f.msg}]"
        if f.kind == "tool_call":
            dropped.append(f"tool calls ({where}.tool_calls, {f.text})")
        elif f.kind == "tool_decl":
            dropped.append(f"declared tools (tools, {f.text})")
        elif f.kind == "reasoning":
            if f.msg in trained_turn or any(flag for _, _, flag in f.parts):
                dropped.append(f"reasoning ({where}.reasoning_content)")
            else:
                warnings.append(
                    f"the chat template leaves out the reasoning of {where}, an untrained turn"
                )
        elif roles[f.msg] == "tool":
            dropped.append(f"tool results ({where}.content)")
        else:
            dropped.append(f"{roles[f.msg]} content ({where}.content)")
    # one entry per kind and message is enough to act on; declared tools: one is enough
    out: list[str] = []
    for d in dropped:
        if d.startswith("declared tools") and any(o.startswith("declared tools") for o in out):
            continue
        if d not in out:
            out.append(d)
    return out, warnings


def _part_intervals(
    f: _Field, default: bool, row: int, warnings: list[str]
) -> list[tuple[int, int, bool]]:
    out = []
    for j, (a, b, flag) in enumerate(f.parts):
        eff = default if flag is None else flag
        out.append((f.start + a, f.start + b, eff))
        if j + 1 < len(f.parts):
            nxt = f.parts[j + 1][2]
            nxt_eff = default if nxt is None else nxt
            if nxt_eff != eff and f.text[a:b][-1:].isspace():
                field = "reasoning_content" if f.kind == "reasoning" else "content"
                warnings.append(
                    f"row {row}: messages[{f.msg}].{field}[{j}] ends with whitespace before a part with a "
                    "different train flag; the token across the boundary is masked. Move the whitespace "
                    "to the start of the next part"
                )
    return out


def render_row(
    tokenizer: Any, row: dict[str, Any], policy: LossPolicy, row_number: int
) -> Rendered:
    """Render one normalised row (``data.rows.parse_row``) and mark the characters that train.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        row: a normalised row.
        policy: the loss policy.
        row_number: 1-based row (line) number for messages.

    Returns:
        The rendered text and its trained character intervals.

    Raises:
        RenderError: the template raises for the row, drops a field the row uses, writes a
            field twice, or changes message text so spans cannot be recovered.
    """
    (out,) = render_rows(tokenizer, [row], policy, [row_number])
    assert out is not None
    return out


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
        return _render(tokenizer, messages, tools)
    template = tokenizer.get_chat_template(None, tools)
    return _compile_jinja_template(template).render(
        **tokenizer.special_tokens_map,
        messages=_alias_reasoning_fields(messages),
        tools=tools,
        documents=None,
        add_generation_prompt=False,
    )


def _render_all(tokenizer: Any, prepared: list[tuple]) -> list[tuple[str, str] | Exception]:
    """Real and sentinel texts of every row; the real texts of rows without tools in one call."""
    out: list[tuple[str, str] | Exception] = [ValueError("not rendered")] * len(prepared)
    plain = [i for i, p in enumerate(prepared) if not p[2]]
    real: dict[int, str] = {}
    if plain:
        try:
            texts = _render(tokenizer, [prepared[i][0] for i in plain], None)
            real = dict(zip(plain, texts, strict=True))
        except Exception:  # one row made the template raise: find it below, row by row
            real = {}
    for i, (messages, sent, tools, sent_tools, _) in enumerate(prepared):
        try:
            text = real[i] if i in real else _render(tokenizer, messages, tools)
            out[i] = (text, _render_sentinels(tokenizer, sent, sent_tools))
        except Exception as exc:  # the template's own refusal (raise_exception, TypeError…)
            out[i] = exc
    return out


def render_rows(
    tokenizer: Any,
    rows: list[dict[str, Any]],
    policy: LossPolicy,
    row_numbers: list[int],
    errors: list[RenderError] | None = None,
) -> list[Rendered | None]:
    """:func:`render_row` for many rows, rendering rows without tools in batches.

    Args:
        errors: when given, a row's :class:`RenderError` is appended here and its entry in
            the result is ``None``; otherwise the first one is raised.
    """
    prepared = [_sentinel_row(r) for r in rows]
    out: list[Rendered | None] = []
    for row, n, p, texts in zip(
        rows, row_numbers, prepared, _render_all(tokenizer, prepared), strict=True
    ):
        try:
            images = _image_fields(row)
            if images:
                raise RenderError(
                    n,
                    f"the row has images ({', '.join(images)}); training renders text only, so "
                    "the base model's chat template would drop them",
                    [f"images ({x})" for x in images],
                )
            if isinstance(texts, Exception):
                raise RenderError(
                    n, f"the base model's chat template cannot render this row: {texts}"
                )
            out.append(_spans(tokenizer, row, policy, n, texts[0], texts[1], p[4]))
        except RenderError as err:
            if errors is None:
                raise
            errors.append(err)
            out.append(None)
    return out


def _spans(
    tokenizer: Any,
    row: dict[str, Any],
    policy: LossPolicy,
    row_number: int,
    text: str,
    sent_text: str,
    fields: list[_Field],
) -> Rendered:
    _locate(sent_text, text, fields, row_number)
    messages = row["messages"]
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    trained_turn = set(assistants if policy.assistant_turns == "all" else assistants[-1:])
    dropped, warnings = _dropped(row, fields, trained_turn)
    if dropped:
        raise RenderError(
            row_number,
            "the base model's chat template drops " + "; ".join(dropped) + " that this row uses, "
            "so training would not see them. Remove them from the row or use a base model whose "
            "chat template renders them",
            dropped,
        )
    by_msg: dict[int, list[_Field]] = {}
    for f in fields:
        if f.start >= 0 and f.msg >= 0:
            by_msg.setdefault(f.msg, []).append(f)
    markers = template_markers(tokenizer)
    intervals: list[tuple[int, int, bool]] = []
    cursor = 0
    for i, m in enumerate(messages):
        mine = sorted(by_msg.get(i, []), key=lambda f: f.start)
        nxt = min(
            (f.start for j in range(i + 1, len(messages)) for f in by_msg.get(j, [])),
            default=len(text),
        )
        if m["role"] != "assistant":
            default = policy.train_on_tool_results if m["role"] == "tool" else False
            for f in mine:
                intervals += _part_intervals(f, default, row_number, warnings)
            cursor = max([cursor] + [f.end for f in mine])
            continue
        turn = i in trained_turn
        scaffold = turn and (not m.get("tool_calls") or policy.train_on_tool_calls)
        first = mine[0].start if mine else nxt
        gp = markers.generation_prompt
        pos = text.rfind(gp, cursor, first) if gp else -1
        start = pos + len(gp) if pos >= 0 else first
        after = max([start] + [f.end for f in mine])
        eot = markers.end_of_turn
        mpos = text.find(eot, after, nxt) if eot else -1
        end = mpos + len(eot) if mpos >= 0 else after
        fill = start
        for f in mine:
            if f.kind in ("content", "reasoning"):
                if fill == start and f.kind == "content" and f.start > start and turn:
                    # text the template writes before the turn's content when the row has
                    # no reasoning (an empty reasoning block): the template's, not the row's
                    warnings.append(_inserted(row_number, i, text[start : f.start]))
                    intervals.append((fill, f.start, False))
                else:
                    intervals.append((fill, f.start, scaffold))
                intervals += _part_intervals(f, turn, row_number, warnings)
                fill = f.end
        intervals.append((fill, end, scaffold))
        cursor = end
    return Rendered(text, _merge(intervals), warnings)


def prompt_mismatches(
    tokenizer: Any,
    rows: list[dict[str, Any]],
    policy: LossPolicy,
    row_numbers: list[int],
    ids: list[list[int]],
    rewrites_only: bool = False,
) -> dict[int, list[str]]:
    """Trained assistant turns whose text is not what an endpoint generates them from.

    For each trained assistant turn ``i`` of a row (whose full rendering tokenized to its
    entry of ``ids``), two renderings must be token prefixes of the row's tokens: the
    conversation before it with the generation prompt, as an endpoint renders a request
    (else the prompt is written or tokenized differently at generation), and the
    conversation ending with turn ``i`` (else the template writes the turn otherwise once
    later turns follow, so it would train on text it is never generated as). Issue 15
    item 5; the dataset findings and ``data preview`` report them. Conversations without
    tools are rendered in one call per kind, and tokenized in one batch.

    With ``rewrites_only`` only the second rendering is compared (what training refuses:
    :func:`akka_optimize.data.masks.encode_rows`); the first is reported, not refused.

    Returns:
        ``{row number: [sentences starting "row N: messages[i]"]}`` for rows with a
        mismatch; rows without one are absent.
    """
    checks: list[tuple[int, int, bool, list[dict], Any]] = []  # row index, turn, gp, conv
    for r, row in enumerate(rows):
        if r % 256 == 0:
            cancel.check()
        real, _sent, tools, _sent_tools, _fields = _sentinel_row(row)
        turns = [i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"]
        for i in turns if policy.assistant_turns == "all" else turns[-1:]:
            if not rewrites_only:
                checks.append((r, i, True, real[:i], tools))
            if i + 1 < len(real):
                checks.append((r, i, False, real[: i + 1], tools))
    texts = _render_checks(tokenizer, checks)
    encoded = tokenizer.backend_tokenizer.encode_batch(
        [t for t in texts if isinstance(t, str)], add_special_tokens=False
    )
    tokens = iter(encoded)
    out: dict[int, list[str]] = {}
    prompt_failed: set[tuple[int, int]] = set()
    for (r, i, gp, _conv, _tools), text in zip(checks, texts, strict=True):
        n = row_numbers[r]
        where = f"row {n}: messages[{i}]"
        if not isinstance(text, str):
            out.setdefault(n, []).append(
                f"{where}: the chat template cannot render the turn's prompt: {text}"
            )
            prompt_failed.add((r, i))
            continue
        t = next(tokens).ids
        if ids[r][: len(t)] == t or (r, i) in prompt_failed:
            continue
        k = _first_difference(t, ids[r])
        if gp:
            prompt_failed.add((r, i))
            out.setdefault(n, []).append(
                f"{where}: its prompt as an endpoint renders it ({len(t)} tokens, with the "
                f"generation prompt) is not a prefix of the row's tokens (they differ at token "
                f"{k}); the turn trains after text it is never generated from"
            )
        else:
            out.setdefault(n, []).append(
                f"{where}: the chat template writes this turn otherwise once later turns "
                f"follow than where it is generated (they differ at token {k}); it would "
                "train on text it is never generated as. Train only the last turn "
                "(config.loss.assistantTurns: last) or split the row"
            )
    return out


def _render_checks(
    tokenizer: Any, checks: list[tuple[int, int, bool, list[dict], Any]]
) -> list[str | Exception]:
    """Texts of :func:`prompt_mismatches`'s conversations: those without tools in one
    ``apply_chat_template`` call per generation-prompt setting, the others one by one; a
    conversation the template refuses gets its exception."""
    texts: list[str | Exception] = [ValueError("not rendered")] * len(checks)
    for gp in (True, False):
        plain = [k for k, c in enumerate(checks) if c[2] is gp and not c[4]]
        if plain:
            try:
                batch = _render(
                    tokenizer, [checks[k][3] for k in plain], None, add_generation_prompt=gp
                )
                for k, text in zip(plain, batch, strict=True):
                    texts[k] = text
            except Exception:  # one conversation made the template raise: one by one below
                pass
    for k, (_r, _i, gp, conv, tools) in enumerate(checks):
        if isinstance(texts[k], str):
            continue
        try:
            texts[k] = _render(tokenizer, conv, tools, add_generation_prompt=gp)
        except Exception as exc:  # the template's own refusal (raise_exception, TypeError…)
            texts[k] = exc
    return texts


def _first_difference(a: list[int], b: list[int]) -> int:
    """The first 0-based index where ``a`` and ``b`` differ (or the shorter's length)."""
    return next(
        (k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _inserted(row_number: int, msg: int, text: str) -> str:
    """The findings warning for template text written into an assistant turn before its
    content that the row does not contain (issue 15 item 5: never supervised)."""
    shown = text if len(text) <= 60 else text[:57] + "..."
    return (
        f"row {row_number}: the chat template inserts {shown!r} into messages[{msg}], an "
        "assistant turn, before its content; that text is not in the row and is not trained "
        "(an endpoint's model is not taught to write it)"
    )


def _merge(intervals: list[tuple[int, int, bool]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b, flag in sorted(intervals):
        if not flag or b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out
