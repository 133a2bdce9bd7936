"""A preview a user can read: each row as the base model's template renders it, trained spans marked.

The segments come from the token weights themselves (a character is supervised when the
token holding it trains), so the preview shows exactly what training will see, including
masked straddling tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from akka_optimize.data.masks import encode_rows
from akka_optimize.data.policy import LossPolicy
from akka_optimize.data.render import RenderError


def segments(
    text: str, offsets: list[tuple[int, int]], weights: list[float]
) -> list[dict[str, Any]]:
    """Split ``text`` into runs of supervised / not supervised characters.

    Returns:
        ``[{"text": str, "supervised": bool}, ...]`` whose texts concatenate to ``text``.
    """
    flags = [False] * len(text)
    for (a, b), w in zip(offsets, weights, strict=True):
        if w:
            for c in range(a, b):
                flags[c] = True
    out: list[dict[str, Any]] = []
    start = 0
    for i in range(1, len(text) + 1):
        if i == len(text) or flags[i] != flags[start]:
            out.append({"text": text[start:i], "supervised": flags[start]})
            start = i
    return out


def preview(
    tokenizer: Any,
    rows: Sequence[dict[str, Any]],
    policy: LossPolicy,
    n: int,
    row_numbers: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Render the first ``n`` rows with their supervised spans.

    Args:
        tokenizer: the base model's fast tokenizer.
        rows: normalised rows; ``row_numbers`` default to 1..N.
        policy: the loss policy (the plan's, or the default).
        n: how many rows (from the start).

    Returns:
        Per row ``{"row", "segments": [{"text", "supervised"}], "tokens",
        "supervised_tokens", "warnings"}``, or ``{"row", "error"}`` for a row the template
        cannot render correctly.
    """
    numbers = (row_numbers or list(range(1, len(rows) + 1)))[:n]
    errors: list[RenderError] = []
    encoded = {e.example.row: e for e in encode_rows(tokenizer, rows[:n], policy, numbers, errors)}
    failed = {e.row: e.message for e in errors}
    out = []
    for num in numbers:
        if num in failed:
            out.append({"row": num, "error": failed[num]})
            continue
        enc = encoded[num]
        out.append(
            {
                "row": num,
                "segments": segments(enc.rendered.text, enc.offsets, enc.example.weights),
                "tokens": len(enc.example.input_ids),
                "supervised_tokens": enc.example.supervised_tokens,
                "warnings": enc.rendered.warnings,
            }
        )
    return out
