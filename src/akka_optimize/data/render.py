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

This module owns steps 3–4 (what the template dropped, which spans train); the sentinel
rendering, the template's markers and :class:`RenderError` are
:mod:`akka_optimize.data.sentinels`, and :func:`prompt_mismatches` (turns an endpoint
would generate from other text) is :mod:`akka_optimize.data.prompt_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.prompt_checks import prompt_mismatches as prompt_mismatches
from akka_optimize.data.sentinels import RenderError as RenderError
from akka_optimize.data.sentinels import (
    SentinelField,
    image_fields,
    locate,
    render_all,
    sentinel_row,
)
from akka_optimize.data.sentinels import template_markers as template_markers


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


def _dropped(
    row: dict[str, Any], fields: list[SentinelField], trained_turn: set[int]
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
    f: SentinelField, default: bool, row: int, warnings: list[str]
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
    prepared = [sentinel_row(r) for r in rows]
    out: list[Rendered | None] = []
    for row, n, p, texts in zip(
        rows, row_numbers, prepared, render_all(tokenizer, prepared), strict=True
    ):
        try:
            images = image_fields(row)
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
    fields: list[SentinelField],
) -> Rendered:
    locate(sent_text, text, fields, row_number)
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
    by_msg: dict[int, list[SentinelField]] = {}
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
